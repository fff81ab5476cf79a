#pragma once
// A pooled, registered bounce arena (internal to lib/store): on RDMA, caller
// memory that is not inside a registration would otherwise need an
// ibv_reg_mr / ibv_dereg_mr pair per call. The arena is registered ONCE;
// a transfer borrows whole slots (a value larger than a slot spans several:
// they travel as scatter-gather pieces), each request describes them with a
// fresh derived token (engine::register_within, no system call), and the
// bytes are copied between the slots and the caller's pieces.
#include "mc/runtime/async_semaphore.hpp"
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"
#include "mc/transfer/engine.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

namespace mc::store::detail {

class bounce_arena;

/// Slots borrowed for one request (RAII: returned on destruction).
class bounce_lease {
 public:
  bounce_lease() = default;
  bounce_lease(bounce_lease&& o) noexcept;
  bounce_lease& operator=(bounce_lease&& o) noexcept;
  bounce_lease(const bounce_lease&) = delete;
  bounce_lease& operator=(const bounce_lease&) = delete;
  ~bounce_lease();

  /// The slots, in order; the last one trimmed so that they hold exactly the
  /// bytes asked for.
  const std::vector<std::span<std::byte>>& pieces() const noexcept { return pieces_; }

 private:
  friend class bounce_arena;
  void release() noexcept;
  bounce_arena* arena_ = nullptr;
  std::vector<unsigned> slots_;
  std::vector<std::span<std::byte>> pieces_;
  semaphore_units units_;
};

class bounce_arena {
 public:
  /// Allocates `bytes` (rounded up to whole `slot_bytes` slots, at least one)
  /// and registers them with `engine` once (remote read + write). Errors:
  /// the allocation's or the registration's.
  static result<std::unique_ptr<bounce_arena>> create(mc::transfer::engine& engine, std::size_t bytes,
                                                      std::size_t slot_bytes);
  ~bounce_arena();
  bounce_arena(const bounce_arena&) = delete;
  bounce_arena& operator=(const bounce_arena&) = delete;

  /// Borrows `n` whole slots at once (1 <= n <= slot_count()), waiting (FIFO)
  /// while they are in use: a request's slots are taken together, so two
  /// requests can never each hold some and wait for the other's. Free slots
  /// are taken without arming a timer. Errors: invalid_params, timeout (not
  /// free within `timeout`), cancelled.
  task<result<bounce_lease>> acquire_slots(std::size_t n, std::chrono::steady_clock::duration timeout);
  std::size_t slot_count() const noexcept { return slot_count_; }
  std::size_t capacity() const noexcept { return slot_bytes_ * slot_count_; }
  std::size_t slot_bytes() const noexcept { return slot_bytes_; }

 private:
  friend class bounce_lease;
  bounce_arena(std::byte* base, std::size_t slot_bytes, std::size_t slots);
  void give_back(const std::vector<unsigned>& slots) noexcept;

  std::byte* base_;
  std::size_t slot_bytes_;
  std::size_t slot_count_;
  mc::transfer::region region_;
  async_semaphore free_slots_;
  std::mutex mu_;
  std::vector<unsigned> free_;  // guarded by mu_
};

/// Which of a request's items go through the arena: `wants[k]` marks the
/// candidates (item k moves sizes[k] bytes); those whose slots still fit the
/// arena, in order, stay marked, the others are cleared (they register their
/// memory instead). Returns the slots the marked ones need in all.
std::size_t plan_slots(const bounce_arena& arena, const std::vector<std::uint64_t>& sizes, std::vector<bool>& wants);
/// The next marked item's slots out of `lease`, the last trimmed so that they
/// hold exactly `size` bytes; advances `next`.
std::vector<std::span<std::byte>> carve_slots(const bounce_arena& arena, const bounce_lease& lease, std::size_t& next,
                                              std::uint64_t size);

/// Copies `src` (in order) into `dst` pieces (in order), min of both
/// totals, in chunks of at most 1 MiB with a yield of the runtime thread
/// between chunks (a long copy never holds a runtime thread).
task<void> copy_pieces_chunked(std::vector<std::span<const std::byte>> src, std::vector<std::span<std::byte>> dst);

}  // namespace mc::store::detail
