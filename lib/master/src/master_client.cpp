#include "mc/master/master_client.hpp"

#include "mc/master/etcd.hpp"
#include "mc/runtime/endpoint.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <utility>

#include "client_info_wire.hpp"
#include "master_client_locator.hpp"
#include "master.capnp.h"
#include "mc/rpc/capnp.hpp"

namespace mc::master {
namespace {

using detail::str;
using detail::text;

result<void> from_status(Status::Reader s) {
  if (s.getCode() == 0) return {};
  auto e = errc_from_value(s.getCode());  // an unknown code from the wire is RPC_FAIL
  return make_error_code(e && *e != errc::ok ? *e : errc::rpc_fail);
}

replica read_replica(Replica::Reader r) {
  return {str(r.getClientId()), str(r.getRpcEndpoint()), str(r.getTransferEndpoint())};
}

using detail::read_info;

task<result<Master::Client>> connect_master(const std::string& address) {
  co_return co_await mc::rpc::connect<Master>(address, "master");
}

}  // namespace

/// Pause between two attempts of a call retried across a failover.
constexpr auto retry_pause = std::chrono::milliseconds(100);

/// An error a call may meet while the masters fail over (no leader answers,
/// a deposed one refuses, the new one does not know this client yet).
bool failover_error(const boost::system::error_code& e, bool client_unknown_too) {
  return mc::is(e, errc::rpc_fail) || mc::is(e, errc::timeout) || mc::is(e, errc::unavailable_in_current_status) ||
         (client_unknown_too && mc::is(e, errc::client_not_found));
}

/// HA: repeats `attempt()` while it fails with a failover error, until the
/// deadline (an attempt already under way may end after it, by at most one
/// call's timeout).
template <class T, class F>
task<result<T>> across_failover(F attempt, mc::duration timeout, bool client_unknown_too) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    result<T> r = co_await attempt();
    if (r || !failover_error(r.error(), client_unknown_too) ||
        std::chrono::steady_clock::now() + retry_pause >= deadline)
      co_return r;
    auto slept = co_await mc::sleep_for(retry_pause);
    if (!slept) co_return slept.error();
  }
}

result<void> check_master_address(std::string_view address, std::string* why) {
  if (address.starts_with("etcd://")) {
    auto eps = parse_etcd_endpoints(address, why);
    if (!eps) return eps.error();
    return {};
  }
  std::string_view w;
  if (mc::endpoint::parse(address, &w)) return {};
  if (why) *why = std::string(w);
  return fail(errc::invalid_params);
}

master_client::master_client(std::string address, mc::duration timeout, std::string cluster_id,
                             std::chrono::seconds membership_ttl, const etcd_security_options& etcd)
    : address_(std::move(address)), timeout_(timeout) {
  if (address_.starts_with("etcd://")) {
    bool tls = false;
    auto eps = parse_etcd_endpoints(address_, nullptr, &tls);
    auto sec = eps ? etcd_security::load(etcd, tls) : result<etcd_security>(eps.error());
    // A bad locator or security settings keep no endpoints: every call
    // fails invalid_params.
    locator_ =
        std::make_shared<locator>(eps && sec ? std::move(*eps) : std::vector<std::string>{}, timeout,
                                  std::move(cluster_id), membership_ttl, sec ? std::move(*sec) : etcd_security{});
  }
}

std::string master_client::current_master() const {
  if (!locator_) return address_;
  std::lock_guard lk(locator_->m);
  return locator_->leader;
}

