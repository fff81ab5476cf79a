// Shared-memory registrations (engine::allocate_shared): a memfd this
// process maps once; same-host peers granted a range of it may map it too
// (see shm_server.cpp / shm_transport.cpp).
#include "engine_impl.hpp"
#include "registry.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>

namespace mc::transfer {
namespace detail {

shared_memory::~shared_memory() {
  if (addr != nullptr) ::munmap(addr, len);
  if (fd >= 0) ::close(fd);
}

mc::result<std::shared_ptr<const shared_memory>> shared_memory::create(std::size_t len) {
  if (len == 0) return fail(errc::invalid_params);
  auto m = std::make_shared<shared_memory>();
  m->fd = ::memfd_create("mooncake-p2p.shared", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (m->fd < 0) return fail(errc::no_available_handle);
  // Its size is fixed for good: a peer mapping it never faults past the end.
  if (::ftruncate(m->fd, static_cast<off_t>(len)) != 0 ||
      ::fcntl(m->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return fail(errc::no_available_handle);
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
  if (p == MAP_FAILED) return fail(errc::no_available_handle);
  m->addr = static_cast<std::byte*>(p);
  m->len = len;
  m->id = random_nonzero_u64();
  return std::shared_ptr<const shared_memory>(std::move(m));
}

peer_mapping::~peer_mapping() {
  if (local != nullptr) ::munmap(local, len);
}

void peer_mapping::prepare(const std::byte* p, std::size_t n) const noexcept {
  if (n == 0 || !ready) return;
  const auto first = static_cast<std::size_t>(p - local) / block;
  const auto last = static_cast<std::size_t>(p - local + n - 1) / block;
  for (auto b = first; b <= last; ++b) {
    if (ready[b].load(std::memory_order_relaxed)) continue;
    const auto at = b * block;
    // Best effort (older kernels: EINVAL; the copy then faults the pages in).
    ::madvise(local + at, std::min(block, len - at), MADV_POPULATE_WRITE);
    ready[b].store(true, std::memory_order_relaxed);
  }
}

namespace {
// allocate_shared_memory(): start address -> the allocation (process-wide).
std::mutex& allocations_m() {
  static std::mutex m;
  return m;
}
std::map<std::uintptr_t, std::shared_ptr<const shared_memory>>& allocations() {
  static std::map<std::uintptr_t, std::shared_ptr<const shared_memory>> m;
  return m;
}
}  // namespace

std::shared_ptr<const shared_memory> shared_allocation_of(const void* addr, std::size_t len) {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  std::lock_guard lk(allocations_m());
  auto& all = allocations();
  auto it = all.upper_bound(a);
  if (it == all.begin()) return nullptr;
  --it;
  const auto& m = it->second;
  const auto base = reinterpret_cast<std::uintptr_t>(m->addr);
  if (a - base > m->len || len > m->len - (a - base)) return nullptr;
  return m;
}

}  // namespace detail

mc::result<std::span<std::byte>> allocate_shared_memory(std::size_t len) {
  auto m = detail::shared_memory::create(len);
  if (!m) return m.error();
  std::span<std::byte> out{(*m)->addr, len};
  std::lock_guard lk(detail::allocations_m());
  detail::allocations().emplace(reinterpret_cast<std::uintptr_t>((*m)->addr), std::move(*m));
  return out;
}

mc::result<void> free_shared_memory(void* addr) {
  std::shared_ptr<const detail::shared_memory> last;  // unmapped outside the lock
  std::lock_guard lk(detail::allocations_m());
  auto it = detail::allocations().find(reinterpret_cast<std::uintptr_t>(addr));
  if (addr == nullptr || it == detail::allocations().end()) return fail(errc::invalid_params);
  last = std::move(it->second);
  detail::allocations().erase(it);
  return {};
}

mc::result<region> engine::allocate_shared(std::size_t len, region_access access) {
  if (impl_->stopping_) return fail(errc::shutting_down);
  if (static_cast<std::uint8_t>(access) > 3) return fail(errc::invalid_params);
  auto m = detail::shared_memory::create(len);
  if (!m) return m.error();
  auto* addr = (*m)->addr;
  auto t = impl_->rdma_ctx_ ? detail::rdma_register(*impl_, addr, len, access, true, *m)
                            : impl_->registry_->add(addr, len, access, std::nullopt, true, *m);
  if (!t) return t.error();
  region r(impl_->registry_, t->token, t->id, addr, len, impl_->endpoint_);
  r.memory_ = std::move(*m);
  return r;
}

}  // namespace mc::transfer
