// etcd watches (etcd_client::watch_once, master_client::follow_leader)
// against a real etcd (Debian's etcd-server, started here on tmpfs-free
// scratch space and ports below the ephemeral range picked by the kernel),
// and against a fake gateway that streams hostile or oddly split replies.
#include "mc/master/etcd.hpp"
#include "mc/master/ha.hpp"
#include "mc/master/master_client.hpp"
#include "mc/runtime/deadline.hpp"
#include "test_support.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <cstdio>
#include <fcntl.h>
#include <future>
#include <optional>
#include <spawn.h>
#include <string>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern char** environ;

using namespace std::chrono_literals;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using mc::master::etcd_client;
using mc::master::etcd_event;

namespace {

/// A port nothing listens on right now (the kernel's pick, released).
std::uint16_t free_port() {
  asio::io_context io;
  tcp::acceptor a(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  return a.local_endpoint().port();
}

/// One etcd member for the duration of a test: its own data directory and
/// ports; killed and reaped (and its directory removed) by the destructor.
struct etcd_member {
  pid_t pid = -1;
  std::string dir;
  std::uint16_t port = 0;
  etcd_member() {
    // etcd fsyncs every write: its data on tmpfs when there is one.
    char tmpl[] = "/dev/shm/mc-etcd-watch-XXXXXX";
    char disk[] = "/tmp/mc-etcd-watch-XXXXXX";
    const char* made = ::access("/dev/shm", W_OK) == 0 ? ::mkdtemp(tmpl) : ::mkdtemp(disk);
    REQUIRE(made != nullptr);
    dir = made;
    port = free_port();
    auto peer = free_port();
    std::string client = "http://127.0.0.1:" + std::to_string(port);
    std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
    std::vector<std::string> args = {"etcd",
                                     "--name",
                                     "w0",
                                     "--data-dir",
                                     dir + "/data",
                                     "--listen-client-urls",
                                     client,
                                     "--advertise-client-urls",
                                     client,
                                     "--listen-peer-urls",
                                     peer_url,
                                     "--initial-advertise-peer-urls",
                                     peer_url,
                                     "--initial-cluster",
                                     "w0=" + peer_url,
                                     "--heartbeat-interval",
                                     "50",
                                     "--election-timeout",
                                     "250"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    int rc = ::posix_spawnp(&pid, "etcd", &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    REQUIRE_MESSAGE(rc == 0, "cannot start etcd (scripts/install-deps.sh installs etcd-server)");
    // Ready when a put answers (up to 15 s on a loaded machine).
    mc::runtime::runtime rt{1};
    rt.start();
    bool ready = false;
    for (int i = 0; i < 150 && !ready; ++i) {
      etcd_client c({endpoint()}, 500ms);
      ready = rt.block_on(c.put("ready", "1", 0)).has_value();
      if (!ready) std::this_thread::sleep_for(100ms);
    }
    rt.stop();
    REQUIRE_MESSAGE(ready, "etcd did not start");
  }
  ~etcd_member() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      int st = 0;
      ::waitpid(pid, &st, 0);
    }
    mc::test::remove_tree(dir);
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port); }
};

struct rt_fixture {
  mc::runtime::runtime rt{2};
  rt_fixture() { rt.start(); }
  ~rt_fixture() { rt.stop(); }
};

/// The outcome of one watch_once, flattened for checks.
struct watched {
  std::optional<boost::system::error_code> error;
  std::optional<etcd_event> event;  ///< empty with no error: the wait passed
};
mc::task<watched> watch(etcd_client& c, std::string key, std::int64_t from, mc::duration wait) {
  auto r = co_await c.watch_once(std::move(key), from, wait);
  watched w;
  if (!r)
    w.error = r.error();
  else
    w.event = *r;
  co_return w;
}

/// A fake etcd gateway: accepts one connection, reads the request, writes
/// each of `parts` as it is (a pause between them, so that they arrive in
/// separate reads), then keeps the connection open until the peer closes it.
mc::task<void> fake_gateway(tcp::acceptor& a, std::vector<std::string> parts) {
  auto [aec, s] = co_await a.async_accept(asio::as_tuple(asio::use_awaitable));
  if (aec) co_return;
  char req[4096];
  auto [rec, n] = co_await s.async_read_some(asio::buffer(req), asio::as_tuple(asio::use_awaitable));
  (void)n;
  if (rec) co_return;
  asio::steady_timer t(s.get_executor());
  for (auto& p : parts) {
    auto [wec, wn] = co_await asio::async_write(s, asio::buffer(p), asio::as_tuple(asio::use_awaitable));
    (void)wn;
    if (wec) co_return;
    t.expires_after(20ms);
    (void)co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  for (;;) {  // until the watch closes its end
    auto [ec, got] = co_await s.async_read_some(asio::buffer(req), asio::as_tuple(asio::use_awaitable));
    (void)got;
    if (ec) co_return;
  }
}

std::string chunk(const std::string& data) {
  char len[32];
  std::snprintf(len, sizeof len, "%zx\r\n", data.size());
  return len + data + "\r\n";
}

const std::string ok_head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
const std::string created = R"({"result":{"header":{"revision":"5"},"created":true}})"
                            "\n";

std::string put_line(const std::string& key, const std::string& value, int rev) {
  return R"({"result":{"header":{"revision":")" + std::to_string(rev) + R"("},"events":[{"kv":{"key":")" +
         mc::master::etcd_base64(key) + R"(","create_revision":")" + std::to_string(rev) + R"(","mod_revision":")" +
         std::to_string(rev) + R"(","value":")" + mc::master::etcd_base64(value) + R"("}}]}})" + "\n";
}

