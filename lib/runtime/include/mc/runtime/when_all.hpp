#pragma once
/// Await a runtime-sized set of tasks concurrently on the current executor.
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"

#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/system/system_error.hpp>

#include <exception>
#include <type_traits>
#include <vector>

namespace mc {

namespace detail {

/// A when_all child: throw_if_cancelled off, so that a cancelled child
/// unwinds through its error paths instead of an exception.
template <class T>
task<T> child_without_cancel_throw(task<T> t) {
  co_await boost::asio::this_coro::throw_if_cancelled(false);
  co_return co_await std::move(t);
}

}  // namespace detail

/// Runs every task concurrently (interleaved on the caller's executor) and
/// returns their results in input order; per-item errors stay in the items
/// (tasks return `result<...>`). Cancelling the caller cancels every child;
/// the children run with throw_if_cancelled off (their awaits then return
/// errors: a child returning `result<...>` reports errc::cancelled through its
/// own error path). If a child throws, the others still finish and the first
/// exception (in input order) is rethrown. If the caller was cancelled before
/// the children could start, every item is errc::cancelled (T constructible
/// from an error_code, e.g. `result<...>`; other T: the cancellation
/// exception propagates). T must be default-constructible and movable.
///
/// One task (T constructible from an error_code) is awaited in place, with
/// the same semantics and no spawned coroutine or parallel group (the common
/// case of a batch whose keys all go to one owner, in one call).
template <class T>
task<std::vector<T>> when_all(std::vector<task<T>> tasks) {
  if (tasks.empty()) co_return std::vector<T>{};
  if constexpr (std::is_constructible_v<T, boost::system::error_code>) {
    if (tasks.size() == 1) {
      std::vector<T> values;
      auto cs = co_await boost::asio::this_coro::cancellation_state;
      if (cs.cancelled() != boost::asio::cancellation_type::none) {
        values.emplace_back(make_error_code(errc::cancelled));
        co_return values;
      }
      const bool throws = co_await boost::asio::this_coro::throw_if_cancelled();
      co_await boost::asio::this_coro::throw_if_cancelled(false);
      std::exception_ptr error;
      try {
        values.push_back(co_await std::move(tasks.front()));
      } catch (const boost::system::system_error& e) {
        if (e.code() == boost::asio::error::operation_aborted)
          values.emplace_back(make_error_code(errc::cancelled));
        else
          error = std::current_exception();
      } catch (...) {
        error = std::current_exception();
      }
      co_await boost::asio::this_coro::throw_if_cancelled(throws);
      if (error) std::rethrow_exception(error);
      co_return values;
    }
  }
  auto ex = co_await boost::asio::this_coro::executor;
  using op_t = decltype(boost::asio::co_spawn(ex, detail::child_without_cancel_throw(std::move(tasks.front())),
                                              boost::asio::deferred));
  std::vector<op_t> ops;
  ops.reserve(tasks.size());
  for (auto& t : tasks)
    ops.push_back(boost::asio::co_spawn(ex, detail::child_without_cancel_throw(std::move(t)), boost::asio::deferred));
  const std::size_t n = ops.size();
  std::vector<std::exception_ptr> errors;
  std::vector<T> values;
  try {
    auto [order, e, v] = co_await boost::asio::experimental::make_parallel_group(std::move(ops))
                             .async_wait(boost::asio::experimental::wait_for_all(), boost::asio::use_awaitable);
    errors = std::move(e);
    values = std::move(v);
  } catch (const boost::system::system_error& e) {
    if constexpr (!std::is_constructible_v<T, boost::system::error_code>) throw;
    if (e.code() != boost::asio::error::operation_aborted) throw;
  }
  if constexpr (std::is_constructible_v<T, boost::system::error_code>) {
    if (values.size() != n) {  // the caller was cancelled first
      values.clear();
      for (std::size_t i = 0; i < n; ++i) values.emplace_back(make_error_code(errc::cancelled));
    }
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  co_return std::move(values);
}

}  // namespace mc
