#include "registry.hpp"

#include "csprng.hpp"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <vector>

namespace mc::transfer::detail {
std::uint64_t random_nonzero_u64() {
  for (;;)
    if (auto t = csprng_u64(); t != 0) return t;
}

std::uint64_t monotonic_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

bool region_entry::try_grant(std::uint64_t lease_end_ns) {
  std::lock_guard lk(grant_m);
  if (grants_closed) return false;
  ++grants;
  lease_end = std::max(lease_end, lease_end_ns);
  return true;
}

void region_entry::release_grant() {
  std::lock_guard lk(grant_m);
  if (grants > 0) --grants;
}

std::uint64_t registry::fresh_token(std::uint64_t mask, std::uint64_t set) const {
  for (;;) {
    const std::uint64_t t = (random_nonzero_u64() & mask) | set;
    if (t != 0 && !by_token_.count(t)) return t;
  }
}

mc::result<added_region> registry::add(void* addr, std::size_t len, region_access rights,
                                       std::optional<std::uint32_t> low32, bool derivable,
                                       std::shared_ptr<const shared_memory> shared) {
  auto base = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(addr));
  if (addr == nullptr || len == 0 || base + len < base) return fail(errc::invalid_params);
  auto e = std::make_shared<region_entry>();
  e->base = base;
  e->length = len;
  e->rights = rights;
  e->shared = std::move(shared);
  std::unique_lock lk(m_);
  // RDMA: (random 31 bits << 32) | rkey, bit 63 clear (derived_token_bit).
  e->token = low32 ? fresh_token(~derived_token_bit & ~0xffffffffull, *low32) : fresh_token(~0ull, 0);
  e->root = e->token;
  e->id = next_id_++;
  by_token_.emplace(e->token, e);
  if (derivable) by_base_.emplace(e->base, e.get());
  return added_region{e->token, e->id};
}

mc::result<added_region> registry::add_child(std::uint64_t parent_token, std::uint64_t parent_id, std::uint64_t addr,
                                             std::uint64_t len, region_access rights) {
  std::unique_lock lk(m_);
  auto it = by_token_.find(parent_token);
  if (it == by_token_.end() || (parent_id != 0 && it->second->id != parent_id)) return fail(errc::out_of_range);
  region_entry& p = *it->second;
  if (len == 0 || !p.contains(addr, len) || !grants(p.rights, rights)) return fail(errc::invalid_params);
  auto e = std::make_shared<region_entry>();
  e->base = addr;
  e->length = len;
  e->rights = rights;
  return publish_child(p, std::move(e));
}

mc::result<added_region> registry::add_child_ranges(std::uint64_t parent_token, std::uint64_t parent_id,
                                                    std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges,
                                                    region_access rights) {
  if (ranges.empty() || ranges.size() > max_child_ranges) return fail(errc::invalid_params);
  for (auto& [a, n] : ranges)
    if (n == 0 || a + n < a) return fail(errc::invalid_params);
  // Sorted and merged outside the lock.
  std::sort(ranges.begin(), ranges.end());
  std::size_t k = 0;
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    auto& last = ranges[k];
    if (ranges[i].first <= last.first + last.second) {
      last.second = std::max(last.first + last.second, ranges[i].first + ranges[i].second) - last.first;
    } else {
      ranges[++k] = ranges[i];
    }
  }
  ranges.resize(k + 1);
  auto e = std::make_shared<region_entry>();
  e->base = ranges.front().first;
  e->length = ranges.back().first + ranges.back().second - e->base;
  e->rights = rights;
  if (ranges.size() > 1) e->ranges = std::move(ranges);  // one range: a plain child
  std::unique_lock lk(m_);
  auto it = by_token_.find(parent_token);
  if (it == by_token_.end() || (parent_id != 0 && it->second->id != parent_id)) return fail(errc::out_of_range);
  region_entry& p = *it->second;
  // The span inside the parent holds every range.
  if (!p.contains(e->base, e->length) || !grants(p.rights, rights)) return fail(errc::invalid_params);
  return publish_child(p, std::move(e));
}

