#include "mc/runtime/runtime.hpp"

#include <boost/asio/post.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <future>
#include <stdexcept>

TEST_SUITE("runtime") {
  TEST_CASE("each thread knows its index and outsiders get -1") {
    mc::runtime::runtime rt(2);
    rt.start();
    CHECK(mc::runtime::runtime::current_index() == -1);
    for (std::size_t i = 0; i < 2; ++i) {
      std::promise<int> p;
      rt.post(i, [&] { p.set_value(mc::runtime::runtime::current_index()); });
      CHECK(p.get_future().get() == static_cast<int>(i));
    }
    std::promise<mc::runtime::runtime*> p;
    rt.post(1, [&] { p.set_value(mc::runtime::runtime::current()); });
    CHECK(p.get_future().get() == &rt);
  }

  TEST_CASE("block_on returns a coroutine's value and rethrows its exception") {
    mc::runtime::runtime rt(2);
    rt.start();
    auto v = rt.block_on(
        []() -> mc::task<int> {
          co_await boost::asio::post(co_await boost::asio::this_coro::executor, boost::asio::use_awaitable);
          co_return mc::runtime::runtime::current_index() + 41;
        }(),
        1);
    CHECK(v == 42);
    CHECK_THROWS_AS(rt.block_on([]() -> mc::task<void> {
      throw std::runtime_error("boom");
      co_return;
    }()),
                    std::runtime_error);
  }

  TEST_CASE("run_on hops to another thread and back") {
    mc::runtime::runtime rt(2);
    rt.start();
    auto both = rt.block_on(
        [&]() -> mc::task<std::pair<int, int>> {
          int other = co_await mc::run_on(rt.executor(1),
                                          []() -> mc::task<int> { co_return mc::runtime::runtime::current_index(); }());
          co_return std::pair{other, mc::runtime::runtime::current_index()};
        }(),
        0);
    CHECK(both.first == 1);
    CHECK(both.second == 0);
  }

  TEST_CASE("stop is idempotent and a runtime can be restarted") {
    mc::runtime::runtime rt(1);
    rt.start();
    rt.stop();
    rt.stop();
    CHECK_FALSE(rt.running());
    rt.start();
    CHECK(rt.block_on([]() -> mc::task<int> { co_return 7; }()) == 7);
  }

  TEST_CASE("zero threads is rejected") { CHECK_THROWS_AS(mc::runtime::runtime(0), std::invalid_argument); }
}
