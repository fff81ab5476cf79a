#include "mc/runtime/deadline.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/runtime/when_all.hpp"

#include <boost/asio/post.hpp>

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
    auto r = rt.block_on(
        mc::with_deadline([]() -> mc::task<mc::result<int>> { co_return mc::fail(mc::errc::object_not_found); }(), 1s));
    REQUIRE(r.has_error());
    CHECK(mc::is(r.error(), mc::errc::object_not_found));
  }

  TEST_CASE("an absolute deadline already in the past fails without running the operation") {
    mc::runtime::runtime rt(1);
    rt.start();
    probe p;
    auto r = rt.block_on(mc::with_deadline_at(slow_op(p, 1ms), std::chrono::steady_clock::now() - 1ms));
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
    CHECK_THROWS_AS(rt.block_on(mc::with_deadline(
                        []() -> mc::task<mc::result<int>> {
                          throw std::logic_error("broken invariant");
                          co_return 1;
                        }(),
                        1s)),
                    std::logic_error);
  }
}

namespace {
/// Keeps awaiting after it was cancelled (as an I/O path that reports the
/// cancellation and then cleans up does): with throw_if_cancelled on, the
/// second await would throw operation_aborted out of the caller.
mc::task<mc::result<int>> awaits_after_cancel(probe& p) {
  auto ex = co_await boost::asio::this_coro::executor;
  boost::asio::steady_timer t(ex, 10s);
  auto [ec] = co_await t.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
  if (!ec) co_return 1;
  p.cancelled = true;
  boost::asio::steady_timer cleanup(ex, 1ms);
  auto [ec2] = co_await cleanup.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
  (void)ec2;
  co_await boost::asio::post(ex, boost::asio::use_awaitable);  // a plain await after cancellation
  p.finished = true;
  co_return mc::fail(mc::errc::cancelled);
}
}  // namespace

TEST_SUITE("deadline") {
  TEST_CASE("an operation that keeps awaiting after its deadline cancelled it returns TIMEOUT, never throws") {
    mc::runtime::runtime rt(1);
    rt.start();
    probe p;
    mc::result<int> r = 0;
    CHECK_NOTHROW(r = rt.block_on(mc::with_deadline(awaits_after_cancel(p), 20ms)));
    REQUIRE(r.has_error());
    CHECK(mc::is(r.error(), mc::errc::timeout));
    CHECK(p.cancelled);
    CHECK(p.finished);  // it ran its cleanup to the end
  }

  TEST_CASE("when_all children cancelled by a deadline report CANCELLED values, never throw") {
    mc::runtime::runtime rt(1);
    rt.start();
    probe a, b;
    auto body = [](probe& a, probe& b) -> mc::task<mc::result<int>> {
      std::vector<mc::task<mc::result<int>>> v;
      v.push_back(awaits_after_cancel(a));
      v.push_back(awaits_after_cancel(b));
      auto rs = co_await mc::when_all(std::move(v));
      for (auto& r : rs)
        if (!r || !mc::is(r.error(), mc::errc::cancelled)) co_return mc::fail(mc::errc::internal_error);
      co_return mc::fail(mc::errc::cancelled);
    };
    mc::result<int> r = 0;
    CHECK_NOTHROW(r = rt.block_on(mc::with_deadline(body(a, b), 20ms)));
    REQUIRE(r.has_error());
    CHECK(mc::is(r.error(), mc::errc::timeout));
    CHECK(a.finished);
    CHECK(b.finished);
  }
}