added_region registry::publish_child(region_entry& p, std::shared_ptr<region_entry> e) {
  e->parent = p.token;
  e->root = p.root;
  e->shared = p.shared;
  e->token =
      rdma_tokens ? fresh_token(~0xffffffffull, derived_token_bit | (p.token & 0xffffffffull)) : fresh_token(~0ull, 0);
  e->id = next_id_++;
  p.children.insert(e->token);
  const added_region out{e->token, e->id};
  by_token_.emplace(e->token, std::move(e));
  return out;
}

void registry::revoke(region_entry& e) {
  {
    // Waits for a syscall / memcpy chunk in progress on another thread.
    std::unique_lock lk(e.access);
    e.revoked = true;
  }
  // Revoke at once, reclaim later: outstanding same-host grants keep `e`
  // alive (shared_ptr) until released, their connection closes or their
  // lease expires; nothing here waits for a peer.
  std::lock_guard lk(e.grant_m);
  e.grants_closed = true;
  if (e.grants > 0 && monotonic_ns() < e.lease_end) revoked_with_grants_.fetch_add(1, std::memory_order_relaxed);
}

mc::result<void> registry::remove(std::uint64_t token, std::uint64_t id) {
  std::vector<std::shared_ptr<region_entry>> gone;  // the entry, then its descendants
  {
    std::unique_lock lk(m_);
    auto it = by_token_.find(token);
    if (it == by_token_.end() || (id != 0 && it->second->id != id)) return fail(errc::out_of_range);
    gone.push_back(it->second);
    by_token_.erase(it);
    const region_entry& e = *gone.front();
    if (e.parent != 0) {
      if (auto p = by_token_.find(e.parent); p != by_token_.end()) p->second->children.erase(e.token);
    } else {
      auto [b, end] = by_base_.equal_range(e.base);
      for (; b != end; ++b)
        if (b->second == &e) {
          by_base_.erase(b);
          break;
        }
    }
    for (std::size_t i = 0; i < gone.size(); ++i)  // breadth first, no recursion
      for (auto c : gone[i]->children)
        if (auto ci = by_token_.find(c); ci != by_token_.end()) {
          gone.push_back(ci->second);
          by_token_.erase(ci);
        }
  }
  for (auto it = gone.rbegin(); it != gone.rend(); ++it) revoke(**it);  // children first
  if (gone.front()->parent == 0 && on_remove) on_remove(token);
  return {};
}

std::optional<containing_region> registry::find_containing(std::uint64_t addr, std::uint64_t len,
                                                           region_access need) const {
  if (len == 0 || addr + len < addr) return std::nullopt;
  std::shared_lock lk(m_);
  auto b = by_base_.upper_bound(addr);
  for (int i = 0; i < 16 && b != by_base_.begin(); ++i) {
    --b;
    const region_entry& e = *b->second;
    if (e.contains(addr, len) && grants(e.rights, need))
      return containing_region{e.token, e.id, e.base, e.length, e.rights};
  }
  return std::nullopt;
}

std::optional<std::uint64_t> registry::root_of(std::uint64_t token) const {
  std::shared_lock lk(m_);
  auto it = by_token_.find(token);
  if (it == by_token_.end()) return std::nullopt;
  return it->second->root;
}

mc::result<std::shared_ptr<region_entry>> registry::find(std::uint64_t addr, std::uint64_t len, std::uint64_t token,
                                                         region_access need) const {
  if (len == 0) return fail(errc::invalid_params);
  std::shared_lock lk(m_);
  auto it = by_token_.find(token);
  // One answer for every "not yours": the peer cannot probe what is registered.
  if (it == by_token_.end() || !it->second->contains(addr, len) || !grants(it->second->rights, need))
    return fail(errc::access_denied);
  return it->second;
}

std::optional<region_access> registry::rights(std::uint64_t token) const {
  std::shared_lock lk(m_);
  auto it = by_token_.find(token);
  if (it == by_token_.end()) return std::nullopt;
  return it->second->rights;
}

std::size_t registry::size() const {
  std::shared_lock lk(m_);
  return by_token_.size();
}

}  // namespace mc::transfer::detail
