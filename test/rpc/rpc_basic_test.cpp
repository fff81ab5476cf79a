#include "mc/runtime/when_all.hpp"
#include "rpc_fixture.hpp"
#include "test_support.hpp"

#include <kj/common.h>

#include <atomic>
#include <vector>

using namespace mc::rpc::test;
using mc::errc;
using mc::task;

namespace {

task<mc::result<std::uint64_t>> echo_once(std::string ep, std::size_t size, std::uint64_t seed) {
  auto cli = co_await mc::rpc::connect<TestService>(ep, "test");
  if (!cli) co_return cli.error();
  auto bytes = mc::test::random_bytes(size, seed);
  auto req = cli->echoRequest();
  req.setData(kj::arrayPtr(bytes.data(), bytes.size()));
  auto resp = co_await mc::rpc::call(req.send());
  if (!resp) co_return resp.error();
  auto d = resp->getData();
  if (d.size() != size) co_return mc::fail(errc::internal_error);
  auto sum = mc::test::checksum(d.begin(), d.size());
  if (sum != mc::test::checksum(bytes.data(), bytes.size())) co_return mc::fail(errc::internal_error);
  co_return sum;
}

}  // namespace

TEST_SUITE("rpc_basic") {
  TEST_CASE("a coroutine client gets its random payloads echoed intact at odd sizes") {
    rpc_fixture f;
    for (std::size_t size : {0u, 1u, 63u, 64u, 4097u, 65537u, 1000003u}) {
      auto r = f.rt.block_on(echo_once(f.endpoint(), size, size * 7 + 1), 2);
      CHECK_MESSAGE(r, "size " << size << ": " << (r ? std::string() : r.error().message()));
    }
    auto st = f.rt.block_on([]() -> task<mc::rpc::client_stats> { co_return mc::rpc::thread_client_stats(); }(), 2);
    CHECK(st.opened == 1);  // one cached connection served every call
    CHECK(st.cached == 1);
  }

  TEST_CASE("an mc error returned by the service comes back with the same code") {
    rpc_fixture f;
    auto run = [](std::string ep, std::string name) -> task<mc::result<void>> {
      auto cli = co_await mc::rpc::connect<TestService>(ep, "test");
      if (!cli) co_return cli.error();
      auto req = cli->failRequest();
      req.setName(name);
      auto resp = co_await mc::rpc::call(req.send());
      if (!resp) co_return resp.error();
      co_return mc::result<void>{};
    };
    for (auto code : {errc::object_not_found, errc::invalid_params, errc::no_available_handle, errc::timeout}) {
      auto r = f.rt.block_on(run(f.endpoint(), std::string(mc::error_name(code))), 2);
      REQUIRE_FALSE(r);
      CHECK(mc::is(r.error(), code));
    }
  }

  TEST_CASE("an exception thrown by a service coroutine comes back as RPC_FAIL and the connection survives") {
    rpc_fixture f;
    auto run = [](std::string ep) -> task<mc::result<void>> {
      auto cli = co_await mc::rpc::connect<TestService>(ep, "test");
      if (!cli) co_return cli.error();
      auto resp = co_await mc::rpc::call(cli->throwStdRequest().send());
      if (resp) co_return mc::fail(errc::internal_error);
      if (!mc::is(resp.error(), errc::rpc_fail)) co_return resp.error();
      if (mc::rpc::last_error_message().find("thrown by the test service") == std::string::npos)
        co_return mc::fail(errc::internal_error);
      co_return mc::result<void>{};
    };
    auto r = f.rt.block_on(run(f.endpoint()), 2);
    CHECK_MESSAGE(r, mc::rpc::last_error_message());
    CHECK(f.rt.block_on(echo_once(f.endpoint(), 100, 1), 2));
  }

  TEST_CASE("several named services share one port and an unknown name is UNSUPPORTED") {
    rpc_fixture f;
    auto run = [](std::string ep) -> task<mc::result<std::string>> {
      auto other = co_await mc::rpc::connect<OtherService>(ep, "other");
      if (!other) co_return other.error();
      auto resp = co_await mc::rpc::call(other->nameRequest().send());
      if (!resp) co_return resp.error();
      co_return std::string(resp->getName().cStr());
    };
    auto r = f.rt.block_on(run(f.endpoint()), 3);
    REQUIRE(r);
    CHECK(*r == "other");
    auto missing = f.rt.block_on(
        [](std::string ep) -> task<mc::result<void>> {
          auto c = co_await mc::rpc::connect<TestService>(ep, "nope");
          if (!c) co_return c.error();
          co_return mc::result<void>{};
        }(f.endpoint()),
        3);
    REQUIRE_FALSE(missing);
    CHECK(mc::is(missing.error(), errc::unsupported));
  }

  TEST_CASE("connecting to a closed port or a malformed endpoint is RPC_FAIL") {
    rpc_fixture f;
    auto port = f.srv->port();
    f.srv->stop();
    auto r = f.rt.block_on(echo_once("127.0.0.1:" + std::to_string(port), 10, 1), 2);
    REQUIRE_FALSE(r);
    CHECK(mc::is(r.error(), errc::rpc_fail));
    for (std::string bad : {"", "nocolon", "127.0.0.1:", "127.0.0.1:12ab", "[::1"}) {
      auto b = f.rt.block_on(echo_once(bad, 10, 1), 2);
      REQUIRE_FALSE(b);
      CHECK(mc::is(b.error(), errc::rpc_fail));
    }
  }

  TEST_CASE("a call to a method that never answers times out and its server coroutine is cancelled") {
    rpc_fixture f;
    auto before = counters().cancelled.load();
    auto run = [](std::string ep) -> task<mc::result<std::uint64_t>> {
      auto cli = co_await mc::rpc::connect<TestService>(ep, "test");
      if (!cli) co_return cli.error();
      auto t0 = std::chrono::steady_clock::now();
      auto resp = co_await mc::rpc::call(cli->hangRequest().send(), std::chrono::milliseconds(50));
      auto waited = std::chrono::steady_clock::now() - t0;
      if (resp || !mc::is(resp.error(), errc::timeout)) co_return mc::fail(errc::internal_error);
      if (waited < std::chrono::milliseconds(45) || waited > std::chrono::seconds(2))
        co_return mc::fail(errc::out_of_range);
      // Proof of cancellation on the server: the same connection (so the same
      // serving thread) reports the cancelled hang() coroutine.
      auto w = cli->waitCancelledRequest();
      w.setAtLeast(1);
      auto wr = co_await mc::rpc::call(w.send(), std::chrono::seconds(5));
      if (!wr) co_return wr.error();
      co_return wr->getCancelled();
    };
    auto r = f.rt.block_on(run(f.endpoint()), 2);
    REQUIRE_MESSAGE(r, (r ? std::string() : r.error().message()));
    CHECK(*r >= 1);
    CHECK(counters().cancelled.load() >= before + 1);
  }

  TEST_CASE("cancelling the awaiting coroutine cancels the remote call") {
    rpc_fixture f;
    auto run = [](std::string ep) -> task<mc::result<std::uint64_t>> {
      auto cli = co_await mc::rpc::connect<TestService>(ep, "test");
      if (!cli) co_return cli.error();
      // with_deadline cancels the loser: here the call (whose own timeout is 10 s).
      auto outer = co_await mc::with_deadline(
          [](TestService::Client c) -> task<mc::result<void>> {
            auto resp = co_await mc::rpc::call(c.hangRequest().send());
            if (!resp) co_return resp.error();
            co_return mc::result<void>{};
          }(*cli),
          std::chrono::milliseconds(30));
      if (outer || !mc::is(outer.error(), errc::timeout)) co_return mc::fail(errc::internal_error);
      auto w = cli->waitCancelledRequest();
      w.setAtLeast(1);
      auto wr = co_await mc::rpc::call(w.send(), std::chrono::seconds(5));
      if (!wr) co_return wr.error();
      co_return wr->getCancelled();
    };
    auto r = f.rt.block_on(run(f.endpoint()), 3);
    REQUIRE_MESSAGE(r, (r ? std::string() : r.error().message()));
    CHECK(*r >= 1);
  }

  TEST_CASE("thousands of concurrent calls from two client threads are all answered") {
    rpc_fixture f;
    constexpr int per_thread = 2000;
    auto run = [](std::string ep, int n, std::uint64_t seed) -> task<mc::result<int>> {
      std::vector<task<mc::result<std::uint64_t>>> calls;
      for (int i = 0; i < n; ++i) calls.push_back(echo_once(ep, 1 + (i * 37) % 3000, seed + i));
      auto results = co_await mc::when_all(std::move(calls));
      int ok = 0;
      mc::result<int> first_error = 0;
      for (auto& r : results) {
        if (r)
          ++ok;
        else if (first_error)
          first_error = r.error();
      }
      if (!first_error) co_return first_error;  // report why a call failed
      co_return ok;
    };
    std::atomic<int> ok_total{0};
    mc::result<int> r_other = 0;
    std::thread other([&] {
      r_other = f.rt.block_on(run(f.endpoint(), per_thread, 1000000), 3);
      if (r_other) ok_total += *r_other;
    });
    auto r = f.rt.block_on(run(f.endpoint(), per_thread, 1), 2);
    other.join();
    CHECK_MESSAGE(r_other.has_value(), (r_other ? std::string() : r_other.error().message()));
    REQUIRE_MESSAGE(r.has_value(), (r ? std::string() : r.error().message()));
    ok_total += *r;
    CHECK(ok_total.load() == 2 * per_thread);
    // Two client threads -> two connections -> spread over both server threads.
    CHECK(f.srv->stats().accepted == 2);
  }

}  // TEST_SUITE
