#include "mc/runtime/async_mutex.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <cassert>
#include <vector>

namespace mc {

// Asio 1.81's any_completion_handler move-assignment recurses forever (it
// copies through its converting constructor): only ever move-construct it.
struct async_shared_mutex::waiter {
  template <class H>
  waiter(bool x, H&& h, mc::executor e) : exclusive(x), handler(std::forward<H>(h)), ex(std::move(e)) {}
  bool exclusive;
  handler_t handler;
  mc::executor ex;  // the waiter's own executor (its runtime thread)
  bool done = false;  // granted or cancelled; guarded by the mutex's m_
};

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

async_shared_mutex::~async_shared_mutex() {
  assert(queue_.empty() && "async_shared_mutex destroyed with waiters");
}

unique_lock_guard async_shared_mutex::try_lock() {
  std::lock_guard lk(m_);
  if (writer_ || readers_ > 0 || !queue_.empty()) return {};
  writer_ = true;
  return unique_lock_guard(this);
}

shared_lock_guard async_shared_mutex::try_lock_shared() {
  std::lock_guard lk(m_);
  if (writer_ || !queue_.empty()) return {};
  ++readers_;
  return shared_lock_guard(this);
}

task<result<unique_lock_guard>> async_shared_mutex::lock() {
  if (auto g = try_lock(); g.owns_lock()) co_return std::move(g);
  auto r = co_await acquire(true);
  if (!r) co_return r.error();
  co_return unique_lock_guard(this);
}

task<result<shared_lock_guard>> async_shared_mutex::lock_shared() {
  if (auto g = try_lock_shared(); g.owns_lock()) co_return std::move(g);
  auto r = co_await acquire(false);
  if (!r) co_return r.error();
  co_return shared_lock_guard(this);
}

// Resumes the waiter on its own executor.
void async_shared_mutex::complete(std::shared_ptr<waiter> w, boost::system::error_code ec) noexcept {
  // Capture the waiter by shared_ptr: any_completion_handler must only ever
  // be moved, and asio may copy the posted function object. Invoking the
  // handler destroys its cancellation slot (and our cancel hook with it) on
  // the waiter's own thread, the only thread that emits into it.
  auto ex = w->ex;
  boost::asio::post(ex, [w = std::move(w), ec] { std::move(w->handler)(ec); });
}

task<result<void>> async_shared_mutex::acquire(bool exclusive) {
  auto token = boost::asio::as_tuple(boost::asio::use_awaitable);
  auto [ec] = co_await boost::asio::async_initiate<decltype(token), void(boost::system::error_code)>(
      [this, exclusive](auto handler) {
        mc::executor ex = boost::asio::get_associated_executor(handler);
        auto w = std::make_shared<waiter>(exclusive, std::move(handler), std::move(ex));
        // The type-erased handler chains the caller's slot to a slot of its
        // own, which lives exactly as long as the pending handler.
        auto slot = boost::asio::get_associated_cancellation_slot(w->handler);
        std::unique_lock lk(m_);
        queue_.push_back(w);
        // The lock may have been released between the fast path and here.
        grant_waiters(lk);
        if (!w->done && slot.is_connected()) {
          slot.assign([this, weak = std::weak_ptr<waiter>(w)](boost::asio::cancellation_type) {
            auto self = weak.lock();
            if (!self) return;
            std::unique_lock lk2(m_);
            if (self->done) return;  // already granted: the guard will release it
            self->done = true;
            queue_.erase(std::find(queue_.begin(), queue_.end(), self));
            // Removing a waiting writer may unblock readers queued behind it.
            grant_waiters(lk2);
            lk2.unlock();
            complete(self, boost::asio::error::operation_aborted);
          });
        }
      },
      token);
  if (ec) co_return fail(errc::cancelled);
  co_return result<void>{};
}

void async_shared_mutex::grant_waiters(std::unique_lock<std::mutex>& lk) noexcept {
  std::vector<std::shared_ptr<waiter>> granted;
  while (!queue_.empty()) {
    auto& w = queue_.front();
    if (w->exclusive) {
      if (writer_ || readers_ > 0) break;
      writer_ = true;
    } else {
      if (writer_) break;
      ++readers_;
    }
    w->done = true;
    granted.push_back(std::move(w));
    queue_.pop_front();
    if (writer_) break;
  }
  if (granted.empty()) return;
  lk.unlock();
  for (auto& w : granted) complete(std::move(w), {});
  lk.lock();
}

void async_shared_mutex::unlock() noexcept {
  std::unique_lock lk(m_);
  assert(writer_);
  writer_ = false;
  grant_waiters(lk);
}

void async_shared_mutex::unlock_shared() noexcept {
  std::unique_lock lk(m_);
  assert(readers_ > 0);
  if (--readers_ == 0) grant_waiters(lk);
}

async_shared_mutex::state async_shared_mutex::snapshot() const {
  std::lock_guard lk(m_);
  return {readers_, writer_, queue_.size()};
}

}  // namespace mc
