#include "mc/runtime/async_semaphore.hpp"
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/runtime/when_all.hpp"
#include "test_support.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <vector>

using namespace std::chrono_literals;

using mc::test::yield_once;

namespace {
mc::task<void> take_and_record(mc::async_semaphore& s, std::uint64_t n, int tag, std::vector<int>& order) {
  auto u = co_await s.acquire(n);
  REQUIRE(u.has_value());
  order.push_back(tag);
}
}  // namespace

TEST_SUITE("async_semaphore") {
  TEST_CASE("units are taken and returned; an oversized request takes the whole capacity") {
    mc::async_semaphore s(100);
    auto a = s.try_acquire(60);
    CHECK(a.count() == 60);
    CHECK(s.available() == 40);
    CHECK(s.try_acquire(41).count() == 0);
    {
      auto b = s.try_acquire(40);
      CHECK(b.count() == 40);
      CHECK(s.available() == 0);
    }
    CHECK(s.available() == 40);
    a.release();
    a.release();  // idempotent
    CHECK(s.available() == 100);
    auto big = s.try_acquire(1000);
    CHECK(big.count() == 100);
    CHECK(s.available() == 0);
    big = mc::semaphore_units{};
    CHECK(s.available() == 100);
    CHECK(s.try_acquire(0).count() == 0);
  }

  TEST_CASE("waiters are granted in FIFO order as units come back; a large head is not overtaken") {
    mc::runtime::runtime rt(1);
    rt.start();
    mc::async_semaphore s(10);
    std::vector<int> order;
    rt.block_on([&]() -> mc::task<void> {
      auto ex = co_await boost::asio::this_coro::executor;
      auto held = s.try_acquire(8);
      REQUIRE(held.count() == 8);
      boost::asio::co_spawn(ex, take_and_record(s, 5, 1, order), boost::asio::detached);
      co_await yield_once();
      boost::asio::co_spawn(ex, take_and_record(s, 1, 2, order), boost::asio::detached);
      for (int i = 0; i < 4; ++i) co_await yield_once();
      // 2 units are free, enough for waiter 2, but waiter 1 (5 units) is first.
      CHECK(order.empty());
      CHECK(s.waiting() == 2);
      held.release();
      for (int i = 0; i < 8 && order.size() < 2; ++i) co_await yield_once();
    }());
    REQUIRE(order.size() == 2);
    CHECK(order[0] == 1);
    CHECK(order[1] == 2);
    CHECK(s.available() == 10);
    rt.stop();
  }

  TEST_CASE("a cancelled waiter returns cancelled, holds nothing, and unblocks the waiters behind it") {
    mc::runtime::runtime rt(1);
    rt.start();
    mc::async_semaphore s(4);
    rt.block_on([&]() -> mc::task<void> {
      auto held = s.try_acquire(3);
      REQUIRE(held.count() == 3);
      auto r = co_await mc::with_deadline(s.acquire(4), 20ms);
      REQUIRE_FALSE(r.has_value());
      CHECK((mc::is(r.error(), mc::errc::cancelled) || mc::is(r.error(), mc::errc::timeout)));
      CHECK(s.waiting() == 0);
      CHECK(s.available() == 1);
      auto one = co_await s.acquire(1);
      REQUIRE(one.has_value());
      CHECK(one->count() == 1);
    }());
    CHECK(s.available() == 4);
    rt.stop();
  }

  TEST_CASE("stress: many coroutines on several threads never exceed the capacity") {
    mc::runtime::runtime rt(2);
    rt.start();
    mc::async_semaphore s(7);
    std::atomic<std::int64_t> in_use{0}, peak{0};
    rt.block_on([&]() -> mc::task<void> {
      std::vector<mc::task<int>> work;
      for (int i = 0; i < 400; ++i)
        work.push_back([](mc::async_semaphore& s, std::atomic<std::int64_t>& in_use, std::atomic<std::int64_t>& peak,
                          std::uint64_t n) -> mc::task<int> {
          auto u = co_await s.acquire(n);
          REQUIRE(u.has_value());
          auto now = in_use.fetch_add(static_cast<std::int64_t>(u->count())) + static_cast<std::int64_t>(u->count());
          auto p = peak.load();
          while (now > p && !peak.compare_exchange_weak(p, now)) {}
          co_await yield_once();
          in_use.fetch_sub(static_cast<std::int64_t>(u->count()));
          co_return 0;
        }(s, in_use, peak, 1 + static_cast<std::uint64_t>(i % 9)));
      co_await mc::when_all(std::move(work));
    }());
    CHECK(peak.load() <= 7);
    CHECK(s.available() == 7);
    rt.stop();
  }
}
