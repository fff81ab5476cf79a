#include "mc/master/ha.hpp"

#include "mc/runtime/blocking.hpp"
#include "mc/runtime/runtime.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/post.hpp>

#include <cstdio>
#include <future>

namespace mc::master {
namespace {

using clock = std::chrono::steady_clock;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now().time_since_epoch()).count();
}
std::int64_t ns(mc::duration d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); }

}  // namespace

std::string ha_leader_key(const std::string& cluster_id) { return "mooncake-store/" + cluster_id + "/master_view"; }
std::string ha_clients_prefix(const std::string& cluster_id) { return "mooncake-store/" + cluster_id + "/clients/"; }
std::string ha_members_prefix(const std::string& cluster_id) { return "mooncake-store/" + cluster_id + "/members/"; }

result<void> check_cluster_id(const std::string& id) {
  if (id.empty() || id.size() > 128) return fail(errc::invalid_params);
  for (char c : id)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
          c == '-'))
      return fail(errc::invalid_params);
  return {};
}

struct leader_elector::state {
  state(mc::runtime::runtime& r, ha_options opts, std::function<void(std::uint64_t)> e, std::function<void()> l)
      : rt(r),
        o(std::move(opts)),
        etcd(o.etcd_endpoints, o.etcd_timeout, o.security),
        on_elected(std::move(e)),
        on_lost(std::move(l)) {}

  mc::runtime::runtime& rt;
  ha_options o;
  etcd_client etcd;
  std::function<void(std::uint64_t)> on_elected;
  std::function<void()> on_lost;

  std::atomic<std::uint64_t> term{0};
  std::atomic<std::int64_t> valid_until{0};  ///< steady clock, ns
  std::atomic<std::uint64_t> elections{0};
  std::atomic<std::uint64_t> watch_failures{0};
  std::atomic<bool> stopping{false};
  /// The election this process holds (for resigning); 0 when none.
  std::atomic<std::int64_t> lease_id{0};
  std::atomic<std::int64_t> create_revision{0};
  mutable std::mutex m;
  std::string leader;  ///< guarded by m

  boost::asio::cancellation_signal cancel;  ///< used on runtime thread 0 only
  std::promise<void> done;
  bool started = false;
  bool stopped = false;

  void set_leader(std::string l) {
    std::lock_guard lk(m);
    leader = std::move(l);
  }
  mc::duration margin() const {
    return std::max<mc::duration>(std::chrono::milliseconds(100),
                                  std::chrono::duration_cast<mc::duration>(o.lease_ttl) / 10);
  }
  std::int64_t ttl_s() const {
    auto ms = o.lease_ttl.count();
    return std::max<std::int64_t>(1, (ms + 999) / 1000);
  }
};

