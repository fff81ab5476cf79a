#pragma once
/// Coroutine-aware mutexes: a waiting coroutine suspends, never blocks its
/// thread. Waiters are resumed on their own executor (their own runtime
/// thread). FIFO hand-off: once a writer waits, new readers queue behind it,
/// so a steady stream of readers cannot starve a writer. Built on
/// waiter_queue.
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"
#include "mc/runtime/waiter_queue.hpp"

#include <cstddef>
#include <utility>

namespace mc {

class async_shared_mutex;

/// RAII exclusive ownership of an async_shared_mutex / async_mutex. Move-only.
class [[nodiscard]] unique_lock_guard {
 public:
  unique_lock_guard() = default;
  explicit unique_lock_guard(async_shared_mutex* m) noexcept : m_(m) {}
  unique_lock_guard(unique_lock_guard&& o) noexcept : m_(std::exchange(o.m_, nullptr)) {}
  unique_lock_guard& operator=(unique_lock_guard&& o) noexcept;
  ~unique_lock_guard() { unlock(); }
  /// Releases early (idempotent).
  void unlock() noexcept;
  bool owns_lock() const noexcept { return m_ != nullptr; }

 private:
  async_shared_mutex* m_ = nullptr;
};

/// RAII shared ownership of an async_shared_mutex. Move-only.
class [[nodiscard]] shared_lock_guard {
 public:
  shared_lock_guard() = default;
  explicit shared_lock_guard(async_shared_mutex* m) noexcept : m_(m) {}
  shared_lock_guard(shared_lock_guard&& o) noexcept : m_(std::exchange(o.m_, nullptr)) {}
  shared_lock_guard& operator=(shared_lock_guard&& o) noexcept;
  ~shared_lock_guard() { unlock(); }
  void unlock() noexcept;
  bool owns_lock() const noexcept { return m_ != nullptr; }

 private:
  async_shared_mutex* m_ = nullptr;
};

/// Reader/writer mutex for coroutines. Thread-safe; may be used from any
/// runtime thread. Must outlive every guard and every pending acquisition.
/// Cancellation of a waiting `lock()`/`lock_shared()` (e.g. by with_deadline)
/// removes the waiter and yields errc::cancelled; a waiter that was already
/// granted keeps the lock (its guard releases it).
class async_shared_mutex {
 public:
  async_shared_mutex() noexcept : q_(&async_shared_mutex::regrant, this) {}
  async_shared_mutex(const async_shared_mutex&) = delete;
  async_shared_mutex& operator=(const async_shared_mutex&) = delete;
  ~async_shared_mutex();

  /// Exclusive ownership, waiting (FIFO) while held. Errors: cancelled (the
  /// awaiting coroutine was cancelled while waiting; nothing is held).
  task<result<unique_lock_guard>> lock();
  /// Shared ownership; waits while a writer holds or waits. Errors: cancelled.
  task<result<shared_lock_guard>> lock_shared();
  /// Non-suspending attempts; empty guard on failure (held, or others wait).
  unique_lock_guard try_lock();
  shared_lock_guard try_lock_shared();

  /// Raw release (guards call these).
  void unlock() noexcept;
  void unlock_shared() noexcept;

  /// Diagnostic snapshot (consistent at one instant).
  struct state {
    std::size_t readers;
    bool writer;
    std::size_t waiters;
  };
  state snapshot() const;

 private:
  /// Grants queued waiters while the lock state allows (q_'s lock held).
  void grant_waiters(waiter_queue::wakeups& w) noexcept;
  static void regrant(void* self, waiter_queue::wakeups& w) noexcept;

  waiter_queue q_;  // its lock guards readers_ and writer_ too
  std::size_t readers_ = 0;
  bool writer_ = false;
};

/// Exclusive-only coroutine mutex.
class async_mutex {
 public:
  /// As async_shared_mutex::lock() / try_lock().
  task<result<unique_lock_guard>> lock() { return m_.lock(); }
  unique_lock_guard try_lock() { return m_.try_lock(); }

 private:
  async_shared_mutex m_;
};

}  // namespace mc