task<result<void>> master_client::register_client(client_info info) {
  if (locator_) {
    {
      std::lock_guard lk(locator_->m);
      locator_->wanted = true;
    }
    // Recorded already (the record outlives failovers): nothing to do here.
    // Else one attempt of at most a second, so that an unreachable etcd
    // never holds a registration up; the heartbeats' rounds go on trying.
    if (locator_->recorded.load()) {
      info.own_membership = true;
    } else {
      auto r = co_await mc::with_deadline(
          [](std::shared_ptr<locator> l, std::string id) -> task<result<int>> {
            co_return (co_await keep_membership(std::move(l), std::move(id), true)) ? 1 : 0;
          }(locator_, info.client_id),
          std::chrono::seconds(1));
      info.own_membership = r && *r == 1;
    }
  }
  auto where = co_await resolve();
  if (!where) co_return where.error();
  auto m = co_await connect_master(*where);
  if (!m) co_return note(m.error());
  auto req = m->registerClientRequest();
  detail::set_info(req.initInfo(), info);
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return note(r.error());
  if (stale_term(r->getTerm())) co_return fail(errc::unavailable_in_current_status);
  auto st = from_status(r->getStatus());
  if (st) {
    // The publish call port is on the host we dialled (not a host the
    // master names: its own idea of its address may not be reachable).
    std::string ep;
    if (auto at = mc::endpoint::parse(*where); at && r->getPublishPort() != 0)
      if (auto e = at->with_port(r->getPublishPort())) ep = e->str();
    std::lock_guard lk(publish_route_->m);
    publish_route_->master = *where;
    publish_route_->endpoint = std::move(ep);
  }
  co_return st;
}

std::string master_client::publish_call_endpoint() const {
  auto now = current_master();
  std::lock_guard lk(publish_route_->m);
  return !now.empty() && publish_route_->master == now ? publish_route_->endpoint : std::string{};
}

task<result<holder_notices>> master_client::heartbeat(std::string client_id, std::uint64_t used, std::uint64_t capacity,
                                                      notice_ack ack) {
  if (locator_) {
    // The membership lease is renewed beside each heartbeat, whatever the
    // master answers (the record must outlive a failover), never in its way
    // (an etcd call may take its whole deadline).
    boost::asio::co_spawn(co_await boost::asio::this_coro::executor, keep_membership(locator_, client_id, false),
                          boost::asio::detached);
  }
  auto where = co_await resolve();
  if (!where) co_return where.error();
  auto m = co_await connect_master(*where);
  if (!m) co_return note(m.error());
  auto req = m->heartbeatRequest();
  req.setClientId(text(client_id));
  req.setUsed(used);
  req.setCapacity(capacity);
  req.setAckEpoch(ack.epoch);
  req.setAckId(ack.id);
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return note(r.error());
  if (stale_term(r->getTerm())) co_return fail(errc::unavailable_in_current_status);
  if (auto st = from_status(r->getStatus()); !st) co_return st.error();
  auto drops = r->getDrops();
  if (drops.size() > max_drops_per_heartbeat) co_return fail(errc::rpc_fail);  // not what a master sends
  auto repairs = r->getRepairs();
  if (repairs.size() > max_repairs_per_heartbeat) co_return fail(errc::rpc_fail);
  holder_notices out;
  out.resync = r->getResync();
  out.notice_epoch = r->getNoticeEpoch();
  out.notice_id = r->getNoticeId();
  for (auto d : drops) out.drops.push_back({str(d.getKey()), d.getVersion()});
  for (auto t : repairs)
    out.repairs.push_back({str(t.getKey()), t.getVersion(), t.getReplication(), read_replica(t.getTarget())});
  co_return out;
}

task<result<void>> master_client::unregister_client(std::string client_id) {
  if (locator_) {
    // The membership record first (revoking its lease deletes it): a leader
    // elected from now on does not wait for a client that is leaving.
    std::int64_t lease = 0;
    {
      std::lock_guard lk(locator_->m);
      lease = std::exchange(locator_->lease, 0);
      ++locator_->left;
      locator_->wanted = false;
    }
    locator_->recorded.store(false);
    if (lease != 0) (void)co_await locator_->etcd.revoke(lease);
  }
  auto where = co_await resolve();
  if (!where) co_return where.error();
  auto m = co_await connect_master(*where);
  if (!m) co_return note(m.error());
  auto req = m->unregisterClientRequest();
  req.setClientId(text(client_id));
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return note(r.error());
  co_return from_status(r->getStatus());
}