namespace {

task<void> campaign(std::shared_ptr<leader_elector::state> s) {
  co_await boost::asio::this_coro::throw_if_cancelled(false);
  const auto key = ha_leader_key(s->o.cluster_id);
  while (!s->stopping.load()) {
    auto g = co_await s->etcd.grant(s->ttl_s());
    if (!g) {
      if (s->stopping.load()) break;
      auto slept = co_await mc::sleep_for(s->o.poll);
      if (!slept) break;
      continue;
    }
    auto sent = clock::now();
    s->lease_id.store(g->id);
    auto c = co_await s->etcd.create_if_absent(key, s->o.advertise, g->id);
    if (!c || !c->created) {
      // Not elected (or unknown): give the lease back, watch the holder.
      s->lease_id.store(0);
      (void)co_await s->etcd.revoke(g->id);
      // Follow the key from just after the holder's last write (or from a
      // read of it): its deletion (resigned, or its lease expired) wakes us
      // at once to campaign.
      if (c && c->holder.key.empty()) continue;  // it vanished after the compare: campaign
      std::int64_t from = 0;
      if (c) {
        s->set_leader(c->holder.value);
        from = c->holder.mod_revision + 1;
      } else {
        auto slept = co_await mc::sleep_for(s->o.poll);
        if (!slept) break;
      }
      co_await s->etcd.follow(
          key,
          [&s](const std::optional<etcd_kv>& kv) {
            if (!kv) return false;  // vacant: campaign
            s->set_leader(kv->value);
            return true;
          },
          s->o.watch_window, s->o.poll, &s->watch_failures, from);
      continue;
    }
    // Elected: the lease was valid from `sent` for at least its TTL.
    s->create_revision.store(c->revision);
    s->valid_until.store(ns((sent + std::chrono::seconds(g->ttl_s) - s->margin()).time_since_epoch()));
    s->term.store(static_cast<std::uint64_t>(c->revision));
    s->set_leader(s->o.advertise);
    s->elections.fetch_add(1);
    std::fprintf(stderr, "mooncake_master: elected leader of cluster '%s' (term %lld, lease %llds)\n",
                 s->o.cluster_id.c_str(), static_cast<long long>(c->revision), static_cast<long long>(g->ttl_s));
    if (s->on_elected) s->on_elected(static_cast<std::uint64_t>(c->revision));
    const auto every = std::chrono::duration_cast<mc::duration>(s->o.lease_ttl) / 3;
    while (!s->stopping.load()) {
      auto slept = co_await mc::sleep_for(every);
      if (!slept) break;
      auto t0 = clock::now();
      auto k = co_await s->etcd.keepalive(g->id);
      if (k && *k > 0) s->valid_until.store(ns((t0 + std::chrono::seconds(*k) - s->margin()).time_since_epoch()));
      if ((k && *k == 0) || now_ns() >= s->valid_until.load()) break;  // expired, or could have
    }
    s->term.store(0);
    s->valid_until.store(0);
    if (s->stopping.load()) break;  // stop() resigns
    s->lease_id.store(0);
    s->create_revision.store(0);
    std::fprintf(stderr, "mooncake_master: lost the leadership of cluster '%s' (lease not renewed in time)\n",
                 s->o.cluster_id.c_str());
    if (s->on_lost) s->on_lost();
  }
}

}  // namespace

leader_elector::leader_elector(mc::runtime::runtime& rt, ha_options o, std::function<void(std::uint64_t)> on_elected,
                               std::function<void()> on_lost)
    : s_(std::make_shared<state>(rt, std::move(o), std::move(on_elected), std::move(on_lost))) {}

leader_elector::~leader_elector() { stop(); }

void leader_elector::start() {
  if (s_->started) return;
  s_->started = true;
  auto s = s_;
  boost::asio::co_spawn(
      s->rt.executor(0), campaign(s),
      boost::asio::bind_cancellation_slot(s->cancel.slot(), [s](std::exception_ptr) { s->done.set_value(); }));
}

void leader_elector::stop() {
  if (!s_->started || s_->stopped) return;
  s_->stopped = true;
  s_->stopping.store(true);
  mc::runtime::assert_may_block("mc::master::leader_elector::stop");
  auto s = s_;
  boost::asio::post(s->rt.executor(0), [s] { s->cancel.emit(boost::asio::cancellation_type::terminal); });
  s->done.get_future().wait();
  s->term.store(0);
  s->valid_until.store(0);
  auto rev = s->create_revision.exchange(0);
  auto lease = s->lease_id.exchange(0);
  if (rev == 0 && lease == 0) return;
  // Resign: delete our key (only if it is still our election) and revoke the
  // lease, so a standby is elected now rather than after the lease.
  std::promise<void> resigned;
  boost::asio::co_spawn(
      s->rt.executor(0),
      [s, rev, lease]() -> task<void> {
        if (rev != 0) (void)co_await s->etcd.del_if_created(ha_leader_key(s->o.cluster_id), rev);
        if (lease != 0) (void)co_await s->etcd.revoke(lease);
      },
      [&resigned](std::exception_ptr) { resigned.set_value(); });
  resigned.get_future().wait();
}

bool leader_elector::leading() const noexcept { return s_->term.load() != 0 && now_ns() < s_->valid_until.load(); }
std::uint64_t leader_elector::term() const noexcept { return leading() ? s_->term.load() : 0; }
std::string leader_elector::leader() const {
  std::lock_guard lk(s_->m);
  return s_->leader;
}
std::uint64_t leader_elector::elections() const noexcept { return s_->elections.load(); }
std::uint64_t leader_elector::watch_failures() const noexcept { return s_->watch_failures.load(); }

}  // namespace mc::master
