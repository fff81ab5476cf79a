// Index, allocation with LRU eviction / demotion, commit, get, remove.
#include "backend_core.hpp"

#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <cstring>

namespace mc::store::detail {

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
    return victim{*it, v};
  }
  return std::nullopt;
}

void backend_core::evict(victim& vic) {
  bool dropped = false;
  {
    std::lock_guard lk(m_);
    auto it = index_.find(vic.key);
    if (it != index_.end() && it->second.v == vic.v) {
      vic.v->t->lru.erase(it->second.lru_it);
      --vic.v->t->values;
      index_.erase(it);
      dropped = true;
    }
  }
  if (dropped) {
    ++vic.v->t->evictions;
    notify(vic.key, removal_reason::evicted);
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
  it->second = entry{std::move(*dst), to.lru.begin()};
  ++from.t->demotions;
  co_return demote_result::moved;
}

result<void> backend_core::commit(std::string key, std::shared_ptr<value> v) {
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
  it->second = entry{std::move(v), t->lru.begin()};
  return {};
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
  std::shared_ptr<value> old;
  std::string name;
  {
    std::lock_guard lk(m_);
    auto it = index_.find(key);
    if (it == index_.end()) return mc::fail(mc::errc::object_not_found);
    it->second.v->t->lru.erase(it->second.lru_it);
    --it->second.v->t->values;
    old = std::move(it->second.v);
    name = it->first;
    index_.erase(it);
  }
  old.reset();
  notify(name, removal_reason::removed);
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
  for (auto& [k, e] : index_) fn(key_info{k, e.v->size, e.v->t->cfg.type});
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

void backend_core::notify(const std::string& key, removal_reason why) {
  tiered_backend::observer fn;
  {
    std::lock_guard lk(m_);
    fn = observer_;
  }
  if (fn) fn(key, why);
}

}  // namespace mc::store::detail
