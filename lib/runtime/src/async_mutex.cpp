#include "mc/runtime/async_mutex.hpp"

#include <cassert>

namespace mc {

unique_lock_guard& unique_lock_guard::operator=(unique_lock_guard&& o) noexcept {
  if (this != &o) {
    unlock();
    m_ = std::exchange(o.m_, nullptr);
  }
  return *this;
}

void unique_lock_guard::unlock() noexcept {
  if (auto* m = std::exchange(m_, nullptr)) m->unlock();
}

shared_lock_guard& shared_lock_guard::operator=(shared_lock_guard&& o) noexcept {
  if (this != &o) {
    unlock();
    m_ = std::exchange(o.m_, nullptr);
  }
  return *this;
}

void shared_lock_guard::unlock() noexcept {
  if (auto* m = std::exchange(m_, nullptr)) m->unlock_shared();
}

async_shared_mutex::~async_shared_mutex() = default;  // waiter_queue asserts nobody waits

unique_lock_guard async_shared_mutex::try_lock() {
  auto lk = q_.lock();
  if (writer_ || readers_ > 0 || !q_.empty()) return {};
  writer_ = true;
  return unique_lock_guard(this);
}

shared_lock_guard async_shared_mutex::try_lock_shared() {
  auto lk = q_.lock();
  if (writer_ || !q_.empty()) return {};
  ++readers_;
  return shared_lock_guard(this);
}

// Fast path: try_lock(). Slow path: the check is repeated and the waiter
// queued under one lock, so no release can slip between them.
task<result<unique_lock_guard>> async_shared_mutex::lock() {
  if (auto g = try_lock(); g.owns_lock()) co_return std::move(g);
  auto lk = q_.lock();
  if (!writer_ && readers_ == 0 && q_.empty()) {
    writer_ = true;
    co_return unique_lock_guard(this);
  }
  auto r = co_await q_.wait(std::move(lk), 1);
  if (!r) co_return r.error();
  co_return unique_lock_guard(this);
}

task<result<shared_lock_guard>> async_shared_mutex::lock_shared() {
  if (auto g = try_lock_shared(); g.owns_lock()) co_return std::move(g);
  auto lk = q_.lock();
  if (!writer_ && q_.empty()) {
    ++readers_;
    co_return shared_lock_guard(this);
  }
  auto r = co_await q_.wait(std::move(lk), 0);
  if (!r) co_return r.error();
  co_return shared_lock_guard(this);
}

void async_shared_mutex::regrant(void* self, waiter_queue::wakeups& w) noexcept {
  // Removing a waiting writer may unblock readers queued behind it.
  static_cast<async_shared_mutex*>(self)->grant_waiters(w);
}

void async_shared_mutex::grant_waiters(waiter_queue::wakeups& w) noexcept {
  while (!q_.empty() && !writer_) {
    if (q_.front_tag() != 0) {  // exclusive
      if (readers_ > 0) break;
      writer_ = true;
    } else {
      ++readers_;
    }
    q_.grant_front(w, 0);
  }
}

void async_shared_mutex::unlock() noexcept {
  waiter_queue::wakeups w;
  auto lk = q_.lock();
  assert(writer_);
  writer_ = false;
  if (!q_.empty()) grant_waiters(w);
}

void async_shared_mutex::unlock_shared() noexcept {
  waiter_queue::wakeups w;
  auto lk = q_.lock();
  assert(readers_ > 0);
  if (--readers_ == 0 && !q_.empty()) grant_waiters(w);
}

async_shared_mutex::state async_shared_mutex::snapshot() const {
  auto lk = q_.lock();
  return {readers_, writer_, q_.size()};
}

}  // namespace mc