/// Runs one watch against a fake gateway streaming `parts`.
watched against_fake(mc::runtime::runtime& rt, std::vector<std::string> parts, mc::duration wait = 3s) {
  tcp::acceptor a(rt.executor(0), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  auto ep = "127.0.0.1:" + std::to_string(a.local_endpoint().port());
  std::promise<void> served;
  asio::co_spawn(rt.executor(0), fake_gateway(a, std::move(parts)),
                 [&served](std::exception_ptr) { served.set_value(); });
  etcd_client c({ep}, 1s);
  auto w = rt.block_on(watch(c, "k", 1, wait));
  rt.block_on([](tcp::acceptor& acc) -> mc::task<void> {
    boost::system::error_code ec;
    acc.close(ec);
    co_return;
  }(a));
  served.get_future().wait();  // returns once the watch closed its connection
  return w;
}

}  // namespace

TEST_SUITE("etcd watch") {
  TEST_CASE("watch_once against etcd: history from the start revision, live changes, quiet windows, compaction") {
    etcd_member e;
    rt_fixture f;
    etcd_client c({e.endpoint()}, 1s);
    const std::string key = "mooncake-store/t/master_view";
    auto r1 = f.rt.block_on(c.put(key, "127.0.0.1:1000", 0));
    REQUIRE(r1.has_value());
    // Nothing after r1 yet: the window passes with no event and no error.
    auto quiet = f.rt.block_on(watch(c, key, *r1 + 1, 300ms));
    CHECK_FALSE(quiet.error.has_value());
    CHECK_FALSE(quiet.event.has_value());
    // A change made before the watch but after its start revision is reported.
    auto r2 = f.rt.block_on(c.put(key, "127.0.0.1:2000", 0));
    REQUIRE(r2.has_value());
    auto past = f.rt.block_on(watch(c, key, *r1 + 1, 5s));
    REQUIRE_FALSE(past.error.has_value());
    REQUIRE(past.event.has_value());
    CHECK_FALSE(past.event->deleted);
    CHECK(past.event->kv.value == "127.0.0.1:2000");
    CHECK(past.event->kv.mod_revision == *r2);
    // Changes of other keys are not reported; a live delete is.
    std::promise<void> deleted;
    asio::co_spawn(
        f.rt.executor(1),
        [](etcd_client& cl, std::string k) -> mc::task<void> {
          (void)co_await mc::sleep_for(200ms);
          (void)co_await cl.put("mooncake-store/t/other", "x", 0);
          (void)co_await cl.del(k);
        }(c, key),
        [&deleted](std::exception_ptr) { deleted.set_value(); });
    auto live = f.rt.block_on(watch(c, key, *r2 + 1, 5s));
    deleted.get_future().wait();
    REQUIRE_FALSE(live.error.has_value());
    REQUIRE(live.event.has_value());
    CHECK(live.event->deleted);
    CHECK(live.event->kv.key == key);
    CHECK(live.event->kv.mod_revision > *r2 + 1);  // after the other key's put
    // A start revision compacted away: rpc_fail (the caller reads the key again).
    auto compacted = f.rt.block_on(c.call("/v3/kv/compaction", R"({"revision":")" + std::to_string(*r2) + R"("})"));
    REQUIRE(compacted.has_value());
    auto old = f.rt.block_on(watch(c, key, *r1, 2s));
    REQUIRE(old.error.has_value());
    CHECK(mc::is(*old.error, mc::errc::rpc_fail));
    auto bad = f.rt.block_on(watch(c, key, 0, 1s));
    REQUIRE(bad.error.has_value());
    CHECK(mc::is(*bad.error, mc::errc::invalid_params));
  }

  TEST_CASE("a dead endpoint first: the watch is created on the next; a caller's deadline cancels the wait") {
    etcd_member e;
    rt_fixture f;
    etcd_client c({"127.0.0.1:" + std::to_string(free_port()), e.endpoint()}, 1s);
    const std::string key = "mooncake-store/t/master_view";
    std::int64_t rev = 0;
    auto now = f.rt.block_on(c.get(key, &rev));
    REQUIRE(now.has_value());
    CHECK_FALSE(now->has_value());
    CHECK(rev > 0);
    std::promise<void> put;
    asio::co_spawn(
        f.rt.executor(1),
        [](etcd_client& cl, std::string k) -> mc::task<void> {
          (void)co_await mc::sleep_for(200ms);
          (void)co_await cl.put(k, "127.0.0.1:3000", 0);
        }(c, key),
        [&put](std::exception_ptr) { put.set_value(); });
    auto w = f.rt.block_on(watch(c, key, rev + 1, 5s));
    put.get_future().wait();
    REQUIRE_FALSE(w.error.has_value());
    REQUIRE(w.event.has_value());
    CHECK(w.event->kv.value == "127.0.0.1:3000");
    // An outer deadline shorter than the wait: the watch unwinds (timeout
    // from with_deadline, no exception, no hang).
    auto cut = f.rt.block_on(mc::with_deadline(c.watch_once(key, w.event->kv.mod_revision + 1, 30s), 300ms));
    REQUIRE_FALSE(cut.has_value());
    CHECK(mc::is(cut.error(), mc::errc::timeout));
  }

  TEST_CASE("follow_leader tracks elections: new terms wake the caller, deletes clear the leader") {
    etcd_member e;
    rt_fixture f;
    const std::string cluster = "t";
    const auto key = mc::master::ha_leader_key(cluster);
    mc::master::master_client m("etcd://" + e.endpoint(), 1s, cluster);
    etcd_client c({e.endpoint()}, 1s);
    std::atomic<int> woken{0};
    asio::cancellation_signal stop;
    std::promise<void> ended;
    asio::co_spawn(f.rt.executor(0), m.follow_leader([&woken] { woken.fetch_add(1); }, 500ms),
                   asio::bind_cancellation_slot(stop.slot(), [&ended](std::exception_ptr) { ended.set_value(); }));
    auto wait_for = [&](auto pred) {
      for (int i = 0; i < 100 && !pred(); ++i) std::this_thread::sleep_for(50ms);
      return pred();
    };
    // Each election is a create of the key under a lease: here a plain put
    // after a delete, which gives it a new create_revision (a new term).
    REQUIRE(f.rt.block_on(c.put(key, "127.0.0.1:4001", 0)).has_value());
    CHECK(wait_for([&] { return m.current_master() == "127.0.0.1:4001" && woken.load() == 1; }));
    REQUIRE(f.rt.block_on(c.del(key)).has_value());
    CHECK(wait_for([&] { return m.current_master().empty(); }));
    REQUIRE(f.rt.block_on(c.put(key, "127.0.0.1:4002", 0)).has_value());
    CHECK(wait_for([&] { return m.current_master() == "127.0.0.1:4002" && woken.load() == 2; }));
    // A value that is no master address is ignored (the last one stays).
    REQUIRE(f.rt.block_on(c.del(key)).has_value());
    REQUIRE(f.rt.block_on(c.put(key, "not an address", 0)).has_value());
    std::this_thread::sleep_for(700ms);  // longer than a window: renewed watches too
    CHECK(woken.load() == 2);
    CHECK(m.current_master().empty());
    CHECK(m.leader_watch_failures() == 0);
    asio::post(f.rt.executor(0), [&stop] { stop.emit(asio::cancellation_type::terminal); });
    CHECK(ended.get_future().wait_for(5s) == std::future_status::ready);
  }

  TEST_CASE("hostile or oddly split gateway streams: parsed across chunks, refused when malformed, bounded") {
    rt_fixture f;
    SUBCASE("created and an event split mid-line over many chunks") {
      auto ev = put_line("k", "10.1.2.3:50051", 9);
      std::vector<std::string> parts{ok_head + chunk(created.substr(0, 10)), chunk(created.substr(10))};
      for (std::size_t i = 0; i < ev.size(); i += 7) parts.push_back(chunk(ev.substr(i, 7)));
      auto w = against_fake(f.rt, parts);
      REQUIRE_FALSE(w.error.has_value());
      REQUIRE(w.event.has_value());
      CHECK(w.event->kv.value == "10.1.2.3:50051");
      CHECK(w.event->kv.mod_revision == 9);
    }
    SUBCASE("progress notifications are skipped; a quiet stream ends with the wait") {
      auto w = against_fake(f.rt, {ok_head + chunk(created), chunk("\n\r\n" + std::string(R"({"result":{}})") + "\n")},
                            500ms);
      CHECK_FALSE(w.error.has_value());
      CHECK_FALSE(w.event.has_value());
    }
    auto refused = [&](std::vector<std::string> parts) {
      auto w = against_fake(f.rt, std::move(parts));
      REQUIRE(w.error.has_value());
      CHECK(mc::is(*w.error, mc::errc::rpc_fail));
    };
    SUBCASE("HTTP 500") { refused({"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\n\r\n{}"}); }
    SUBCASE("an error line instead of created") {
      refused({ok_head + chunk(R"({"error":{"grpc_code":14,"message":"unavailable"}})"
                               "\n")});
    }
    SUBCASE("events before created") { refused({ok_head + chunk(put_line("k", "10.1.2.3:1", 9))}); }
    SUBCASE("canceled after created (compacted)") {
      refused({ok_head + chunk(created), chunk(R"({"result":{"canceled":true,"compact_revision":"7"}})"
                                               "\n")});
    }
    SUBCASE("an event on another key") {
      refused({ok_head + chunk(created), chunk(put_line("other", "1.2.3.4:5", 9))});
    }
    SUBCASE("an event of an unknown type") {
      refused({ok_head + chunk(created),
               chunk(R"({"result":{"events":[{"type":"MOVE","kv":{"key":"aw==","mod_revision":"9"}}]}})"
                     "\n")});
    }
    SUBCASE("the stream ends") { refused({ok_head + chunk(created) + "0\r\n\r\n"}); }
    SUBCASE("a line longer than etcd_max_reply") {
      std::vector<std::string> parts{ok_head + chunk(created)};
      std::string junk(1u << 20, 'x');
      for (std::size_t sent = 0; sent <= mc::master::etcd_max_reply; sent += junk.size()) parts.push_back(chunk(junk));
      refused(std::move(parts));
    }
  }
}
