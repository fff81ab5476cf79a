#pragma once
/// The coroutine type of the project and small helpers around it.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace mc {

/// Every asynchronous function of the project is a `task<T>`: a Boost.Asio
/// awaitable bound to the executor of the coroutine that awaits it.
template <class T = void>
using task = boost::asio::awaitable<T>;

using executor = boost::asio::any_io_executor;

/// Runs `t` on `ex` (possibly another runtime thread) and resumes the caller on
/// its own executor with the result. Exceptions propagate. Cancellation of the
/// caller is not forwarded across threads (asio#1332); bound `t` with a
/// deadline on its own thread instead.
template <class T>
task<T> run_on(executor ex, task<T> t) {
  co_return co_await boost::asio::co_spawn(std::move(ex), std::move(t), boost::asio::use_awaitable);
}

}  // namespace mc
