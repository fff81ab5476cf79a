#include "mc/runtime/deadline.hpp"
#include "mc/runtime/gate.hpp"
#include "mc/runtime/runtime.hpp"

#include <boost/asio/detached.hpp>
#include <doctest/doctest.h>

#include <chrono>

using namespace std::chrono_literals;

TEST_SUITE("gate") {
  TEST_CASE("close on an idle gate completes at once and refuses new work") {
    mc::runtime::runtime rt(1);
    rt.start();
    mc::gate g;
    rt.block_on(g.close());
    CHECK(g.closed());
    CHECK_FALSE(static_cast<bool>(g.try_enter()));
  }

  TEST_CASE("close waits for in-flight work to drain") {
    mc::runtime::runtime rt(2);
    rt.start();
    mc::gate g;
    int finished = 0;
    rt.block_on([&]() -> mc::task<void> {
      auto ex = co_await boost::asio::this_coro::executor;
      for (int i = 0; i < 3; ++i) {
        auto h = g.try_enter();
        REQUIRE(static_cast<bool>(h));
        boost::asio::co_spawn(
            ex,
            [](mc::gate_holder h, int& finished, int i) -> mc::task<void> {
              co_await mc::sleep_for(std::chrono::milliseconds(10 * (i + 1)));
              ++finished;
              h.leave();
            }(std::move(h), finished, i),
            boost::asio::detached);
      }
      CHECK(g.in_flight() == 3);
      co_await g.close();
      CHECK(finished == 3);
      CHECK(g.in_flight() == 0);
    }());
  }

  TEST_CASE("a holder released on another thread wakes the closer") {
    mc::runtime::runtime rt(2);
    rt.start();
    mc::gate g;
    auto h = g.try_enter();
    rt.post(1, [h = std::move(h)]() mutable {
      std::this_thread::sleep_for(5ms);  // simulates work on another thread
      h.leave();
    });
    auto r = rt.block_on(mc::with_deadline(
        [&]() -> mc::task<mc::result<int>> {
          co_await g.close();
          co_return 1;
        }(),
        10s));
    CHECK(r.has_value());
  }
}
