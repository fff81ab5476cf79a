#include "registry.hpp"

#include <sys/random.h>

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>

namespace mc::transfer::detail {
std::uint64_t random_nonzero_u64() {
  for (;;) {
    std::uint64_t t = 0;
    auto n = ::getrandom(&t, sizeof t, 0);
    if (n == static_cast<ssize_t>(sizeof t) && t != 0) return t;
    if (n < 0 && errno != EINTR) throw std::runtime_error("transfer: getrandom failed");
  }
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

mc::result<std::uint64_t> registry::add(void* addr, std::size_t len, region_access rights,
                                        std::optional<std::uint32_t> low32) {
  auto base = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(addr));
  if (addr == nullptr || len == 0 || base + len < base) return fail(errc::invalid_params);
  auto e = std::make_shared<region_entry>();
  e->base = base;
  e->length = len;
  e->rights = rights;
  std::unique_lock lk(m_);
  do {
    e->token = random_nonzero_u64();
    if (low32) e->token = (e->token & ~0xffffffffull) | *low32;
  } while (e->token == 0 || by_token_.count(e->token));
  by_token_.emplace(e->token, e);
  return e->token;
}

mc::result<void> registry::remove(std::uint64_t token) {
  std::shared_ptr<region_entry> e;
  {
    std::unique_lock lk(m_);
    auto it = by_token_.find(token);
    if (it == by_token_.end()) return fail(errc::out_of_range);
    e = it->second;
    by_token_.erase(it);
  }
  {
    // Waits for a syscall / memcpy chunk in progress on another thread.
    std::unique_lock lk(e->access);
    e->revoked = true;
  }
  if (on_remove) on_remove(token);
  // Revoke at once, reclaim later: outstanding same-host grants keep `e`
  // alive (shared_ptr) until released, their connection closes or their
  // lease expires; nothing here waits for a peer.
  std::lock_guard lk(e->grant_m);
  e->grants_closed = true;
  if (e->grants > 0 && monotonic_ns() < e->lease_end) revoked_with_grants_.fetch_add(1, std::memory_order_relaxed);
  return {};
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
