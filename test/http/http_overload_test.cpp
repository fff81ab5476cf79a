// The HTTP server past its connection bound: every extra connection gets a
// complete `503 Service Unavailable` with `Retry-After: 1` (never a reset or an
// empty read), even past the 64 pending 503s (accepting pauses), while the
// admitted connections get their answers; and the fd-derived bound.
#include "mc/http/node_endpoints.hpp"
#include "mc/http/prometheus.hpp"
#include "mc/http/server.hpp"
#include "mc/runtime/runtime.hpp"
#include "exchange.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using mc::test::read_to_end;
using mc::test::send_all;

/// A held request must not hang the test: reads give up after 30 s.
int connect_to(std::uint16_t port) { return mc::test::connect_to(port, 30); }

/// Whether `r` is one complete HTTP response: its body is Content-Length long.
bool complete(const std::string& r) {
  auto end = r.find("\r\n\r\n");
  auto cl = r.find("Content-Length: ");
  if (end == std::string::npos || cl == std::string::npos || cl > end) return false;
  return r.size() - end - 4 == std::stoul(r.substr(cl + 16));
}

const std::string get_slow = "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

}  // namespace

TEST_SUITE("http_overload") {
  TEST_CASE("the connection bound is a quarter of the fd soft limit within 64..16384") {
    using mc::http::connection_bound_for_fd_limit;
    CHECK(connection_bound_for_fd_limit(1024) == 256);
    CHECK(connection_bound_for_fd_limit(65536) == 16384);
    CHECK(connection_bound_for_fd_limit(1 << 20) == 16384);  // ceiling
    CHECK(connection_bound_for_fd_limit(100) == 64);         // floor
    CHECK(connection_bound_for_fd_limit(0) == 64);
    CHECK(connection_bound_for_fd_limit(4001) == 1000);
    CHECK(connection_bound_for_fd_limit(RLIM_INFINITY) == 4096);
    rlimit rl{};
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &rl) == 0);
    CHECK(mc::http::connection_bound_from_fd_limit() == connection_bound_for_fd_limit(rl.rlim_cur));
  }

  TEST_CASE("over the bound every extra connection gets a complete 503 with Retry-After; admitted ones are answered") {
    constexpr std::size_t bound = 3;
    // More than the 64 pending 503s the server allows at once: the rest wait
    // for accepting to resume, none is closed unanswered.
    constexpr std::size_t extras = 90;
    mc::runtime::runtime rt(2);
    rt.start();
    std::atomic<bool> release{false};
    std::atomic<int> waiting{0};
    {
      mc::http::server_options o;
      o.host = "127.0.0.1";
      o.max_connections = bound;
      mc::http::server s(rt, o);
      // Held until the test releases it: keeps its connection open and counted.
      s.route("/slow", [&](mc::http::request&) -> mc::task<mc::http::response> {
        waiting.fetch_add(1);
        while (!release.load()) {
          boost::asio::steady_timer t(co_await boost::asio::this_coro::executor, std::chrono::milliseconds(2));
          co_await t.async_wait(boost::asio::use_awaitable);
        }
        co_return mc::http::response::make(200, "slow done");
      });
      REQUIRE(s.start());
      auto port = s.port();

      std::vector<int> held;
      for (std::size_t i = 0; i < bound; ++i) {
        held.push_back(connect_to(port));
        send_all(held.back(), get_slow);
      }
      while (waiting.load() < static_cast<int>(bound)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      CHECK(s.stats().connections == bound);

      // All extras connect and send their request before any is read: the
      // server faces them all at once.
      std::vector<int> extra;
      for (std::size_t i = 0; i < extras; ++i) {
        extra.push_back(connect_to(port));
        send_all(extra.back(), get_slow);
      }
      std::size_t busy = 0;
      for (auto fd : extra) {
        int err = 0;
        auto r = read_to_end(fd, err);
        CAPTURE(r);
        CHECK(err == 0);  // never a reset
        CHECK(r.rfind("HTTP/1.1 503 Service Unavailable\r\n", 0) == 0);
        CHECK(r.find("\r\nRetry-After: 1\r\n") != std::string::npos);
        CHECK(r.find("\r\nConnection: close\r\n") != std::string::npos);
        CHECK(r.find("\"error\":\"OVERLOADED\"") != std::string::npos);
        CHECK(complete(r));
        if (r.rfind("HTTP/1.1 503", 0) == 0 && complete(r)) ++busy;
      }
      CHECK(busy == extras);
      CHECK(waiting.load() == static_cast<int>(bound));  // no extra request reached a handler
      CHECK(s.stats().refused == extras);

      release = true;
      for (auto fd : held) {
        int err = 0;
        auto r = read_to_end(fd, err);
        CHECK(err == 0);
        CHECK(r.rfind("HTTP/1.1 200", 0) == 0);
        CHECK(r.find("slow done") != std::string::npos);
        CHECK(complete(r));
      }
      // Below the bound again: a new connection is served.
      while (s.stats().connections != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      int fd = connect_to(port);
      send_all(fd, get_slow);
      int err = 0;
      auto r = read_to_end(fd, err);
      CHECK(r.rfind("HTTP/1.1 200", 0) == 0);

      mc::http::exposition e;
      mc::http::append_common_metrics(e, s);
      auto text = e.take();
      CHECK(text.find("mc_http_connections_refused_total " + std::to_string(extras) + "\n") != std::string::npos);
      s.stop();
    }
    rt.stop();
  }
}
