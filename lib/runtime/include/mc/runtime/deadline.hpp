#pragma once
/// Race an operation against a timer; the loser is cancelled.
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"

#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <exception>

namespace mc {

using duration = std::chrono::steady_clock::duration;
using time_point = std::chrono::steady_clock::time_point;

namespace detail {

/// True when `e` is Asio's "operation aborted" (what a cancelled co_await throws).
inline bool is_abort(const boost::system::system_error& e) noexcept {
  return e.code() == boost::asio::error::operation_aborted;
}

/// Runs `op` as the body of a spawned coroutine with throw_if_cancelled off:
/// after cancellation, its awaits (and those of every coroutine it awaits)
/// complete with errors instead of throwing. A cancellation exception that
/// still escapes becomes errc::cancelled; any other exception propagates.
template <class T>
task<result<T>> errors_not_exceptions(task<result<T>> op) {
  co_await boost::asio::this_coro::throw_if_cancelled(false);
  try {
    co_return co_await std::move(op);
  } catch (const boost::system::system_error& e) {
    if (!is_abort(e)) throw;
  }
  co_return fail(errc::cancelled);
}

}  // namespace detail

/// Awaits `op` for at most `timeout`. If the timer fires first, `op` receives
/// terminal cancellation (and is awaited until it has unwound) and the result
/// is `errc::timeout`. If the caller itself is cancelled, both are cancelled
/// and the result is `errc::cancelled` (never an exception). `op` runs with
/// throw_if_cancelled off: once cancelled, its awaits return errors, so it
/// unwinds through its error paths (leases discard half-used connections).
/// An exception thrown by `op` for another reason is rethrown.
template <class T>
task<result<T>> with_deadline(task<result<T>> op, duration timeout) {
  auto ex = co_await boost::asio::this_coro::executor;
  auto cs = co_await boost::asio::this_coro::cancellation_state;
  if (cs.cancelled() != boost::asio::cancellation_type::none) co_return fail(errc::cancelled);
  boost::asio::steady_timer timer(ex, timeout);
  std::size_t first = 0;
  std::exception_ptr eptr;
  result<T> value = fail(errc::cancelled);
  try {
    auto [order, e, v, timer_ec] =
        co_await boost::asio::experimental::make_parallel_group(
            boost::asio::co_spawn(ex, detail::errors_not_exceptions(std::move(op)), boost::asio::deferred),
            timer.async_wait(boost::asio::deferred))
            .async_wait(boost::asio::experimental::wait_for_one(), boost::asio::use_awaitable);
    first = order[0];
    eptr = e;
    value = std::move(v);
  } catch (const boost::system::system_error& e) {
    if (!detail::is_abort(e)) throw;
    co_return fail(errc::cancelled);  // the caller was cancelled
  }
  if (first == 0) {
    if (eptr) std::rethrow_exception(eptr);
    co_return std::move(value);
  }
  co_return fail(errc::timeout);
}

/// Time left until `deadline` (zero once it has passed).
inline duration time_left(time_point deadline) {
  auto now = std::chrono::steady_clock::now();
  return deadline > now ? deadline - now : duration::zero();
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
