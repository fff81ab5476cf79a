#include "mc/runtime/async_semaphore.hpp"
#include "mc/runtime/deadline.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <cassert>
#include <vector>

namespace mc {

// Same shape as async_shared_mutex's waiter: the handler is only ever
// move-constructed (asio 1.81's any_completion_handler move-assignment recurses).
struct async_semaphore::waiter {
  template <class H>
  waiter(std::uint64_t units, H&& h, mc::executor e) : n(units), handler(std::forward<H>(h)), ex(std::move(e)) {}
  std::uint64_t n;
  handler_t handler;
  mc::executor ex;
  bool done = false;  // granted or cancelled; guarded by the semaphore's m_
};

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

async_semaphore::~async_semaphore() { assert(queue_.empty() && "async_semaphore destroyed with waiters"); }

semaphore_units async_semaphore::try_acquire(std::uint64_t n) {
  n = std::min(n, capacity_);
  if (n == 0) return {};
  std::lock_guard lk(m_);
  if (!queue_.empty() || available_ < n) return {};
  available_ -= n;
  return semaphore_units(this, n);
}

void async_semaphore::complete(std::shared_ptr<waiter> w, boost::system::error_code ec) noexcept {
  auto ex = w->ex;
  boost::asio::post(ex, [w = std::move(w), ec] { std::move(w->handler)(ec); });
}

task<result<semaphore_units>> async_semaphore::acquire(std::uint64_t n) {
  n = std::min(n, capacity_);
  if (n == 0) co_return semaphore_units{};
  if (auto u = try_acquire(n); u.count() != 0) co_return std::move(u);
  auto token = boost::asio::as_tuple(boost::asio::use_awaitable);
  auto [ec] = co_await boost::asio::async_initiate<decltype(token), void(boost::system::error_code)>(
      [this, n](auto handler) {
        mc::executor ex = boost::asio::get_associated_executor(handler);
        auto w = std::make_shared<waiter>(n, std::move(handler), std::move(ex));
        auto slot = boost::asio::get_associated_cancellation_slot(w->handler);
        std::unique_lock lk(m_);
        queue_.push_back(w);
        grant_waiters(lk);  // units may have been returned since try_acquire
        if (!w->done && slot.is_connected()) {
          slot.assign([this, weak = std::weak_ptr<waiter>(w)](boost::asio::cancellation_type) {
            auto self = weak.lock();
            if (!self) return;
            std::unique_lock lk2(m_);
            if (self->done) return;  // already granted: its units come back with the guard
            self->done = true;
            queue_.erase(std::find(queue_.begin(), queue_.end(), self));
            grant_waiters(lk2);  // the head may have been the one blocking the others
            lk2.unlock();
            complete(self, boost::asio::error::operation_aborted);
          });
        }
      },
      token);
  if (ec) co_return fail(errc::cancelled);
  co_return semaphore_units(this, n);
}

task<result<semaphore_units>> async_semaphore::acquire_for(std::uint64_t n,
                                                           std::chrono::steady_clock::duration timeout) {
  n = std::min(n, capacity_);
  if (n == 0) co_return semaphore_units{};
  if (auto u = try_acquire(n); u.count() != 0) co_return std::move(u);
  co_return co_await with_deadline(acquire(n), timeout);
}

void async_semaphore::grant_waiters(std::unique_lock<std::mutex>& lk) noexcept {
  std::vector<std::shared_ptr<waiter>> granted;
  while (!queue_.empty() && queue_.front()->n <= available_) {
    auto w = std::move(queue_.front());
    queue_.pop_front();
    available_ -= w->n;
    w->done = true;
    granted.push_back(std::move(w));
  }
  if (granted.empty()) return;
  lk.unlock();
  for (auto& w : granted) complete(std::move(w), {});
  lk.lock();
}

void async_semaphore::release(std::uint64_t n) noexcept {
  std::unique_lock lk(m_);
  available_ += n;
  assert(available_ <= capacity_);
  grant_waiters(lk);
}

std::uint64_t async_semaphore::available() const {
  std::lock_guard lk(m_);
  return available_;
}

std::size_t async_semaphore::waiting() const {
  std::lock_guard lk(m_);
  return queue_.size();
}

}  // namespace mc
