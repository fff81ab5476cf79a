// Index, allocation with LRU eviction / demotion, commit, get, remove.
#include "backend_core.hpp"

#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <cstring>
#include <ctime>

namespace mc::tiered::detail {

task<result<std::shared_ptr<value>>> backend_core::allocate(std::size_t size, std::optional<tier_type> preferred) {
  std::vector<tier*> order;
  for (auto& t : tiers) order.push_back(t.get());
  if (preferred)
    std::stable_partition(order.begin(), order.end(), [&](tier* t) { return t->cfg.type == *preferred; });
  bool fits_somewhere = false;
  for (tier* t : order) {
    if (size > t->cfg.capacity) continue;
    fits_somewhere = true;
    auto r = co_await allocate_in(*t, size);
    if (r) co_return r;
    if (!mc::is(r.error(), mc::errc::no_available_handle)) co_return r;
  }
  co_return mc::fail(fits_somewhere ? mc::errc::no_available_handle : mc::errc::too_large);
}

task<result<std::shared_ptr<value>>> backend_core::allocate_in(tier& t, std::size_t size) {
  for (;;) {
    if (auto off = t.try_alloc(size)) {
      auto v = std::make_shared<value>(&t, *off, size);
      v->core = this;
      co_return v;
    }
    auto cs = co_await boost::asio::this_coro::cancellation_state;
    if (cs.cancelled() != boost::asio::cancellation_type::none) co_return mc::fail(mc::errc::cancelled);
    auto vic = pick_victim(t);
    if (!vic) {
      ++t.failures;
      co_return mc::fail(mc::errc::no_available_handle);
    }
    auto outcome = demote_result::failed;
    if (tier* lower = lower_tier(t); lower && vic->v->size <= lower->cfg.capacity)
      outcome = co_await demote(*vic, *lower);
    if (outcome == demote_result::cancelled) {
      vic->v->moving = false;  // keep the value where it is
      co_return mc::fail(mc::errc::cancelled);
    }
    if (outcome == demote_result::failed) evict(*vic);
    // Dropping vic frees the space unless a reader pinned it meanwhile.
  }
}

tier* backend_core::lower_tier(const tier& t) const {
  return t.index + 1 < tiers.size() ? tiers[t.index + 1].get() : nullptr;
}

std::optional<backend_core::victim> backend_core::pick_victim(tier& t) {
  std::lock_guard lk(m_);
  for (auto it = t.lru.rbegin(); it != t.lru.rend(); ++it) {
    auto e = index_.find(*it);
    if (e == index_.end()) continue;
    auto& v = e->second.v;
    // use_count is stable here: new pins are only taken under m_.
    if (v.use_count() != 1 || v->moving.load()) continue;
    v->moving = true;
    return victim{*it, v, e->second.version};
  }
  return std::nullopt;
}

void backend_core::evict(victim& vic) {
  bool dropped = false;
  {
    std::lock_guard lk(m_);
    auto it = index_.find(vic.key);
    if (it != index_.end() && it->second.v == vic.v) {
      vic.version = it->second.version;
      (void)unindex(it);  // vic.v still owns the value
      dropped = true;
    }
  }
  if (dropped) {
    ++vic.v->t->evictions;
    notify(vic.key, vic.version, removal_reason::evicted);
  }
}

task<backend_core::demote_result> backend_core::demote(victim& vic, tier& to) {
  auto& from = *vic.v;
  if (from.t->cfg.type != tier_type::dram) co_return demote_result::failed;  // SSD values are dropped
  auto dst = co_await allocate_in(to, vic.v->size);
  if (!dst)
    co_return mc::is(dst.error(), mc::errc::cancelled) ? demote_result::cancelled : demote_result::failed;
  if (to.cfg.type == tier_type::ssd) {
    auto w = co_await ssd_write(**dst, 0, {from.dram(), from.size}, /*reserved=*/true);
    if (!w) co_return mc::is(w.error(), mc::errc::cancelled) ? demote_result::cancelled : demote_result::failed;
  } else {
    std::memcpy((*dst)->dram(), from.dram(), from.size);
  }
  std::lock_guard lk(m_);
  auto it = index_.find(vic.key);
  if (it == index_.end() || it->second.v != vic.v) co_return demote_result::moved;  // removed/replaced meanwhile
  from.t->lru.erase(it->second.lru_it);
  --from.t->values;
  to.lru.push_front(vic.key);
  ++to.values;
  it->second = entry{std::move(*dst), to.lru.begin(), it->second.version};  // same value, same version
  ++from.t->demotions;
  co_return demote_result::moved;
}

std::pair<std::shared_ptr<value>, value_version> backend_core::unindex(index_map::iterator it) {
  it->second.v->t->lru.erase(it->second.lru_it);
  --it->second.v->t->values;
  std::pair<std::shared_ptr<value>, value_version> out{std::move(it->second.v), it->second.version};
  index_.erase(it);
  return out;
}

value_version backend_core::issue_version() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  auto now = static_cast<value_version>(ts.tv_sec) * 1'000'000'000u + static_cast<value_version>(ts.tv_nsec);
  auto last = last_version_.load(std::memory_order_relaxed);
  for (;;) {
    auto next = std::max(last + 1, now);
    if (last_version_.compare_exchange_weak(last, next, std::memory_order_relaxed)) return next;
  }
}