task<result<std::vector<result<void>>>> master_client::add_replicas_once(std::string client_id,
                                                                         std::vector<publish_item> items,
                                                                         publish_kind kind, std::uint64_t epoch) {
  auto where = co_await resolve();
  if (!where) co_return where.error();
  auto m = co_await connect_master(*where);
  if (!m) co_return note(m.error());
  auto req = m->addReplicasRequest();
  req.setClientId(text(client_id));
  req.setRepublish(kind == publish_kind::republish);
  req.setEpoch(epoch);
  auto list = req.initItems(static_cast<unsigned>(items.size()));
  for (unsigned i = 0; i < items.size(); ++i) {
    list[i].setKey(text(items[i].key));
    list[i].setSize(items[i].size);
    list[i].setVersion(items[i].version);
    list[i].setReplication(items[i].replication);
  }
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return note(r.error());
  std::vector<result<void>> out;
  for (auto s : r->getResults()) out.push_back(from_status(s));
  if (out.size() != items.size()) co_return fail(errc::rpc_fail);
  co_return out;
}

task<result<std::vector<result<void>>>> master_client::remove_replicas(std::string client_id,
                                                                       std::vector<key_version> items) {
  auto where = co_await resolve();
  if (!where) co_return where.error();
  auto m = co_await connect_master(*where);
  if (!m) co_return note(m.error());
  auto req = m->removeReplicasRequest();
  req.setClientId(text(client_id));
  auto list = req.initItems(static_cast<unsigned>(items.size()));
  for (unsigned i = 0; i < items.size(); ++i) {
    list[i].setKey(text(items[i].key));
    list[i].setVersion(items[i].version);
  }
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return note(r.error());
  std::vector<result<void>> out;
  for (auto s : r->getResults()) out.push_back(from_status(s));
  if (out.size() != items.size()) co_return fail(errc::rpc_fail);
  co_return out;
}

task<result<std::uint64_t>> master_client::finish_republish(std::string client_id, std::uint64_t epoch) {
  auto where = co_await resolve();
  if (!where) co_return where.error();
  auto m = co_await connect_master(*where);
  if (!m) co_return note(m.error());
  auto req = m->finishRepublishRequest();
  req.setClientId(text(client_id));
  req.setEpoch(epoch);
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return note(r.error());
  if (auto st = from_status(r->getStatus()); !st) co_return st.error();
  co_return r->getRemoved();
}

task<result<std::vector<result<key_info>>>> master_client::lookup_once(const std::vector<std::string>& keys) {
  auto where = co_await resolve();
  if (!where) co_return where.error();
  auto m = co_await connect_master(*where);
  if (!m) co_return note(m.error());
  // Sized to fit in one segment: a batch's message is then one contiguous
  // block to build and to read (a multi-segment one costs a segment lookup
  // per pointer that crosses segments).
  std::uint64_t words = 8;
  for (const auto& k : keys) words += 1 + (k.size() + 8) / 8;
  auto req = m->getReplicaListRequest(capnp::MessageSize{words, 0});
  auto list = req.initKeys(static_cast<unsigned>(keys.size()));
  for (unsigned i = 0; i < keys.size(); ++i) list.set(i, text(keys[i]));
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return note(r.error());
  std::vector<result<key_info>> out;
  auto results = r->getResults();
  out.reserve(results.size());
  for (auto kr : results) {
    if (auto st = from_status(kr.getStatus()); !st) {
      out.emplace_back(st.error());
      continue;
    }
    key_info ki;
    ki.size = kr.getSize();
    auto reps = kr.getReplicas();
    ki.replicas.reserve(reps.size());
    for (auto rep : reps) ki.replicas.push_back(read_replica(rep));
    out.emplace_back(std::move(ki));
  }
  if (out.size() != keys.size()) co_return fail(errc::rpc_fail);
  co_return out;
}

