#include "mc/runtime/gate.hpp"

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>

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
  std::lock_guard lk(m_);
  if (closed_) return {};
  ++count_;
  return gate_holder(this);
}

void gate::leave() noexcept {
  std::vector<waiter> done;
  {
    std::lock_guard lk(m_);
    if (--count_ == 0 && closed_) done.swap(waiters_);
  }
  for (auto& w : done) {
    auto shared = std::make_shared<handler_t>(std::move(w.handler));
    boost::asio::post(w.ex, [shared] { std::move(*shared)(); });
  }
}

task<void> gate::close() {
  co_await boost::asio::async_initiate<decltype(boost::asio::use_awaitable), void()>(
      [this](auto handler) {
        std::unique_lock lk(m_);
        closed_ = true;
        if (count_ == 0) {
          lk.unlock();
          auto ex = boost::asio::get_associated_executor(handler);
          auto shared = std::make_shared<handler_t>(std::move(handler));
          boost::asio::post(ex, [shared] { std::move(*shared)(); });
          return;
        }
        mc::executor ex = boost::asio::get_associated_executor(handler);
        waiters_.push_back(waiter{handler_t(std::move(handler)), std::move(ex)});
      },
      boost::asio::use_awaitable);
}

bool gate::closed() const {
  std::lock_guard lk(m_);
  return closed_;
}

std::size_t gate::in_flight() const {
  std::lock_guard lk(m_);
  return count_;
}

}  // namespace mc
