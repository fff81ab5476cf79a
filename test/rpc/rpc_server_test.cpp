#include "raw_socket.hpp"
#include "echo_call.hpp"
#include "rpc_fixture.hpp"
#include "test_support.hpp"

#include <future>
#include <mutex>
#include <thread>
#include <vector>

using namespace mc::rpc::test;
using mc::errc;
using mc::task;

namespace {

/// Sends sleep(ms), then an echo on the same connection: when the echo is
/// answered the sleep call is being served (calls are delivered in order).
/// Signals `started`, then awaits the sleep result.
task<mc::result<int>> sleep_call(std::string ep, std::uint32_t ms, std::promise<void>* started) {
  auto cli = co_await mc::rpc::connect<TestService>(ep, "test");
  if (!cli) co_return cli.error();
  auto req = cli->sleepRequest();
  req.setMs(ms);
  auto pending = req.send();
  auto e = cli->echoRequest();
  auto er = co_await mc::rpc::call(e.send());
  started->set_value();
  if (!er) co_return er.error();
  auto resp = co_await mc::rpc::call(kj::mv(pending));
  if (!resp) co_return resp.error();
  co_return resp->getDone() ? 1 : 0;
}

task<mc::result<void>> hang_call(std::string ep, std::promise<void>* started) {
  auto cli = co_await mc::rpc::connect<TestService>(ep, "test");
  if (!cli) co_return cli.error();
  auto pending = cli->hangRequest().send();
  auto er = co_await mc::rpc::call(cli->echoRequest().send());
  started->set_value();
  if (!er) co_return er.error();
  auto resp = co_await mc::rpc::call(kj::mv(pending));
  if (!resp) co_return resp.error();
  co_return mc::result<void>{};
}

}  // namespace

