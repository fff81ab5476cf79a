#include "mc/runtime/async_semaphore.hpp"

#include <algorithm>
#include <cassert>

namespace mc {

semaphore_units& semaphore_units::operator=(semaphore_units&& o) noexcept {
  if (this != &o) {
    release();
    s_ = std::exchange(o.s_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}

void semaphore_units::release() noexcept {
  if (auto* s = std::exchange(s_, nullptr)) s->release(std::exchange(n_, 0));
}

async_semaphore::~async_semaphore() = default;  // waiter_queue asserts nobody waits

semaphore_units async_semaphore::try_acquire(std::uint64_t n) {
  n = std::min(n, capacity_);
  if (n == 0) return {};
  auto lk = q_.lock();
  if (!q_.empty() || available_ < n) return {};
  available_ -= n;
  return semaphore_units(this, n);
}

// Fast path: try_acquire(). Slow path: the check is repeated and the waiter
// queued under one lock, so no release can slip between them. A timer is
// armed only when the caller really waits.
task<result<semaphore_units>> async_semaphore::take(std::uint64_t n, std::chrono::steady_clock::duration timeout,
                                                    bool timed) {
  n = std::min(n, capacity_);
  if (n == 0) co_return semaphore_units{};
  if (auto u = try_acquire(n); u.count() != 0) co_return std::move(u);
  auto lk = q_.lock();
  if (q_.empty() && available_ >= n) {
    available_ -= n;
    co_return semaphore_units(this, n);
  }
  result<std::uint64_t> r = fail(errc::cancelled);
  if (timed) {
    r = co_await q_.wait_for(std::move(lk), n, timeout);
  } else {
    r = co_await q_.wait(std::move(lk), n);
  }
  if (!r) co_return r.error();
  co_return semaphore_units(this, n);
}

task<result<semaphore_units>> async_semaphore::acquire(std::uint64_t n) {
  return take(n, std::chrono::steady_clock::duration::zero(), false);
}

task<result<semaphore_units>> async_semaphore::acquire_for(std::uint64_t n,
                                                           std::chrono::steady_clock::duration timeout) {
  return take(n, timeout, true);
}

void async_semaphore::regrant(void* self, waiter_queue::wakeups& w) noexcept {
  // The removed waiter may have been the head blocking the others.
  static_cast<async_semaphore*>(self)->grant_waiters(w);
}

void async_semaphore::grant_waiters(waiter_queue::wakeups& w) noexcept {
  while (!q_.empty() && q_.front_tag() <= available_) {
    available_ -= q_.front_tag();
    q_.grant_front(w, 0);
  }
}

void async_semaphore::release(std::uint64_t n) noexcept {
  waiter_queue::wakeups w;
  auto lk = q_.lock();
  available_ += n;
  assert(available_ <= capacity_);
  if (!q_.empty()) grant_waiters(w);
}

std::uint64_t async_semaphore::available() const {
  auto lk = q_.lock();
  return available_;
}

std::size_t async_semaphore::waiting() const {
  auto lk = q_.lock();
  return q_.size();
}

}  // namespace mc
