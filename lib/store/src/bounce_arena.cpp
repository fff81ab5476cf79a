#include "bounce_arena.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

namespace mc::store::detail {

bounce_lease::bounce_lease(bounce_lease&& o) noexcept
    : arena_(std::exchange(o.arena_, nullptr)),
      slots_(std::move(o.slots_)),
      pieces_(std::move(o.pieces_)),
      units_(std::move(o.units_)) {}

bounce_lease& bounce_lease::operator=(bounce_lease&& o) noexcept {
  if (this != &o) {
    release();
    arena_ = std::exchange(o.arena_, nullptr);
    slots_ = std::move(o.slots_);
    pieces_ = std::move(o.pieces_);
    units_ = std::move(o.units_);
  }
  return *this;
}

bounce_lease::~bounce_lease() { release(); }

void bounce_lease::release() noexcept {
  if (auto* a = std::exchange(arena_, nullptr)) a->give_back(slots_);
  slots_.clear();
  pieces_.clear();
  units_.release();  // after the slots are back on the free list
}

result<std::unique_ptr<bounce_arena>> bounce_arena::create(mc::transfer::engine& engine, std::size_t bytes,
                                                           std::size_t slot_bytes) {
  if (slot_bytes == 0) return fail(errc::invalid_params);
  auto slots = std::max<std::size_t>((bytes + slot_bytes - 1) / slot_bytes, 1);
  auto total = slots * slot_bytes;
  void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return fail(errc::internal_error);
  // Best effort: same-host peers copy into and out of the arena with
  // process_vm_*, which pins and walks its pages one by one; huge pages make
  // those copies 2-3x faster (lib/transfer/README.md, "Huge pages").
  ::madvise(p, total, MADV_HUGEPAGE);
  std::unique_ptr<bounce_arena> a(new bounce_arena(static_cast<std::byte*>(p), slot_bytes, slots));
  auto r = engine.register_memory(p, total, mc::transfer::region_access::remote_read_write);
  if (!r) return r.error();
  a->region_ = std::move(*r);
  return a;
}

bounce_arena::bounce_arena(std::byte* base, std::size_t slot_bytes, std::size_t slots)
    : base_(base), slot_bytes_(slot_bytes), slot_count_(slots), free_slots_(slots) {
  free_.reserve(slots);
  for (std::size_t i = slots; i > 0; --i) free_.push_back(static_cast<unsigned>(i - 1));
}

bounce_arena::~bounce_arena() {
  region_.reset();  // unregistered before the memory goes
  ::munmap(base_, slot_bytes_ * slot_count_);
}

task<result<bounce_lease>> bounce_arena::acquire_slots(std::size_t n, std::chrono::steady_clock::duration timeout) {
  if (n == 0 || n > slot_count_) co_return fail(errc::invalid_params);
  auto units = co_await free_slots_.acquire_for(n, timeout);  // all of a request's slots at once: no deadlock
  if (!units) co_return units.error();
  bounce_lease lease;
  lease.arena_ = this;
  lease.units_ = std::move(*units);
  {
    std::lock_guard lk(mu_);
    for (std::size_t i = 0; i < n; ++i) {
      lease.slots_.push_back(free_.back());
      free_.pop_back();
    }
  }
  for (auto s : lease.slots_)
    lease.pieces_.emplace_back(base_ + static_cast<std::size_t>(s) * slot_bytes_, slot_bytes_);
  co_return lease;
}

void bounce_arena::give_back(const std::vector<unsigned>& slots) noexcept {
  std::lock_guard lk(mu_);
  for (auto s : slots) free_.push_back(s);
}

std::size_t plan_slots(const bounce_arena& arena, const std::vector<std::uint64_t>& sizes, std::vector<bool>& wants) {
  std::size_t needed = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    if (!wants[k]) continue;
    auto n = static_cast<std::size_t>((sizes[k] + arena.slot_bytes() - 1) / arena.slot_bytes());
    if (needed + n > arena.slot_count())
      wants[k] = false;  // the arena is full
    else
      needed += n;
  }
  return needed;
}

std::vector<std::span<std::byte>> carve_slots(const bounce_arena& arena, const bounce_lease& lease, std::size_t& next,
                                              std::uint64_t size) {
  auto n = static_cast<std::size_t>((size + arena.slot_bytes() - 1) / arena.slot_bytes());
  std::vector<std::span<std::byte>> out(lease.pieces().begin() + static_cast<std::ptrdiff_t>(next),
                                        lease.pieces().begin() + static_cast<std::ptrdiff_t>(next + n));
  next += n;
  if (!out.empty()) out.back() = out.back().first(static_cast<std::size_t>(size - (n - 1) * arena.slot_bytes()));
  return out;
}

task<void> copy_pieces_chunked(std::vector<std::span<const std::byte>> src, std::vector<std::span<std::byte>> dst) {
  constexpr std::size_t chunk = 1 << 20;
  std::size_t si = 0, so = 0, di = 0, dof = 0, since_yield = 0;
  while (si < src.size() && di < dst.size()) {
    auto n = std::min({src[si].size() - so, dst[di].size() - dof, chunk - since_yield});
    if (n > 0) std::memcpy(dst[di].data() + dof, src[si].data() + so, n);
    so += n;
    dof += n;
    since_yield += n;
    if (so == src[si].size()) ++si, so = 0;
    if (dof == dst[di].size()) ++di, dof = 0;
    if (since_yield == chunk) {
      since_yield = 0;
      co_await boost::asio::post(co_await boost::asio::this_coro::executor, boost::asio::use_awaitable);
    }
  }
}

}  // namespace mc::store::detail
