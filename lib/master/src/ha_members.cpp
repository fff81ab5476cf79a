// The etcd membership records of master HA (ha_members.hpp): the leader's
// records of clients that cannot record themselves, and a new leader's wait
// for every recorded client to re-publish before a miss may be "not found".
#include "ha_members.hpp"

#include "mc/runtime/runtime.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <chrono>
#include <cstdio>

namespace mc::master {
namespace {

/// The ids recorded under both prefixes; an error when either read failed.
task<result<std::set<std::string>>> recorded_members(std::shared_ptr<ha_members> h) {
  std::set<std::string> ids;
  for (const auto* prefix : {&h->prefix, &h->own_prefix}) {
    auto listed = co_await h->etcd.get_prefix(*prefix, 1'000'000);
    if (!listed) co_return listed.error();
    for (auto& kv : *listed) ids.insert(kv.key.substr(prefix->size()));
  }
  co_return ids;
}

}  // namespace

task<void> record_member(std::shared_ptr<ha_members> h, std::string id, std::uint64_t term) {
  // The lease is granted right after the election: wait for it (bounded).
  for (int i = 0; i < 100 && h->lease.load() == 0 && h->term.load() == term; ++i) {
    auto slept = co_await mc::sleep_for(std::chrono::milliseconds(50));
    if (!slept) co_return;
  }
  auto lease = h->lease.load();
  if (lease == 0 || h->term.load() != term) co_return;
  (void)co_await h->etcd.put(h->prefix + id, id, lease);
}

/// An unregistered or dropped client: the record the leader wrote for it
/// goes. One a client keeps itself stays while its lease lives (it revokes
/// it when it unregisters; a dropped client that is alive keeps it, and a
/// next leader waits for it at most the membership TTL, see lead_term).
task<void> forget_member(std::shared_ptr<ha_members> h, std::string id) { (void)co_await h->etcd.del(h->prefix + id); }

/// The record the leader wrote for a client that now records itself.
task<void> forget_leader_record(std::shared_ptr<ha_members> h, std::string id) {
  (void)co_await h->etcd.del(h->prefix + id);
}

/// One term's membership lease and rebuild: runs while `term` leads.
task<void> lead_term(std::shared_ptr<ha_members> h, std::uint64_t term, mc::duration poll) {
  auto t0 = std::chrono::steady_clock::now();
  auto leading = [&] { return h->term.load() == term && !h->stopping.load(); };
  // The records of the previous leader's clients, read before our own lease
  // exists (so none of ours is mistaken for an old one; ours re-publish anyway).
  std::set<std::string> waiting;
  for (;;) {
    if (!leading()) co_return;
    auto listed = co_await recorded_members(h);
    if (listed) {
      waiting = std::move(*listed);
      break;
    }
    auto slept = co_await mc::sleep_for(poll);
    if (!slept) co_return;
  }
  std::fprintf(stderr, "mooncake_master: term %llu: waiting for %zu registered clients to re-publish\n",
               static_cast<unsigned long long>(term), waiting.size());
  std::int64_t lease = 0;
  auto renewed = std::chrono::steady_clock::now();
  while (leading()) {
    if (lease == 0) {
      if (auto g = co_await h->etcd.grant(h->ttl_s); g) {
        lease = g->id;
        h->lease.store(lease);
        renewed = std::chrono::steady_clock::now();
      }
    } else if (std::chrono::steady_clock::now() - renewed > std::chrono::seconds(h->ttl_s) / 3) {
      auto k = co_await h->etcd.keepalive(lease);
      if (k && *k > 0) renewed = std::chrono::steady_clock::now();
      if (k && *k == 0) {  // lapsed (etcd unreachable too long): a new lease, records re-put
        lease = 0;
        h->lease.store(0);
        for (auto& c : h->md.clients())
          if (!c.info.own_membership)
            boost::asio::co_spawn(h->rt.executor(0), record_member(h, c.info.client_id, term), boost::asio::detached);
      }
    }
    if (h->gate.rebuilding.load()) {
      {
        std::lock_guard lk(h->m);
        for (auto& id : h->republished) waiting.erase(id);
      }
      if (!waiting.empty()) {
        // A record that lapsed (its client is gone too) ends the wait for it.
        if (auto still = co_await recorded_members(h); still)
          std::erase_if(waiting, [&](const std::string& id) { return !still->contains(id); });
      }
      if (!waiting.empty() && std::chrono::steady_clock::now() - t0 > std::chrono::seconds(h->ttl_s)) {
        // Alive in etcd but not back here within the members TTL (e.g. cut
        // off from the masters only): as a client silent that long, no
        // longer waited for.
        std::fprintf(stderr, "mooncake_master: term %llu: %zu recorded clients did not re-publish within %llds\n",
                     static_cast<unsigned long long>(term), waiting.size(), static_cast<long long>(h->ttl_s));
        waiting.clear();
      }
      if (waiting.empty() && leading()) {
        h->gate.rebuilding.store(false);
        std::fprintf(
            stderr, "mooncake_master: term %llu: table rebuilt in %lld ms\n", static_cast<unsigned long long>(term),
            static_cast<long long>(
                std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count()));
      }
    }
    auto slept = co_await mc::sleep_for(poll);
    if (!slept) co_return;
  }
}

}  // namespace mc::master
