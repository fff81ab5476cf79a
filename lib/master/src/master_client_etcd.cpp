// master_client's etcd side (master_client_locator.hpp): resolving the
// leader, following it with watches, ignoring older terms, and the client's
// own membership record under its lease.
#include "master_client_locator.hpp"

#include "mc/runtime/endpoint.hpp"

namespace mc::master {

task<bool> master_client::keep_membership(std::shared_ptr<locator> l, std::string id, bool put) {
  if (l->etcd.endpoints().empty() || l->busy.exchange(true)) co_return l->recorded.load();
  struct release {
    locator* l;
    ~release() { l->busy.store(false); }
  } done{l.get()};
  std::int64_t lease = 0;
  std::uint64_t left = 0;
  std::chrono::steady_clock::time_point renewed;
  {
    std::lock_guard lk(l->m);
    lease = l->lease;
    renewed = l->renewed;
    left = l->left;
    if (lease == 0 && l->wanted) put = true;  // an earlier round could not write it: now
  }
  const auto now = std::chrono::steady_clock::now();
  if (lease == 0 && !put) co_return false;  // not registered (or left): nothing to renew
  if (lease != 0 && now - renewed >= l->membership_ttl / 3) {
    auto k = co_await l->etcd.keepalive(lease);
    if (!k && !put) co_return l->recorded.load();  // etcd unreachable: the next round tries again
    if (k && *k > 0) {
      std::lock_guard lk(l->m);
      l->renewed = now;
    } else if (k) {
      lease = 0;  // lapsed, and the record with it: a new lease, the record again
      l->recorded.store(false);
      put = true;
    }
  }
  if (!put) co_return l->recorded.load();
  // The record under the lease; a put refused because the lease lapsed
  // meanwhile (etcd unreachable past its TTL) is tried once more under a new one.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (lease == 0) {
      auto g = co_await l->etcd.grant(l->membership_ttl.count());
      if (!g) break;
      lease = g->id;
      std::lock_guard lk(l->m);
      if (l->left != left) break;  // unregistered meanwhile: no record (the lease lapses unused)
      l->lease = lease;
      l->renewed = std::chrono::steady_clock::now();
    }
    {
      std::lock_guard lk(l->m);
      if (l->left != left) break;
    }
    if (co_await l->etcd.put(l->members + id, id, lease)) {
      l->recorded.store(true);
      co_return true;
    }
    lease = 0;
  }
  l->recorded.store(false);
  co_return false;
}

task<result<std::string>> master_client::resolve() {
  if (!locator_) co_return address_;
  {
    std::lock_guard lk(locator_->m);
    if (!locator_->leader.empty()) co_return locator_->leader;
  }
  if (locator_->etcd.endpoints().empty()) co_return fail(errc::invalid_params);
  auto kv = co_await locator_->etcd.get(locator_->key);
  if (!kv) co_return kv.error();
  if (!*kv) co_return fail(errc::unavailable_in_current_status);           // no leader elected now
  if (!mc::endpoint::parse((*kv)->value)) co_return fail(errc::rpc_fail);  // not what a master writes
  std::lock_guard lk(locator_->m);
  locator_->leader = (*kv)->value;
  co_return locator_->leader;
}

task<void> master_client::follow_leader(std::function<void()> on_new_leader, mc::duration window) {
  if (!locator_ || locator_->etcd.endpoints().empty()) co_return;
  auto l = locator_;
  constexpr auto pause = std::chrono::milliseconds(250);
  // A key a master wrote: its address becomes the one calls go to; a term
  // newer than every reply so far is a new leader to register with.
  auto apply = [&](const etcd_kv& kv) {
    if (!mc::endpoint::parse(kv.value)) return;  // not what a master writes: ignore
    bool newer = false;
    {
      std::lock_guard lk(l->m);
      l->leader = kv.value;
      newer = kv.create_revision > 0 && static_cast<std::uint64_t>(kv.create_revision) > l->max_term;
    }
    if (newer && on_new_leader) on_new_leader();
  };
  auto vacant = [&] {
    std::lock_guard lk(l->m);
    l->leader.clear();
  };
  co_await l->etcd.follow(
      l->key,
      [&](const std::optional<etcd_kv>& kv) {
        if (kv)
          apply(*kv);
        else
          vacant();
        return true;
      },
      window, pause, &l->watch_failures);
}

std::uint64_t master_client::leader_watch_failures() const noexcept {
  return locator_ ? locator_->watch_failures.load(std::memory_order_relaxed) : 0;
}

bool master_client::stale_term(std::uint64_t term) {
  if (!locator_) return false;
  std::lock_guard lk(locator_->m);
  if (term < locator_->max_term) {
    locator_->leader.clear();  // an old leader answered: read etcd again
    return true;
  }
  locator_->max_term = term;
  return false;
}

boost::system::error_code master_client::note(boost::system::error_code e) {
  if (locator_ &&
      (mc::is(e, errc::rpc_fail) || mc::is(e, errc::timeout) || mc::is(e, errc::unavailable_in_current_status))) {
    std::lock_guard lk(locator_->m);
    locator_->leader.clear();
  }
  return e;
}

}  // namespace mc::master
