#include "echo_call.hpp"
#include "mc/rpc/protocol.hpp"
#include "mc/runtime/when_all.hpp"
#include "rpc_fixture.hpp"

#include <cstdlib>

using namespace mc::rpc::test;
using mc::errc;
using mc::task;

namespace {

task<mc::result<void>> echo(std::string ep) {
  auto cli = co_await mc::rpc::connect<TestService>(ep, "test");
  if (!cli) co_return cli.error();
  auto req = cli->echoRequest();
  req.setData(kj::StringPtr("x").asBytes());
  auto resp = co_await mc::rpc::call(req.send());
  if (!resp) co_return resp.error();
  co_return mc::result<void>{};
}

/// The calling thread's cache counters after `d` with nothing called.
task<mc::rpc::client_stats> stats_after(mc::duration d) {
  co_await mc::sleep_for(d);
  co_return mc::rpc::thread_client_stats();
}

/// `n` test servers besides `f`'s, stopped when this goes; `eps`: f's
/// endpoint, then theirs.
struct more_servers {
  more_servers(rpc_fixture& f, int n) : eps{f.endpoint()} {
    for (int i = 0; i < n; ++i) {
      servers.push_back(std::make_unique<mc::rpc::server>(f.rt, local_options()));
      add_test_services(*servers.back());
      REQUIRE(servers.back()->start());
      eps.push_back("127.0.0.1:" + std::to_string(servers.back()->port()));
    }
  }
  ~more_servers() {
    for (auto& s : servers) s->stop();
  }
  more_servers(const more_servers&) = delete;
  more_servers& operator=(const more_servers&) = delete;
  std::vector<std::unique_ptr<mc::rpc::server>> servers;
  std::vector<std::string> eps;
};

struct options_guard {
  explicit options_guard(const mc::rpc::client_options& o) : saved(mc::rpc::get_client_options()) {
    mc::rpc::set_client_options(o);
  }
  ~options_guard() { mc::rpc::set_client_options(saved); }
  mc::rpc::client_options saved;
};

}  // namespace

TEST_SUITE("rpc_client") {
  TEST_CASE("the connection cache stays within its bound under churn and closes idle connections") {
    mc::rpc::client_options co;
    co.max_connections = 3;
    co.idle_timeout = std::chrono::milliseconds(100);
    options_guard guard(co);
    rpc_fixture f;
    more_servers more(f, 5);
    const auto& eps = more.eps;
    auto r = f.rt.block_on(
        [](std::vector<std::string> eps) -> task<mc::result<mc::rpc::client_stats>> {
          std::size_t max_seen = 0;
          for (int i = 0; i < 300; ++i) {
            auto r = co_await echo(eps[(i * 7 + i / 5) % eps.size()]);
            if (!r) co_return r.error();
            max_seen = std::max(max_seen, mc::rpc::thread_client_stats().cached);
          }
          if (max_seen > 3) co_return mc::fail(errc::out_of_range);
          co_return mc::rpc::thread_client_stats();
        }(eps),
        2);
    REQUIRE_MESSAGE(r.has_value(), (r ? std::string() : r.error().message()));
    CHECK(r->evicted > 0);
    CHECK(r->cached <= 3);
    // Every connection opened is evicted, closed idle (a loaded machine can
    // leave one unused past the 100 ms idle timeout mid-loop) or still cached.
    CHECK(r->opened == r->evicted + r->idle_closed + r->cached);
    // Idle close: nothing used for longer than idle_timeout.
    auto idle = f.rt.block_on(stats_after(std::chrono::milliseconds(400)), 2);
    CHECK(idle.cached == 0);
    CHECK(idle.idle_closed >= 1);
  }

  TEST_CASE("a connection a call waits on is neither closed idle nor evicted while another is free") {
    mc::rpc::client_options co;
    co.max_connections = 2;
    co.idle_timeout = std::chrono::milliseconds(50);  // swept every 12.5 ms
    options_guard guard(co);
    rpc_fixture f;
    more_servers more(f, 2);
    const auto& eps = more.eps;
    SUBCASE("a call ten times longer than the idle timeout, no byte on the wire meanwhile") {
      auto r = f.rt.block_on(
          [](std::string ep) -> task<mc::result<mc::rpc::client_stats>> {
            if (auto s = co_await sleep_call(ep, 500, std::chrono::seconds(20)); !s) co_return s.error();
            co_return mc::rpc::thread_client_stats();
          }(eps[0]),
          2);
      REQUIRE_MESSAGE(r.has_value(), (r ? std::string() : r.error().message()));
      CHECK(r->idle_closed == 0);
      CHECK(r->cached == 1);
    }
    SUBCASE("a call that timed out (cancelled: its Finish sent) no longer holds its connection") {
      auto r = f.rt.block_on(sleep_call(eps[0], 5000, std::chrono::milliseconds(100)), 2);
      REQUIRE_FALSE(r.has_value());
      CHECK(mc::is(r.error(), errc::timeout));
    }
    SUBCASE("a new peer evicts the idle connection, not the least recently used one a call waits on") {
      auto r = f.rt.block_on(
          [](std::vector<std::string> eps) -> task<mc::result<void>> {
            std::vector<task<mc::result<void>>> work;
            work.push_back(sleep_call(eps[0], 500, std::chrono::seconds(20)));
            work.push_back([](std::vector<std::string> eps) -> task<mc::result<void>> {
              co_await mc::sleep_for(std::chrono::milliseconds(100));  // the sleep call is on its way
              if (auto e = co_await echo(eps[1]); !e) co_return e;     // cached: eps[0] (busy), eps[1]
              co_return co_await echo(eps[2]);                         // room needed: eps[1] goes
            }(eps));
            for (auto& x : co_await mc::when_all(std::move(work)))
              if (!x) co_return x;
            co_return mc::result<void>{};
          }(eps),
          2);
      CHECK_MESSAGE(r.has_value(), (r ? std::string() : r.error().message()));
    }
    // Afterwards nothing waits on any connection: all are closed idle.
    auto idle = f.rt.block_on(stats_after(std::chrono::milliseconds(400)), 2);
    CHECK(idle.cached == 0);
    CHECK(idle.idle_closed >= 1);
  }

  TEST_CASE("the calling thread's cache can be closed and is rebuilt on the next call") {
    rpc_fixture f;
    auto r = f.rt.block_on(
        [](std::string ep) -> task<mc::result<mc::rpc::client_stats>> {
          if (auto r = co_await echo(ep); !r) co_return r.error();
          mc::rpc::close_thread_connections();
          if (auto r = co_await echo(ep); !r) co_return r.error();
          co_return mc::rpc::thread_client_stats();
        }(f.endpoint()),
        2);
    REQUIRE(r.has_value());
    CHECK(r->opened == 1);  // a fresh cache
    CHECK(r->cached == 1);
  }

  TEST_CASE("a thread's RPC state can be shut down and recreated") {
    rpc_fixture f;
    REQUIRE(f.rt.block_on(echo(f.endpoint()), 2));
    f.rt.block_on(mc::rpc::shutdown_this_thread(), 2);
    CHECK(f.rt.block_on(echo(f.endpoint()), 2));
  }

  TEST_CASE("RPC used off a runtime thread is a logic error") {
    CHECK_THROWS_AS(mc::rpc::detail::thread_tasks(), std::logic_error);
  }

}  // TEST_SUITE

