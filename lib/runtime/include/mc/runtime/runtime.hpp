#pragma once
/// A fixed set of threads, each running its own `io_context` (sockets and timers
/// on epoll with Boost < 1.83, on io_uring above: meson.build, README "Asio backend").
#include "mc/runtime/task.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <cstddef>
#include <exception>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace mc::runtime {

/// N threads, one `io_context` each. Never runs one context from several threads.
/// Thread-safety: `post`, `executor`, `block_on` are thread-safe; `start`/`stop`
/// must be called from one controlling (non-runtime) thread.
class runtime {
 public:
  /// `threads` >= 1. Contexts exist from construction; threads run after start().
  explicit runtime(std::size_t threads = 1);
  ~runtime();
  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  std::size_t size() const noexcept { return contexts_.size(); }
  boost::asio::io_context& context(std::size_t i) { return *contexts_.at(i); }
  mc::executor executor(std::size_t i) { return contexts_.at(i)->get_executor(); }

  /// Starts the threads (idempotent).
  void start();
  /// Stops every context and joins the threads (idempotent). Pending handlers
  /// are dropped; call it after the application has drained its work.
  void stop();
  bool running() const noexcept { return !threads_.empty(); }

  /// Posts `f` to thread `i`.
  template <class F>
  void post(std::size_t i, F&& f) {
    boost::asio::post(context(i), std::forward<F>(f));
  }

  /// Runs `t` on thread `thread` and blocks the calling thread until it
  /// finishes; returns its value, rethrows its exception. The caller must not
  /// be a runtime thread: checked builds abort (mc/runtime/blocking.hpp), and
  /// every build throws std::logic_error when the caller is one of this
  /// runtime's own threads (outside a `blocking_scope`).
  template <class T>
  T block_on(task<T> t, std::size_t thread = 0) {
    check_block_on();
    std::promise<T> p;
    auto fut = p.get_future();
    if constexpr (std::is_void_v<T>) {
      boost::asio::co_spawn(executor(thread), std::move(t), [&p](std::exception_ptr e) {
        if (e)
          p.set_exception(e);
        else
          p.set_value();
      });
    } else {
      boost::asio::co_spawn(executor(thread), std::move(t), [&p](std::exception_ptr e, T v) {
        if (e)
          p.set_exception(e);
        else
          p.set_value(std::move(v));
      });
    }
    return fut.get();
  }

  /// Index of the calling runtime thread, or -1 when called from elsewhere.
  static int current_index() noexcept;
  /// The runtime owning the calling thread, or nullptr.
  static runtime* current() noexcept;

 private:
  void thread_main(std::size_t i);
  /// assert_may_block("...block_on") + the same-runtime refusal.
  void check_block_on() const;

  using guard_t = boost::asio::executor_work_guard<boost::asio::io_context::executor_type>;
  std::vector<std::unique_ptr<boost::asio::io_context>> contexts_;
  std::vector<std::unique_ptr<guard_t>> guards_;
  std::vector<std::thread> threads_;
};

}  // namespace mc::runtime
