#include "mc/runtime/deadline.hpp"
#include "mc/runtime/runtime.hpp"

#include <boost/asio/as_tuple.hpp>
#include <doctest/doctest.h>

#include <chrono>

using namespace std::chrono_literals;

namespace {
struct probe {
  bool started = false;
  bool cancelled = false;
  bool finished = false;
};

mc::task<mc::result<int>> slow_op(probe& p, mc::duration d) {
  p.started = true;
  boost::asio::steady_timer t(co_await boost::asio::this_coro::executor, d);
  auto [ec] = co_await t.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
  if (ec) {
    p.cancelled = true;
    co_return mc::fail(mc::errc::cancelled);
  }
  p.finished = true;
  co_return 42;
}
}  // namespace

TEST_SUITE("deadline") {
  TEST_CASE("an operation that finishes in time returns its value") {
    mc::runtime::runtime rt(1);
    rt.start();
    probe p;
    auto r = rt.block_on(mc::with_deadline(slow_op(p, 1ms), 10s));
    REQUIRE(r.has_value());
    CHECK(*r == 42);
    CHECK(p.finished);
  }

  TEST_CASE("deadline expiry returns TIMEOUT and observably cancels the operation") {
    mc::runtime::runtime rt(1);
    rt.start();
    probe p;
    auto t0 = std::chrono::steady_clock::now();
    auto r = rt.block_on(mc::with_deadline(slow_op(p, 60s), 20ms));
    auto took = std::chrono::steady_clock::now() - t0;
    REQUIRE(r.has_error());
    CHECK(mc::is(r.error(), mc::errc::timeout));
    CHECK(p.started);
    CHECK(p.cancelled);  // the loser was cancelled and had unwound before we returned
    CHECK_FALSE(p.finished);
    CHECK(took < 30s);
  }

  TEST_CASE("an error from the operation is passed through unchanged") {
    mc::runtime::runtime rt(1);
    rt.start();
    auto r = rt.block_on(mc::with_deadline([]() -> mc::task<mc::result<int>> {
      co_return mc::fail(mc::errc::object_not_found);
    }(), 1s));
    REQUIRE(r.has_error());
    CHECK(mc::is(r.error(), mc::errc::object_not_found));
  }

  TEST_CASE("an absolute deadline already in the past fails without running the operation") {
    mc::runtime::runtime rt(1);
    rt.start();
    probe p;
    auto r = rt.block_on(
        mc::with_deadline_at(slow_op(p, 1ms), std::chrono::steady_clock::now() - 1ms));
    CHECK(mc::is(r.error(), mc::errc::timeout));
    CHECK_FALSE(p.started);
  }

  TEST_CASE("cancelling an outer deadline propagates into a nested one") {
    mc::runtime::runtime rt(1);
    rt.start();
    probe p;
    auto r = rt.block_on(mc::with_deadline(mc::with_deadline(slow_op(p, 60s), 30s), 20ms));
    CHECK(mc::is(r.error(), mc::errc::timeout));
    CHECK(p.cancelled);
  }

  TEST_CASE("an exception thrown by the operation is rethrown") {
    mc::runtime::runtime rt(1);
    rt.start();
    CHECK_THROWS_AS(rt.block_on(mc::with_deadline([]() -> mc::task<mc::result<int>> {
      throw std::logic_error("broken invariant");
      co_return 1;
    }(), 1s)), std::logic_error);
  }
}
