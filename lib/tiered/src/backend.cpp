// Index (sharded), allocation with CLOCK eviction / demotion, commit, get, remove.
#include "backend_core.hpp"

#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <cstring>

namespace mc::tiered::detail {

task<result<std::shared_ptr<value>>> backend_core::allocate(std::size_t size, std::optional<tier_type> preferred) {
  std::vector<tier*> order;
  for (auto& t : tiers) order.push_back(t.get());
  if (preferred) std::stable_partition(order.begin(), order.end(), [&](tier* t) { return t->cfg.type == *preferred; });
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
  std::lock_guard lk(t.q_m);
  // CLOCK from the oldest end: a referenced, pinned or moving value goes back
  // to the head (a referenced one loses its mark). Two passes at most: after
  // one, every mark is cleared and only pinned or moving values remain.
  for (std::uint64_t steps = 0, limit = 2 * t.values; t.q_tail && steps < limit; ++steps) {
    value* v = t.q_tail;
    // use_count 1 = only the index owns it. A get may pin it right after:
    // the reader keeps its copy alive and the space is freed when it lets go.
    const bool pinned = v->weak_from_this().use_count() != 1;
    if (v->referenced.exchange(false, std::memory_order_relaxed) || pinned || v->moving.load()) {
      if (t.q_head != v) {
        t.dequeue(v);
        t.enqueue(v);
      }
      continue;
    }
    v->moving = true;
    return victim{*v->key, v->shared_from_this(), 0};
  }
  return std::nullopt;
}

void backend_core::link(value& v, const std::string& k) noexcept {
  std::lock_guard lk(v.t->q_m);
  v.key = &k;
  v.t->enqueue(&v);
  ++v.t->values;
}

void backend_core::unlink(value& v) noexcept {
  std::lock_guard lk(v.t->q_m);
  v.t->dequeue(&v);
  v.key = nullptr;
  --v.t->values;
}

void backend_core::evict(victim& vic) {
  bool dropped = false;
  {
    auto& sh = shard_of(vic.key);
    std::lock_guard lk(sh.m);
    auto it = sh.map.find(vic.key);
    if (it != sh.map.end() && it->second.v == vic.v) {
      vic.version = it->second.version;
      (void)unindex(sh, it);  // vic.v still owns the value
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
  if (!dst) co_return mc::is(dst.error(), mc::errc::cancelled) ? demote_result::cancelled : demote_result::failed;
  if (to.cfg.type == tier_type::ssd) {
    auto w = co_await ssd_write(**dst, 0, {from.dram(), from.size}, /*reserved=*/true);
    if (!w) co_return mc::is(w.error(), mc::errc::cancelled) ? demote_result::cancelled : demote_result::failed;
  } else {
    std::memcpy((*dst)->dram(), from.dram(), from.size);
  }
  auto& sh = shard_of(vic.key);
  std::lock_guard lk(sh.m);
  auto it = sh.map.find(vic.key);
  if (it == sh.map.end() || it->second.v != vic.v) co_return demote_result::moved;  // removed/replaced meanwhile
  unlink(from);
  link(**dst, it->first);
  it->second.v = std::move(*dst);  // same value, same version
  ++from.t->demotions;
  co_return demote_result::moved;
}

std::pair<std::shared_ptr<value>, value_version> backend_core::unindex(shard& sh, index_map::iterator it) {
  unlink(*it->second.v);
  std::pair<std::shared_ptr<value>, value_version> out{std::move(it->second.v), it->second.version};
  sh.map.erase(it);
  count_.fetch_sub(1, std::memory_order_relaxed);
  return out;
}

value_version backend_core::issue_version() noexcept {
  const auto now = wall_clock_version();
  auto last = last_version_.load(std::memory_order_relaxed);
  for (;;) {
    auto next = std::max(last + 1, now);
    if (last_version_.compare_exchange_weak(last, next, std::memory_order_relaxed)) return next;
  }
}

result<value_version> backend_core::commit(std::string key, std::shared_ptr<value> v, value_tag tag,
                                           value_version version) {
  std::shared_ptr<value> old;  // destroyed after the lock is released (as is `v` when refused)
  auto& sh = shard_of(key);
  std::lock_guard lk(sh.m);
  if (version != 0) {
    // A version the caller took when its put started: an older one than the
    // value held loses (this put was overtaken by a newer one).
    if (auto it = sh.map.find(key); it != sh.map.end() && it->second.version > version)
      return mc::fail(mc::errc::superseded);
    observe_version(version);
  }
  auto [it, inserted] = sh.map.try_emplace(std::move(key));
  if (!inserted) {
    unlink(*it->second.v);
    old = std::move(it->second.v);
  } else {
    count_.fetch_add(1, std::memory_order_relaxed);
  }
  link(*v, it->first);
  // Issued under the key's shard: two commits of one key are ordered like their versions.
  if (version == 0) version = issue_version();
  it->second = entry{std::move(v), version, tag};
  return version;
}

void backend_core::observe_version(value_version version) noexcept {
  auto last = last_version_.load(std::memory_order_relaxed);
  while (last < version && !last_version_.compare_exchange_weak(last, version, std::memory_order_relaxed)) {}
}

result<value_version> backend_core::version_of(std::string_view key) const {
  auto& sh = shard_of(key);
  std::lock_guard lk(sh.m);
  auto it = sh.map.find(key);
  if (it == sh.map.end()) return mc::fail(mc::errc::object_not_found);
  return it->second.version;
}

result<value_stamp> backend_core::stamp_of(std::string_view key) const {
  auto& sh = shard_of(key);
  std::lock_guard lk(sh.m);
  auto it = sh.map.find(key);
  if (it == sh.map.end()) return mc::fail(mc::errc::object_not_found);
  return value_stamp{it->second.version, it->second.tag};
}

result<std::shared_ptr<const value>> backend_core::get(std::string_view key) {
  auto& sh = shard_of(key);
  std::lock_guard lk(sh.m);
  auto it = sh.map.find(key);
  if (it == sh.map.end()) return mc::fail(mc::errc::object_not_found);
  auto& v = *it->second.v;
  if (!v.referenced.load(std::memory_order_relaxed)) v.referenced.store(true, std::memory_order_relaxed);
  return std::shared_ptr<const value>(it->second.v);
}

result<void> backend_core::remove(std::string_view key) {
  std::pair<std::shared_ptr<value>, value_version> old;
  std::string name;
  {
    auto& sh = shard_of(key);
    std::lock_guard lk(sh.m);
    auto it = sh.map.find(key);
    if (it == sh.map.end()) return mc::fail(mc::errc::object_not_found);
    name = it->first;
    old = unindex(sh, it);
  }
  old.first.reset();
  notify(name, old.second, removal_reason::removed);
  return {};
}

result<void> backend_core::drop_superseded(std::string_view key, value_version version) {
  std::pair<std::shared_ptr<value>, value_version> old;
  std::string name;
  {
    auto& sh = shard_of(key);
    std::lock_guard lk(sh.m);
    auto it = sh.map.find(key);
    if (it == sh.map.end()) return mc::fail(mc::errc::object_not_found);
    if (it->second.version > version) return mc::fail(mc::errc::invalid_version);
    name = it->first;
    old = unindex(sh, it);
  }
  old.first.reset();
  notify(name, old.second, removal_reason::superseded);
  return {};
}

bool backend_core::exists(std::string_view key) const {
  auto& sh = shard_of(key);
  std::lock_guard lk(sh.m);
  return sh.map.find(key) != sh.map.end();
}

std::size_t backend_core::count() const { return count_.load(std::memory_order_relaxed); }

void backend_core::for_each(const std::function<void(const key_info&)>& fn) const {
  // One shard at a time: a key committed or removed meanwhile may or may not be seen.
  for (auto& sh : shards_) {
    std::lock_guard lk(sh.m);
    for (auto& [k, e] : sh.map) fn(key_info{k, e.v->size, e.v->t->cfg.type, e.version, e.tag});
  }
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
      std::lock_guard lk(t->q_m);
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
  std::lock_guard lk(observer_m_);
  observer_ = std::move(fn);
}

void backend_core::notify(const std::string& key, value_version version, removal_reason why) {
  tiered_backend::observer fn;
  {
    std::lock_guard lk(observer_m_);
    fn = observer_;
  }
  if (fn) fn(key, version, why);
}

}  // namespace mc::tiered::detail