TEST_SUITE("rpc_server") {
  TEST_CASE("start reports a clear error for a port in use, a bad host and bad options") {
    rpc_fixture f;
    auto o = local_options();
    o.port = f.srv->port();
    mc::rpc::server second(f.rt, o);
    auto r = second.start();
    REQUIRE_FALSE(r);
    CHECK(mc::is(r.error(), errc::rpc_fail));
    CHECK(second.message().find("in use") != std::string::npos);

    auto bad = local_options();
    bad.host = "not-an-address";
    mc::rpc::server third(f.rt, bad);
    auto r3 = third.start();
    REQUIRE_FALSE(r3);
    CHECK(mc::is(r3.error(), errc::invalid_params));
    CHECK(third.message().find("not-an-address") != std::string::npos);

    auto many = local_options();
    many.threads = 99;
    mc::rpc::server fourth(f.rt, many);
    auto r4 = fourth.start();
    REQUIRE_FALSE(r4);
    CHECK(mc::is(r4.error(), errc::invalid_params));
  }

  TEST_CASE("stop lets an in-flight call finish within the drain timeout") {
    rpc_fixture f;
    std::promise<void> started;
    auto fut = started.get_future();
    std::promise<mc::result<int>> done;
    auto done_fut = done.get_future();
    std::thread client([&] { done.set_value(f.rt.block_on(sleep_call(f.endpoint(), 200, &started), 2)); });
    REQUIRE(fut.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
    auto t0 = std::chrono::steady_clock::now();
    f.srv->stop();
    auto took = std::chrono::steady_clock::now() - t0;
    client.join();
    auto r = done_fut.get();
    REQUIRE_MESSAGE(r, (r ? std::string() : r.error().message()));
    CHECK(*r == 1);
    CHECK(took >= std::chrono::milliseconds(100));  // it waited for the call
    CHECK(took < std::chrono::seconds(4));
    CHECK(f.srv->stats().connections == 0);
  }

  TEST_CASE("stop cancels calls still running at the drain timeout and closes their connections") {
    auto o = local_options();
    o.drain_timeout = std::chrono::milliseconds(100);
    rpc_fixture f(o);
    auto cancelled_before = counters().cancelled.load();
    std::promise<void> started;
    auto fut = started.get_future();
    std::promise<mc::result<void>> done;
    auto done_fut = done.get_future();
    std::thread client([&] { done.set_value(f.rt.block_on(hang_call(f.endpoint(), &started), 2)); });
    REQUIRE(fut.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
    auto t0 = std::chrono::steady_clock::now();
    f.srv->stop();
    auto took = std::chrono::steady_clock::now() - t0;
    client.join();
    auto r = done_fut.get();
    REQUIRE_FALSE(r);
    CHECK(mc::is(r.error(), errc::rpc_fail));
    CHECK(took >= std::chrono::milliseconds(90));
    CHECK(took < std::chrono::seconds(3));
    CHECK(counters().cancelled.load() == cancelled_before + 1);  // stop() waited for the unwind
  }

  TEST_CASE("a client reconnects after the server restarts on the same port") {
    rpc_fixture f;
    REQUIRE(f.rt.block_on(echo(f.endpoint(), 100), 2));
    auto ep = f.endpoint();
    auto port = f.srv->port();
    f.srv->stop();
    auto o = local_options();
    o.port = port;
    f.srv = std::make_unique<mc::rpc::server>(f.rt, o);
    add_test_services(*f.srv);
    REQUIRE(f.srv->start());
    auto r = f.rt.block_on(
        [](std::string ep) -> task<mc::result<void>> {
          mc::result<void> last = mc::fail(errc::internal_error);
          for (int i = 0; i < 3; ++i) {  // the first may see the old connection break
            last = co_await echo(ep, 1000);
            if (last) break;
            if (!mc::is(last.error(), errc::rpc_fail)) break;
          }
          co_return last;
        }(ep),
        2);
    CHECK(r);
    auto st = f.rt.block_on([]() -> task<mc::rpc::client_stats> { co_return mc::rpc::thread_client_stats(); }(), 2);
    CHECK(st.opened == 2);
  }

  TEST_CASE("garbage, truncated and oversize frames drop only the offending connection") {
    auto o = local_options();
    o.max_message_bytes = 1 << 20;
    rpc_fixture f(o);
    REQUIRE(f.rt.block_on(echo(f.endpoint(), 1000), 2));  // a well-behaved client, kept throughout
    auto rss0 = rss_bytes();

    SUBCASE("garbage") {
      int fd = raw_connect(f.srv->port());
      REQUIRE(fd >= 0);
      auto junk = mc::test::random_bytes(4096, 99);
      raw_send(fd, junk.data(), junk.size());
      CHECK(raw_wait_closed(fd, std::chrono::seconds(5)));
      ::close(fd);
    }
    SUBCASE("truncated frame then EOF") {
      int fd = raw_connect(f.srv->port());
      REQUIRE(fd >= 0);
      auto h = frame_header(1, 100);
      raw_send(fd, h.data(), h.size());
      auto body = mc::test::random_bytes(50, 3);
      raw_send(fd, body.data(), body.size());
      ::shutdown(fd, SHUT_WR);
      CHECK(raw_wait_closed(fd, std::chrono::seconds(5)));
      ::close(fd);
    }
    SUBCASE("header announcing a 2 GiB message") {
      int fd = raw_connect(f.srv->port());
      REQUIRE(fd >= 0);
      auto h = frame_header(1, 0x10000000u);
      raw_send(fd, h.data(), h.size());
      CHECK(raw_wait_closed(fd, std::chrono::seconds(5)));
      ::close(fd);
    }
    SUBCASE("header announcing too many segments") {
      int fd = raw_connect(f.srv->port());
      REQUIRE(fd >= 0);
      auto h = frame_header(100000, 1);
      raw_send(fd, h.data(), h.size());
      CHECK(raw_wait_closed(fd, std::chrono::seconds(5)));
      ::close(fd);
    }
    SUBCASE("a real call bigger than max_message_bytes") {
      auto r = f.rt.block_on(echo(f.endpoint(), 2 << 20), 3);  // other thread: own connection
      REQUIRE_FALSE(r);
      CHECK(mc::is(r.error(), errc::rpc_fail));
    }
    CHECK(rss_bytes() < rss0 + (64u << 20));            // nothing allocated the announced sizes
    CHECK(f.rt.block_on(echo(f.endpoint(), 5000), 2));  // the good client is still served
  }

  TEST_CASE("a client that connects and never speaks is closed after the idle timeout") {
    auto o = local_options();
    o.idle_timeout = std::chrono::milliseconds(150);
    rpc_fixture f(o);
    int fd = raw_connect(f.srv->port());
    REQUIRE(fd >= 0);
    auto t0 = std::chrono::steady_clock::now();
    CHECK(raw_wait_closed(fd, std::chrono::seconds(5)));
    CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(140));
    ::close(fd);
    // The server counts the close on its own thread, after the socket closed:
    // wait for the count rather than race it.
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (f.srv->stats().idle_closed < 1 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK(f.srv->stats().idle_closed >= 1);
    CHECK(f.rt.block_on(echo(f.endpoint(), 10), 2));  // a talking client is served
  }

  TEST_CASE("a connection flood is capped at max_connections and other clients keep being served") {
    auto o = local_options();
    o.max_connections = 32;
    rpc_fixture f(o);
    REQUIRE(f.rt.block_on(echo(f.endpoint(), 100), 2));  // established before the flood
    std::vector<int> flood;
    for (int i = 0; i < 300; ++i) {
      int fd = raw_connect(f.srv->port());
      if (fd >= 0) flood.push_back(fd);
    }
    REQUIRE(flood.size() == 300);
    // Everything beyond the cap is closed by the server (the accept loop may lag
    // behind the kernel's backlog, so wait for the closes as events).
    auto closed = raw_count_closed(flood, flood.size() - 31, std::chrono::seconds(10));
    CHECK(closed >= flood.size() - 31);
    CHECK(f.rt.block_on(echo(f.endpoint(), 100), 2));  // still served during the flood
    auto st = f.srv->stats();
    CHECK(st.connections <= 32);
    CHECK(st.refused >= flood.size() - 31);
    for (int fd : flood) ::close(fd);
    // Connections close as the server notices; a new client gets in eventually.
    auto r = f.rt.block_on(
        [](std::string ep) -> task<mc::result<void>> {
          mc::result<void> last = mc::fail(errc::internal_error);
          for (int i = 0; i < 50; ++i) {
            last = co_await echo(ep, 10);
            if (last) break;
            co_await mc::sleep_for(std::chrono::milliseconds(20));
          }
          co_return last;
        }(f.endpoint()),
        3);
    CHECK(r);
  }

}  // TEST_SUITE

TEST_CASE("a per-connection service factory runs once per connection with the kernel's view of the peer") {
  mc::runtime::runtime rt(4);
  rt.start();
  struct seen {
    std::mutex mu;
    std::vector<mc::rpc::connection_info> conns;
  };
  auto s = std::make_shared<seen>();
  {
    mc::rpc::server srv(rt, local_options());
    srv.add_service("test", mc::rpc::service_factory::per_connection(
                                [s](mc::executor ex, const mc::rpc::connection_info& c) -> capnp::Capability::Client {
                                  std::lock_guard lk(s->mu);
                                  s->conns.push_back(c);
                                  return kj::heap<test_service_impl>(std::move(ex));
                                }));
    REQUIRE(srv.start());
    auto ep = "127.0.0.1:" + std::to_string(srv.port());
    // Two calls on thread 2 share its cached connection; thread 3 has its own.
    CHECK(rt.block_on(echo(ep, 100), 2).has_value());
    CHECK(rt.block_on(echo(ep, 100), 2).has_value());
    CHECK(rt.block_on(echo(ep, 100), 3).has_value());
    srv.stop();
  }
  mc::rpc::shutdown(rt);
  rt.stop();
  std::lock_guard lk(s->mu);
  REQUIRE(s->conns.size() == 2);
  for (auto& c : s->conns) {
    CHECK(c.remote_address == "127.0.0.1");
    CHECK(c.remote_port != 0);
  }
  CHECK(s->conns[0].remote_port != s->conns[1].remote_port);
}
