// Two processes: the client here, rpc_test_server spawned with posix_spawn.
#include "mc/rpc/capnp.hpp"
#include "mc/rpc/client.hpp"
#include "mc/runtime/runtime.hpp"
#include "echo_call.hpp"
#include "test_service.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>

extern char** environ;

using mc::errc;
using mc::task;
using namespace mc::rpc::test;

namespace {

#ifndef RPC_TEST_SERVER
#error "RPC_TEST_SERVER (path of rpc_test_server) must be defined by the build"
#endif

/// A spawned rpc_test_server; killed (only this PID) and reaped on destruction.
class server_process {
 public:
  explicit server_process(std::uint16_t port = 0) { REQUIRE(start(port)); }
  /// Spawns the server on `port`; false if it exited without listening (e.g.
  /// the port is taken).
  bool start(std::uint16_t port) {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    std::string path = RPC_TEST_SERVER;
    std::string port_arg = std::to_string(port);
    char* argv[] = {path.data(), port_arg.data(), nullptr};
    int rc = ::posix_spawn(&pid_, path.c_str(), &fa, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    REQUIRE(rc == 0);
    out_ = fds[0];
    port_ = read_port(std::chrono::seconds(10));
    if (port_ == 0) kill(SIGKILL);
    return port_ != 0;
  }
  server_process(std::nullptr_t) {}
  ~server_process() { kill(SIGKILL); }
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;

  std::uint16_t port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

  /// Sends `sig` and reaps the process; returns its wait status.
  int kill(int sig) {
    int status = 0;
    if (pid_ > 0) {
      ::kill(pid_, sig);
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
    }
    if (out_ >= 0) ::close(out_), out_ = -1;
    return status;
  }

 private:
  std::uint16_t read_port(std::chrono::milliseconds timeout) {
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (line.find('\n') == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      REQUIRE(left.count() > 0);
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[64];
      auto n = ::read(out_, buf, sizeof buf);
      if (n <= 0) return 0;  // exited before listening
      line.append(buf, static_cast<std::size_t>(n));
    }
    REQUIRE(line.rfind("PORT ", 0) == 0);
    return static_cast<std::uint16_t>(std::stoul(line.substr(5)));
  }

  pid_t pid_ = -1;
  int out_ = -1;
  std::uint16_t port_ = 0;
};

struct client_env {
  client_env() { rt.start(); }
  ~client_env() {
    mc::rpc::shutdown(rt);
    rt.stop();
  }
  mc::runtime::runtime rt{2};
};

}  // namespace

TEST_SUITE("rpc_process") {
  TEST_CASE("calls, errors and a deadline work against a server in another process") {
    server_process proc;
    client_env env;
    for (std::size_t size : {1u, 777u, 123457u}) CHECK(env.rt.block_on(echo(proc.endpoint(), size)));
    auto r = env.rt.block_on([](std::string ep) -> task<mc::result<std::uint64_t>> {
      auto cli = co_await mc::rpc::connect<TestService>(ep, "test");
      if (!cli) co_return cli.error();
      auto f = cli->failRequest();
      f.setName("OBJECT_NOT_FOUND");
      auto fr = co_await mc::rpc::call(f.send());
      if (fr || !mc::is(fr.error(), errc::object_not_found)) co_return mc::fail(errc::internal_error);
      auto h = co_await mc::rpc::call(cli->hangRequest().send(), std::chrono::milliseconds(50));
      if (h || !mc::is(h.error(), errc::timeout)) co_return mc::fail(errc::internal_error);
      auto w = cli->waitCancelledRequest();
      w.setAtLeast(1);
      auto wr = co_await mc::rpc::call(w.send(), std::chrono::seconds(5));
      if (!wr) co_return wr.error();
      co_return wr->getCancelled();
    }(proc.endpoint()));
    REQUIRE_MESSAGE(r.has_value(), (r ? std::string() : r.error().message()));
    CHECK(*r >= 1);  // the server process cancelled the hung coroutine
    int status = proc.kill(SIGTERM);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);  // clean shutdown path in the server
  }

  TEST_CASE("a client reconnects after the server process is killed and restarted") {
    client_env env;
    // A port outside the ephemeral range, so that no outgoing connection of
    // another process can take it while the server is down.
    std::uint16_t port = 0;
    {
      server_process first(nullptr);
      for (int attempt = 0; attempt < 50 && port == 0; ++attempt) {
        auto candidate = static_cast<std::uint16_t>(20000 + (::getpid() * 131 + attempt * 977) % 10000);
        if (first.start(candidate)) port = candidate;
      }
      REQUIRE(port != 0);
      REQUIRE(env.rt.block_on(echo(first.endpoint(), 100)));
      first.kill(SIGKILL);
      auto down = env.rt.block_on(echo("127.0.0.1:" + std::to_string(port), 100));
      REQUIRE_FALSE(down);
      CHECK(mc::is(down.error(), errc::rpc_fail));
    }
    server_process second(port);
    auto r = env.rt.block_on(echo(second.endpoint(), 4321));
    CHECK_MESSAGE(r, mc::rpc::last_error_message());
  }

}  // TEST_SUITE
