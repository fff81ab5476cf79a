// The "never block a runtime thread" check (mc/runtime/blocking.hpp): in
// checked builds a blocking call from a runtime thread kills the process with a
// message naming the call and the thread. Each misuse runs in a forked child;
// the parent checks the child's fate and its stderr.
#include "mc/runtime/blocking.hpp"
#include "mc/runtime/runtime.hpp"

#include <boost/asio/post.hpp>
#include <doctest/doctest.h>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;

struct child_result {
  int status = 0;       ///< waitpid status
  std::string stderr_;  ///< everything the child wrote to stderr
  bool exited(int code) const { return WIFEXITED(status) && WEXITSTATUS(status) == code; }
  bool killed_by(int sig) const { return WIFSIGNALED(status) && WTERMSIG(status) == sig; }
};

/// Runs `body` in a forked child whose stderr is captured; the child exits 0
/// when `body` returns. The parent waits at most 30 s (then kills the child).
child_result run_in_child(const std::function<void()>& body) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    ::dup2(fds[1], STDERR_FILENO);
    std::signal(SIGABRT, SIG_DFL);  // the child dies of the abort, not in doctest's handler
    try {
      body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: exception: %s\n", e.what());
      std::fflush(stderr);
      ::_exit(3);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  child_result r;
  auto deadline = std::chrono::steady_clock::now() + 30s;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fds[0], POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      ::kill(pid, SIGKILL);
      break;
    }
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    r.stderr_.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  ::waitpid(pid, &r.status, 0);
  return r;
}

mc::task<int> answer() {
  co_await boost::asio::post(co_await boost::asio::this_coro::executor, boost::asio::use_awaitable);
  co_return 42;
}

/// In the child: runs `on_runtime_thread` on thread 0 of a fresh two-thread
/// runtime and waits (10 s at most) for it to return; exit 4 on a hang.
void on_runtime_thread(const std::function<void(mc::runtime::runtime&)>& f) {
  mc::runtime::runtime rt(2);
  rt.start();
  std::promise<std::string> done;
  rt.post(0, [&] {
    try {
      f(rt);
      done.set_value("");
    } catch (const std::exception& e) {
      done.set_value(e.what());
    }
  });
  auto fut = done.get_future();
  if (fut.wait_for(10s) != std::future_status::ready) ::_exit(4);
  auto err = fut.get();
  rt.stop();
  if (!err.empty()) throw std::runtime_error(err);
}

}  // namespace

TEST_SUITE("blocking check") {
  TEST_CASE("block_on from a runtime thread aborts naming the call and the thread (checked builds)") {
    auto r = run_in_child([] { on_runtime_thread([](auto& rt) { (void)rt.block_on(answer(), 1); }); });
    INFO("child stderr: " << r.stderr_);
    if (mc::runtime::blocking_check_enabled()) {
      CHECK(r.killed_by(SIGABRT));
      CHECK(r.stderr_.find("blocking call 'mc::runtime::runtime::block_on'") != std::string::npos);
      CHECK(r.stderr_.find("on runtime thread 0") != std::string::npos);
    } else {  // release: no abort, but block_on on a thread of its own runtime is refused
      CHECK(r.exited(3));
      CHECK(r.stderr_.find("block_on called on one of its own threads") != std::string::npos);
    }
  }

  TEST_CASE("block_on onto the caller's own runtime thread is refused in every build") {
    auto r = run_in_child([] {
      on_runtime_thread([](auto& rt) {
        try {
          (void)rt.block_on(answer(), 0);  // would wait for itself forever
        } catch (const std::logic_error& e) {
          std::fprintf(stderr, "refused: %s\n", e.what());
          return;
        }
        ::_exit(5);
      });
    });
    INFO("child stderr: " << r.stderr_);
    if (mc::runtime::blocking_check_enabled()) {
      CHECK(r.killed_by(SIGABRT));
      CHECK(r.stderr_.find("on runtime thread 0") != std::string::npos);
    } else {
      CHECK(r.exited(0));
      CHECK(r.stderr_.find("refused: ") != std::string::npos);
    }
  }

  TEST_CASE("assert_may_block names the primitive the caller passes") {
    auto r = run_in_child([] { on_runtime_thread([](auto&) { mc::runtime::assert_may_block("my::wait_forever"); }); });
    INFO("child stderr: " << r.stderr_);
    if (mc::runtime::blocking_check_enabled()) {
      CHECK(r.killed_by(SIGABRT));
      CHECK(r.stderr_.find("blocking call 'my::wait_forever' on runtime thread 0") != std::string::npos);
    } else {
      CHECK(r.exited(0));
    }
  }

  TEST_CASE("a blocking_scope allows the call on a runtime thread") {
    auto r = run_in_child([] {
      on_runtime_thread([](auto& rt) {
        mc::runtime::blocking_scope allow("test: waits on thread 1, which never waits on thread 0");
        if (rt.block_on(answer(), 1) != 42) ::_exit(6);
        mc::runtime::assert_may_block("inside the scope");
      });
    });
    INFO("child stderr: " << r.stderr_);
    CHECK(r.exited(0));
  }

  TEST_CASE("the same calls from normal threads work") {
    mc::runtime::runtime rt(2);
    rt.start();
    CHECK(mc::runtime::may_block());
    mc::runtime::assert_may_block("test: the main thread");
    CHECK(rt.block_on(answer(), 1) == 42);
    int from_thread = 0;
    std::thread t([&] { from_thread = rt.block_on(answer(), 0); });
    t.join();
    CHECK(from_thread == 42);
    std::promise<bool> on_rt;
    rt.post(1, [&] { on_rt.set_value(mc::runtime::may_block()); });
    CHECK_FALSE(on_rt.get_future().get());
  }
}
