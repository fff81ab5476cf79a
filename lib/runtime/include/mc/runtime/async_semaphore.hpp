#pragma once
/// A weighted counting semaphore for coroutines: bounds a quantity in flight
/// (bytes, items). A waiting coroutine suspends, never blocks its thread, and
/// is resumed on its own executor. Strict FIFO: a large request at the head
/// is not overtaken by smaller ones behind it (no starvation). Built on
/// waiter_queue.
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"
#include "mc/runtime/waiter_queue.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace mc {

class async_semaphore;

/// RAII units taken from an async_semaphore; returned on destruction.
/// Move-only. May be released on any thread.
class [[nodiscard]] semaphore_units {
 public:
  semaphore_units() = default;
  semaphore_units(async_semaphore* s, std::uint64_t n) noexcept : s_(s), n_(n) {}
  semaphore_units(semaphore_units&& o) noexcept : s_(std::exchange(o.s_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  semaphore_units& operator=(semaphore_units&& o) noexcept;
  ~semaphore_units() { release(); }
  /// Returns the units now (idempotent).
  void release() noexcept;
  /// Units held (0 when empty).
  std::uint64_t count() const noexcept { return n_; }

 private:
  async_semaphore* s_ = nullptr;
  std::uint64_t n_ = 0;
};

/// Thread-safe; may be used from any runtime thread. Must outlive every
/// semaphore_units and every pending acquire().
class async_semaphore {
 public:
  /// `capacity` units (>= 1; 0 is taken as 1).
  explicit async_semaphore(std::uint64_t capacity) noexcept
      : capacity_(capacity == 0 ? 1 : capacity), q_(&async_semaphore::regrant, this), available_(capacity_) {}
  async_semaphore(const async_semaphore&) = delete;
  async_semaphore& operator=(const async_semaphore&) = delete;
  ~async_semaphore();

  /// Takes `n` units, waiting (FIFO) until they are free. A request larger
  /// than the capacity takes the whole capacity (it then runs alone), so a
  /// single oversized item never deadlocks; n == 0 returns empty units at
  /// once. Returns the units (count() = min(n, capacity)). Errors: cancelled
  /// (the awaiting coroutine was cancelled while waiting; nothing is held).
  task<result<semaphore_units>> acquire(std::uint64_t n);
  /// acquire() bounded by `timeout`: errc::timeout when the units did not
  /// come in time (nothing is held then). Units free right now are taken
  /// without arming a timer (the common, uncontended case costs no timer).
  task<result<semaphore_units>> acquire_for(std::uint64_t n, std::chrono::steady_clock::duration timeout);
  /// Non-suspending attempt: empty units when not available now (or when
  /// others are already waiting).
  semaphore_units try_acquire(std::uint64_t n);

  std::uint64_t capacity() const noexcept { return capacity_; }
  /// Units free right now (a snapshot).
  std::uint64_t available() const;
  /// Coroutines waiting right now (a snapshot).
  std::size_t waiting() const;

 private:
  friend class semaphore_units;
  void release(std::uint64_t n) noexcept;
  /// Grants queued waiters while the head's units are free (q_'s lock held).
  void grant_waiters(waiter_queue::wakeups& w) noexcept;
  static void regrant(void* self, waiter_queue::wakeups& w) noexcept;
  task<result<semaphore_units>> take(std::uint64_t n, std::chrono::steady_clock::duration timeout, bool timed);

  const std::uint64_t capacity_;
  waiter_queue q_;  // its lock guards available_ too
  std::uint64_t available_;
};

}  // namespace mc
