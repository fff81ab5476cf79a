#pragma once
/// waiter_queue: the one FIFO of suspended coroutines that every
/// coroutine-aware waiting primitive is built on (async_shared_mutex,
/// async_semaphore, gate, the staging and connection pools).
///
/// An owner keeps its own state (units free, lock held, buffers free, ...)
/// under the queue's mutex (lock()). A coroutine that must wait calls
/// wait(std::move(lk), tag) while holding that lock: it is appended to the
/// queue atomically with the owner's check, the lock is released, and the
/// coroutine suspends (it never blocks its thread). A holder grants waiters,
/// under the lock, with grant_front()/grant_all(): each granted waiter leaves
/// the queue at once and is resumed with a 64-bit value on its own executor
/// (its own runtime thread) once the owner's wakeups object is flushed after
/// the lock is released.
///
/// A waiter that is cancelled (the awaiting coroutine's cancellation slot
/// fires, e.g. with_deadline) or whose timeout expires leaves the queue and
/// returns errc::cancelled / errc::timeout, never an exception; the owner's
/// leave hook then runs (under the lock) so a removed head can unblock the
/// waiters behind it. Grant and cancellation race safely from different
/// threads: exactly one wins; a granted waiter always receives its value
/// (the owner's grant, e.g. a lock or units, then belongs to it).
///
/// Bounded by construction: every entry is one suspended coroutine (its own
/// frame) and leaves the queue when it is granted, cancelled or times out;
/// nothing is ever queued on behalf of a coroutine that is not waiting.
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

namespace mc {

class waiter_queue {
  struct waiter;

 public:
  using lock_type = std::unique_lock<std::mutex>;

  /// Waiters taken off the queue under the lock, resumed by flush() (or the
  /// destructor) after the lock is released: posting never happens under the
  /// owner's lock. Declare it before the lock so it is destroyed after it.
  /// Not thread-safe (a local of one call).
  class wakeups {
   public:
    wakeups() = default;
    wakeups(const wakeups&) = delete;
    wakeups& operator=(const wakeups&) = delete;
    ~wakeups() {
      if (!list_.empty()) flush();  // inline: most releases wake nobody
    }
    /// Resumes every collected waiter on its own executor (idempotent).
    void flush() noexcept;
    bool empty() const noexcept { return list_.empty(); }

   private:
    friend class waiter_queue;
    std::vector<std::shared_ptr<waiter>> list_;
  };

  /// Called with the lock held after a waiter left the queue by cancellation
  /// or timeout (not by a grant): the owner re-runs its grant loop into `w`.
  using leave_hook = void (*)(void* owner, wakeups& w) noexcept;

  /// `hook` (may be null) with its `owner` argument.
  explicit waiter_queue(leave_hook hook = nullptr, void* owner = nullptr) noexcept : hook_(hook), owner_(owner) {}
  waiter_queue(const waiter_queue&) = delete;
  waiter_queue& operator=(const waiter_queue&) = delete;
  /// Precondition: nobody waits (asserted in debug builds).
  ~waiter_queue();

  /// Takes the mutex that guards the queue and the owner's state. Thread-safe.
  lock_type lock() const { return lock_type(m_); }

  /// Appends the calling coroutine with `tag` (the owner's per-waiter datum,
  /// e.g. units wanted; read back with front_tag()), releases `lk` (which
  /// must hold lock()) and suspends until granted. Returns the value passed
  /// to the grant. Errors: cancelled (the awaiting coroutine was cancelled
  /// before or while waiting; it is no longer queued and was granted
  /// nothing). Resumes on the caller's executor. Thread-safe.
  /// The returned task holds `lk` until it runs: await it at once
  /// (`co_await q.wait(std::move(lk), tag)`), never spawn or store it.
  task<result<std::uint64_t>> wait(lock_type lk, std::uint64_t tag) { return suspend(std::move(lk), tag, -1, true); }
  /// wait() bounded by `timeout`: errc::timeout when not granted in time (no
  /// longer queued then; granted nothing). Also errc::cancelled as wait().
  task<result<std::uint64_t>> wait_for(lock_type lk, std::uint64_t tag, std::chrono::steady_clock::duration timeout) {
    return suspend(std::move(lk), tag, std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count(), true);
  }
  /// wait() that ignores cancellation: returns only when granted (for
  /// shutdown waits that must not be cut short). Never fails.
  task<result<std::uint64_t>> wait_uncancellable(lock_type lk, std::uint64_t tag) {
    return suspend(std::move(lk), tag, -1, false);
  }

  /// The following require the lock (lock()) to be held by the caller.
  bool empty() const noexcept { return q_.empty(); }
  /// Waiters queued now.
  std::size_t size() const noexcept { return q_.size(); }
  /// The tag of the oldest waiter. Precondition: !empty().
  std::uint64_t front_tag() const noexcept;
  /// Removes the oldest waiter and adds it to `w`, to resume with `value`.
  /// Precondition: !empty().
  void grant_front(wakeups& w, std::uint64_t value) noexcept;
  /// Removes every waiter and adds them to `w`, each to resume with `value`.
  void grant_all(wakeups& w, std::uint64_t value) noexcept;

 private:
  task<result<std::uint64_t>> suspend(lock_type lk, std::uint64_t tag, std::int64_t timeout_ns, bool cancellable);
  /// Removes `w` (not yet done) because of `why`; runs the hook; resumes it.
  void leave(const std::shared_ptr<waiter>& w, errc why) noexcept;

  mutable std::mutex m_;
  std::deque<std::shared_ptr<waiter>> q_;  // guarded by m_
  leave_hook hook_;
  void* owner_;
};

}  // namespace mc
