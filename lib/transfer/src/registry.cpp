#include "registry.hpp"

#include <sys/random.h>

#include <cerrno>
#include <stdexcept>

namespace mc::transfer::detail {
namespace {
std::uint64_t random_token() {
  for (;;) {
    std::uint64_t t = 0;
    auto n = ::getrandom(&t, sizeof t, 0);
    if (n == static_cast<ssize_t>(sizeof t) && t != 0) return t;
    if (n < 0 && errno != EINTR) throw std::runtime_error("transfer: getrandom failed");
  }
}
}  // namespace

bool region_entry::try_grant() {
  std::lock_guard lk(grant_m);
  if (grants_closed) return false;
  ++grants;
  return true;
}

void region_entry::release_grant() {
  std::lock_guard lk(grant_m);
  if (--grants == 0) grant_cv.notify_all();
}

mc::result<std::uint64_t> registry::add(void* addr, std::size_t len, std::optional<std::uint32_t> low32) {
  auto base = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(addr));
  if (addr == nullptr || len == 0 || base + len < base) return fail(errc::invalid_params);
  auto e = std::make_shared<region_entry>();
  e->base = base;
  e->length = len;
  std::unique_lock lk(m_);
  do {
    e->token = random_token();
    if (low32) e->token = (e->token & ~0xffffffffull) | *low32;
  } while (e->token == 0 || by_token_.count(e->token));
  by_token_.emplace(e->token, e);
  by_base_.emplace(base, e);
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
    auto [b, end] = by_base_.equal_range(e->base);
    for (; b != end; ++b)
      if (b->second == e) {
        by_base_.erase(b);
        break;
      }
  }
  {
    // Waits for a syscall / memcpy chunk in progress on another thread.
    std::unique_lock lk(e->access);
    e->revoked = true;
  }
  if (on_remove) on_remove(token);
  std::unique_lock lk(e->grant_m);
  e->grants_closed = true;
  e->grant_cv.wait(lk, [&] { return e->grants == 0; });
  return {};
}

mc::result<std::shared_ptr<region_entry>> registry::find(std::uint64_t addr, std::uint64_t len,
                                                         std::uint64_t token) const {
  if (len == 0) return fail(errc::invalid_params);
  std::shared_lock lk(m_);
  auto it = by_token_.find(token);
  if (it != by_token_.end()) {
    if (!it->second->contains(addr, len)) return fail(errc::out_of_range);
    return it->second;
  }
  // Unknown token: tell "wrong secret for registered memory" from
  // "memory nobody registered". Overlaps are rare; look at a few candidates.
  auto b = by_base_.upper_bound(addr);
  for (int i = 0; i < 16 && b != by_base_.begin(); ++i) {
    --b;
    if (b->second->contains(addr, len)) return fail(errc::access_denied);
  }
  return fail(errc::out_of_range);
}

std::size_t registry::size() const {
  std::shared_lock lk(m_);
  return by_token_.size();
}

}  // namespace mc::transfer::detail
