#pragma once
/// Race an operation against a timer; the loser is cancelled.
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"

#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <exception>

namespace mc {

using duration = std::chrono::steady_clock::duration;
using time_point = std::chrono::steady_clock::time_point;

/// Awaits `op` for at most `timeout`. If the timer fires first, `op` receives
/// terminal cancellation (and is awaited until it has unwound) and the result
/// is `errc::timeout`. If the caller itself is cancelled, both are cancelled.
/// An exception thrown by `op` is rethrown.
template <class T>
task<result<T>> with_deadline(task<result<T>> op, duration timeout) {
  auto ex = co_await boost::asio::this_coro::executor;
  boost::asio::steady_timer timer(ex, timeout);
  auto [order, eptr, value, timer_ec] =
      co_await boost::asio::experimental::make_parallel_group(
          boost::asio::co_spawn(ex, std::move(op), boost::asio::deferred),
          timer.async_wait(boost::asio::deferred))
          .async_wait(boost::asio::experimental::wait_for_one(), boost::asio::use_awaitable);
  if (order[0] == 0) {
    if (eptr) std::rethrow_exception(eptr);
    co_return std::move(value);
  }
  co_return fail(errc::timeout);
}

/// Same, with an absolute deadline (passed down across calls and RPC hops).
template <class T>
task<result<T>> with_deadline_at(task<result<T>> op, time_point deadline) {
  auto now = std::chrono::steady_clock::now();
  if (deadline <= now) co_return fail(errc::timeout);
  co_return co_await with_deadline(std::move(op), deadline - now);
}

/// Suspends for `d`; returns errc::cancelled if cancelled first.
task<result<void>> sleep_for(duration d);

}  // namespace mc