result<value_version> backend_core::commit(std::string key, std::shared_ptr<value> v) {
  std::shared_ptr<value> old;  // destroyed after the lock is released
  std::lock_guard lk(m_);
  auto* t = v->t;
  auto [it, inserted] = index_.try_emplace(std::move(key));
  if (!inserted) {
    it->second.v->t->lru.erase(it->second.lru_it);
    --it->second.v->t->values;
    old = std::move(it->second.v);
  }
  t->lru.push_front(it->first);
  ++t->values;
  // Issued under m_: two commits of one key are ordered like their versions.
  auto version = issue_version();
  it->second = entry{std::move(v), t->lru.begin(), version};
  return version;
}

result<value_version> backend_core::version_of(std::string_view key) const {
  std::lock_guard lk(m_);
  auto it = index_.find(key);
  if (it == index_.end()) return mc::fail(mc::errc::object_not_found);
  return it->second.version;
}

result<std::shared_ptr<const value>> backend_core::get(std::string_view key) {
  std::lock_guard lk(m_);
  auto it = index_.find(key);
  if (it == index_.end()) return mc::fail(mc::errc::object_not_found);
  auto& lru = it->second.v->t->lru;
  lru.splice(lru.begin(), lru, it->second.lru_it);
  return std::shared_ptr<const value>(it->second.v);
}

result<void> backend_core::remove(std::string_view key) {
  std::pair<std::shared_ptr<value>, value_version> old;
  std::string name;
  {
    std::lock_guard lk(m_);
    auto it = index_.find(key);
    if (it == index_.end()) return mc::fail(mc::errc::object_not_found);
    name = it->first;
    old = unindex(it);
  }
  old.first.reset();
  notify(name, old.second, removal_reason::removed);
  return {};
}

result<void> backend_core::drop_superseded(std::string_view key, value_version version) {
  std::pair<std::shared_ptr<value>, value_version> old;
  std::string name;
  {
    std::lock_guard lk(m_);
    auto it = index_.find(key);
    if (it == index_.end()) return mc::fail(mc::errc::object_not_found);
    if (it->second.version > version) return mc::fail(mc::errc::invalid_version);
    name = it->first;
    old = unindex(it);
  }
  old.first.reset();
  notify(name, old.second, removal_reason::superseded);
  return {};
}

bool backend_core::exists(std::string_view key) const {
  std::lock_guard lk(m_);
  return index_.find(key) != index_.end();
}

std::size_t backend_core::count() const {
  std::lock_guard lk(m_);
  return index_.size();
}

void backend_core::for_each(const std::function<void(const key_info&)>& fn) const {
  std::lock_guard lk(m_);
  for (auto& [k, e] : index_) fn(key_info{k, e.v->size, e.v->t->cfg.type, e.version});
}

std::vector<tier_usage> backend_core::usage() const {
  std::vector<tier_usage> out;
  for (auto& t : tiers) {
    auto s = t->stats();
    tier_usage u;
    u.type = t->cfg.type;
    u.priority = t->cfg.priority;
    u.capacity = s.capacity;
    u.used = s.used;
    {
      std::lock_guard lk(m_);
      u.values = t->values;
    }
    u.evictions = t->evictions.load();
    u.demotions = t->demotions.load();
    u.allocation_failures = t->failures.load();
    u.largest_free = s.largest_free;
    u.fragmentation = s.fragmentation;
    out.push_back(u);
  }
  return out;
}

void backend_core::set_observer(tiered_backend::observer fn) {
  std::lock_guard lk(m_);
  observer_ = std::move(fn);
}

void backend_core::notify(const std::string& key, value_version version, removal_reason why) {
  tiered_backend::observer fn;
  {
    std::lock_guard lk(m_);
    fn = observer_;
  }
  if (fn) fn(key, version, why);
}

}  // namespace mc::tiered::detail