task<result<std::vector<result<void>>>> master_client::add_replicas(std::string client_id,
                                                                    std::vector<publish_item> items, publish_kind kind,
                                                                    std::uint64_t epoch) {
  if (!locator_) co_return co_await add_replicas_once(std::move(client_id), std::move(items), kind, epoch);
  // A publish is idempotent per (key, holder, version): safe to repeat. Until
  // this client has re-registered with a new leader, that leader answers
  // client_not_found: wait for the heartbeat loop's re-registration.
  co_return co_await across_failover<std::vector<result<void>>>(
      [&] { return add_replicas_once(client_id, items, kind, epoch); }, timeout_, true);
}

task<result<replica>> master_client::write_route(std::uint64_t size, std::string exclude) {
  if (!locator_) co_return co_await write_route_once(size, std::move(exclude));
  co_return co_await across_failover<replica>([&] { return write_route_once(size, exclude); }, timeout_, false);
}

task<result<std::vector<replica>>> master_client::remove_key(std::string key) {
  if (!locator_) co_return co_await remove_key_once(std::move(key));
  co_return co_await across_failover<std::vector<replica>>([&] { return remove_key_once(key); }, timeout_, false);
}

task<result<client_info>> master_client::get_client(std::string client_id) {
  if (!locator_) co_return co_await get_client_once(std::move(client_id));
  co_return co_await across_failover<client_info>([&] { return get_client_once(client_id); }, timeout_, false);
}

task<result<std::vector<result<key_info>>>> master_client::lookup(std::vector<std::string> keys) {
  if (!locator_) co_return co_await lookup_once(keys);
  // HA: while no leader answers (failover) or the new one is rebuilding its
  // table (unavailable_in_current_status per key), retry within the deadline.
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    auto r = co_await lookup_once(keys);
    bool again = !r ? (mc::is(r.error(), errc::rpc_fail) || mc::is(r.error(), errc::timeout) ||
                       mc::is(r.error(), errc::unavailable_in_current_status))
                    : std::any_of(r->begin(), r->end(), [](const result<key_info>& k) {
                        return !k && mc::is(k.error(), errc::unavailable_in_current_status);
                      });
    if (!again || std::chrono::steady_clock::now() + retry_pause >= deadline) co_return r;
    auto slept = co_await mc::sleep_for(retry_pause);
    if (!slept) co_return slept.error();
  }
}

task<result<key_info>> master_client::lookup(std::string key) {
  std::vector<std::string> keys{std::move(key)};
  auto r = co_await lookup(std::move(keys));
  if (!r) co_return r.error();
  co_return std::move(r->front());
}

task<result<replica>> master_client::write_route_once(std::uint64_t size, std::string exclude) {
  auto where = co_await resolve();
  if (!where) co_return where.error();
  auto m = co_await connect_master(*where);
  if (!m) co_return note(m.error());
  auto req = m->writeRouteRequest();
  req.setSize(size);
  req.setExclude(text(exclude));
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return note(r.error());
  if (auto st = from_status(r->getStatus()); !st) co_return st.error();
  co_return read_replica(r->getReplica());
}

task<result<std::vector<replica>>> master_client::write_routes(std::uint64_t size, std::uint32_t count,
                                                               std::vector<std::string> exclude) {
  if (count == 0 || count > replication::max_copies || exclude.size() > max_route_excludes)
    co_return fail(errc::invalid_params);
  if (!locator_) co_return co_await write_routes_once(size, count, exclude);
  co_return co_await across_failover<std::vector<replica>>([&] { return write_routes_once(size, count, exclude); },
                                                           timeout_, false);
}

