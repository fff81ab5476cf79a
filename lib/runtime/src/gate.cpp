#include "mc/runtime/gate.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace mc {

gate_holder& gate_holder::operator=(gate_holder&& o) noexcept {
  if (this != &o) {
    leave();
    g_ = std::exchange(o.g_, nullptr);
  }
  return *this;
}

void gate_holder::leave() noexcept {
  if (auto* g = std::exchange(g_, nullptr)) g->leave();
}

gate_holder gate::try_enter() {
  auto lk = q_.lock();
  if (closed_) return {};
  ++count_;
  return gate_holder(this);
}

void gate::leave() noexcept {
  waiter_queue::wakeups w;
  auto lk = q_.lock();
  if (--count_ == 0 && closed_) q_.grant_all(w, 0);
}

task<void> gate::close() {
  auto lk = q_.lock();
  closed_ = true;
  if (count_ > 0) {
    (void)co_await q_.wait_uncancellable(std::move(lk), 0);
    co_return;
  }
  lk.unlock();
  // Never completes inline (as before waiter_queue): callers spawn close()
  // and only then arm what its completion signals.
  co_await boost::asio::post(co_await boost::asio::this_coro::executor, boost::asio::use_awaitable);
}

bool gate::closed() const {
  auto lk = q_.lock();
  return closed_;
}

std::size_t gate::in_flight() const {
  auto lk = q_.lock();
  return count_;
}

}  // namespace mc
