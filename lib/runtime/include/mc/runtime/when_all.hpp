#pragma once
/// Await a runtime-sized set of tasks concurrently on the current executor.
#include "mc/runtime/task.hpp"

#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>

#include <exception>
#include <vector>

namespace mc {

/// Runs every task concurrently (interleaved on the caller's executor) and
/// returns their results in input order; per-item errors stay in the items
/// (tasks return `result<...>`). Cancelling the caller cancels every child. If
/// a child throws, the others still finish and the first exception (in input
/// order) is rethrown. T must be default-constructible and movable.
template <class T>
task<std::vector<T>> when_all(std::vector<task<T>> tasks) {
  if (tasks.empty()) co_return std::vector<T>{};
  auto ex = co_await boost::asio::this_coro::executor;
  using op_t = decltype(boost::asio::co_spawn(ex, std::move(tasks.front()), boost::asio::deferred));
  std::vector<op_t> ops;
  ops.reserve(tasks.size());
  for (auto& t : tasks) ops.push_back(boost::asio::co_spawn(ex, std::move(t), boost::asio::deferred));
  auto [order, errors, values] =
      co_await boost::asio::experimental::make_parallel_group(std::move(ops))
          .async_wait(boost::asio::experimental::wait_for_all(), boost::asio::use_awaitable);
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  co_return std::move(values);
}

}  // namespace mc
