#include "mc/runtime/waiter_queue.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <cassert>
#include <tuple>

namespace mc {

// Asio 1.81's any_completion_handler move-assignment recurses forever (it
// copies through its converting constructor): only ever move-construct it.
struct waiter_queue::waiter {
  using handler_t = boost::asio::any_completion_handler<void(int, std::uint64_t)>;
  template <class H>
  waiter(std::uint64_t t, H&& h, mc::executor e) : tag(t), handler(std::forward<H>(h)), ex(std::move(e)) {}
  std::uint64_t tag;
  handler_t handler;
  mc::executor ex;          // the waiter's own executor (its runtime thread)
  std::uint64_t value = 0;  // set by the grant
  errc outcome = errc::ok;  // ok (granted), cancelled or timeout
  bool done = false;        // left the queue; guarded by the queue's m_
  // Only with a timeout (allocated then: keeps the common waiter small);
  // created, cancelled and destroyed on the waiter's thread.
  std::unique_ptr<boost::asio::steady_timer> timer;
};

namespace {

// Resumes `w` on its own executor. Invoking the handler destroys its
// cancellation slot (and the hook in it) on the waiter's own thread, the only
// thread that emits into it; the posted function holds the waiter by
// shared_ptr because asio may copy it and the handler must only be moved.
template <class W>
void resume(std::shared_ptr<W> w) noexcept {
  auto ex = w->ex;
  boost::asio::post(ex, [w = std::move(w)] {
    if (w->timer) w->timer->cancel();
    std::move(w->handler)(static_cast<int>(w->outcome), w->value);
  });
}

}  // namespace

void waiter_queue::wakeups::flush() noexcept {
  for (auto& w : list_) resume(std::move(w));
  list_.clear();
}

waiter_queue::~waiter_queue() { assert(q_.empty() && "waiter_queue destroyed with waiters"); }

std::uint64_t waiter_queue::front_tag() const noexcept {
  assert(!q_.empty());
  return q_.front()->tag;
}

void waiter_queue::grant_front(wakeups& w, std::uint64_t value) noexcept {
  assert(!q_.empty());
  auto x = std::move(q_.front());
  q_.pop_front();
  x->done = true;
  x->value = value;
  w.list_.push_back(std::move(x));
}

void waiter_queue::grant_all(wakeups& w, std::uint64_t value) noexcept {
  while (!q_.empty()) grant_front(w, value);
}

void waiter_queue::leave(const std::shared_ptr<waiter>& w, errc why) noexcept {
  wakeups woken;
  {
    lock_type lk(m_);
    if (w->done) return;  // granted first: the grant stands
    w->done = true;
    w->outcome = why;
    q_.erase(std::find(q_.begin(), q_.end(), w));
    if (hook_) hook_(owner_, woken);  // the removed waiter may have blocked the ones behind it
  }
  woken.list_.push_back(w);
}

task<result<std::uint64_t>> waiter_queue::suspend(lock_type lk, std::uint64_t tag, std::int64_t timeout_ns,
                                                  bool cancellable) {
  if (cancellable) {
    auto cs = co_await boost::asio::this_coro::cancellation_state;
    if (cs.cancelled() != boost::asio::cancellation_type::none) co_return fail(errc::cancelled);
  }
  auto token = boost::asio::use_awaitable;
  auto [code, value] = co_await boost::asio::async_initiate<decltype(token), void(int, std::uint64_t)>(
      [this, &lk, tag, timeout_ns, cancellable](auto handler) {
        mc::executor ex = boost::asio::get_associated_executor(handler);
        auto w = std::make_shared<waiter>(tag, std::move(handler), std::move(ex));
        q_.push_back(w);
        // The type-erased handler chains the caller's slot to a slot of its
        // own, which lives exactly as long as the pending handler.
        auto slot = boost::asio::get_associated_cancellation_slot(w->handler);
        if (cancellable && slot.is_connected()) {
          slot.assign([this, weak = std::weak_ptr<waiter>(w)](boost::asio::cancellation_type t) {
            if (t == boost::asio::cancellation_type::none) return;
            if (auto self = weak.lock()) leave(self, errc::cancelled);
          });
        }
        if (timeout_ns >= 0) {
          w->timer = std::make_unique<boost::asio::steady_timer>(w->ex, std::chrono::nanoseconds(timeout_ns));
          w->timer->async_wait([this, weak = std::weak_ptr<waiter>(w)](boost::system::error_code ec) {
            if (ec) return;  // cancelled: granted or cancelled meanwhile
            if (auto self = weak.lock()) leave(self, errc::timeout);
          });
        }
        lk.unlock();
      },
      token);
  if (code != 0) co_return fail(static_cast<errc>(code));
  co_return value;
}

}  // namespace mc