TEST_SUITE("rpc_protocol") {
  TEST_CASE("MC_RPC_PROTOCOL defaults to tcp, accepts rdma, and names the variable for junk") {
    ::unsetenv("MC_RPC_PROTOCOL");
    auto p = mc::rpc::protocol_from_env();
    REQUIRE(p.has_value());
    CHECK(*p == mc::rpc::protocol::tcp);
    ::setenv("MC_RPC_PROTOCOL", "", 1);
    CHECK(mc::rpc::protocol_from_env().value() == mc::rpc::protocol::tcp);
    ::setenv("MC_RPC_PROTOCOL", "tcp", 1);
    CHECK(mc::rpc::protocol_from_env().value() == mc::rpc::protocol::tcp);
    ::setenv("MC_RPC_PROTOCOL", "rdma", 1);
    auto r = mc::rpc::protocol_from_env();
    if (r) {
      CHECK(*r == mc::rpc::protocol::rdma);  // built with verbs
    } else {
      CHECK(mc::is(r.error(), errc::unsupported));  // built without: a clear error
      CHECK(mc::rpc::protocol_error_message("rdma").find("RDMA") != std::string::npos);
    }
    ::setenv("MC_RPC_PROTOCOL", "udp", 1);
    auto u = mc::rpc::protocol_from_env();
    REQUIRE_FALSE(u.has_value());
    CHECK(mc::is(u.error(), errc::invalid_params));
    auto msg = mc::rpc::protocol_error_message("udp");
    CHECK(msg.find("MC_RPC_PROTOCOL") != std::string::npos);
    CHECK(msg.find("tcp") != std::string::npos);
    CHECK(msg.find("udp") != std::string::npos);
    CHECK(mc::rpc::protocol_name(mc::rpc::protocol::rdma) == "rdma");
    ::unsetenv("MC_RPC_PROTOCOL");
  }

  TEST_CASE("the RDMA control plane without a device is a clear error and keeps tcp") {
    if (std::getenv("RXE_VM_DEV")) return;  // there is a device here (the rdma suite covers it)
    auto err = mc::rpc::use_protocol(mc::rpc::protocol::rdma, {});
    CHECK_FALSE(err.empty());
    CHECK((err.find("RDMA") != std::string::npos || err.find("rdma") != std::string::npos));
    CHECK(mc::rpc::current_protocol() == mc::rpc::protocol::tcp);
    auto named = mc::rpc::use_protocol(mc::rpc::protocol::rdma, {"no_such_dev0"});
    CHECK_FALSE(named.empty());
    CHECK(mc::rpc::current_protocol() == mc::rpc::protocol::tcp);
    CHECK(mc::rpc::use_protocol(mc::rpc::protocol::tcp, {}).empty());
  }

}  // TEST_SUITE