task<result<std::vector<replica>>> master_client::write_routes_once(std::uint64_t size, std::uint32_t count,
                                                                    const std::vector<std::string>& exclude) {
  auto where = co_await resolve();
  if (!where) co_return where.error();
  auto m = co_await connect_master(*where);
  if (!m) co_return note(m.error());
  auto req = m->writeRoutesRequest();
  req.setSize(size);
  req.setCount(count);
  auto ex = req.initExclude(static_cast<unsigned>(exclude.size()));
  for (unsigned i = 0; i < exclude.size(); ++i) ex.set(i, text(exclude[i]));
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return note(r.error());
  if (auto st = from_status(r->getStatus()); !st) co_return st.error();
  std::vector<replica> out;
  for (auto rep : r->getReplicas()) out.push_back(read_replica(rep));
  if (out.empty() || out.size() > count) co_return fail(errc::rpc_fail);  // not what a master sends
  co_return out;
}

task<result<std::vector<replica>>> master_client::remove_key_once(std::string key) {
  auto where = co_await resolve();
  if (!where) co_return where.error();
  auto m = co_await connect_master(*where);
  if (!m) co_return note(m.error());
  auto req = m->removeKeyRequest();
  req.setKey(text(key));
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return note(r.error());
  if (auto st = from_status(r->getStatus()); !st) co_return st.error();
  std::vector<replica> out;
  for (auto rep : r->getReplicas()) out.push_back(read_replica(rep));
  co_return out;
}

task<result<master_client::removal_page>> master_client::remove_matching(std::string pattern, bool all,
                                                                         std::uint32_t limit,
                                                                         std::uint32_t from_shard) {
  auto where = co_await resolve();
  if (!where) co_return where.error();
  auto m = co_await connect_master(*where);
  if (!m) co_return note(m.error());
  auto req = m->removeMatchingRequest();
  req.setPattern(text(pattern));
  req.setAll(all);
  req.setLimit(limit);
  req.setFromShard(from_shard);
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return note(r.error());
  if (auto st = from_status(r->getStatus()); !st) co_return st.error();
  auto list = r->getRemoved();
  if (list.size() > limit) co_return fail(errc::rpc_fail);  // more than asked for: not a master we trust
  removal_page page;
  page.removed.reserve(list.size());
  for (auto k : list) {
    metadata::removed_key rk;
    rk.key = str(k.getKey());
    for (auto rep : k.getReplicas()) rk.holders.push_back(read_replica(rep));
    page.removed.push_back(std::move(rk));
  }
  if (r->getMore()) {
    auto next = r->getNextShard();
    if (next < from_shard || (next == from_shard && page.removed.empty())) co_return fail(errc::rpc_fail);
    page.next_shard = next;
  }
  co_return page;
}

task<result<std::vector<client_status>>> master_client::clients() {
  auto where = co_await resolve();
  if (!where) co_return where.error();
  auto m = co_await connect_master(*where);
  if (!m) co_return note(m.error());
  auto r = co_await mc::rpc::call(m->listClientsRequest().send(), timeout_);
  if (!r) co_return note(r.error());
  std::vector<client_status> out;
  for (auto c : r->getClients()) {
    client_status s;
    auto i = c.getInfo();
    s.info = read_info(i);
    std::string h = c.getHealth();
    s.state = h == "healthy" ? health::healthy : h == "suspect" ? health::suspect : health::dead;
    s.since_heartbeat = std::chrono::milliseconds(c.getSinceHeartbeatMs());
    s.keys = c.getKeys();
    out.push_back(std::move(s));
  }
  co_return out;
}

task<result<client_info>> master_client::get_client_once(std::string client_id) {
  auto where = co_await resolve();
  if (!where) co_return where.error();
  auto m = co_await connect_master(*where);
  if (!m) co_return note(m.error());
  auto req = m->getClientRequest();
  req.setClientId(text(client_id));
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return note(r.error());
  if (auto st = from_status(r->getStatus()); !st) co_return st.error();
  co_return read_info(r->getInfo());
}

}  // namespace mc::master
