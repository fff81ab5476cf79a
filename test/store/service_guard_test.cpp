// The owner decides where a transfer goes and how much a requester may make
// it do: foreign endpoints are refused, server-side caps answer OVERLOADED.
#include "mc/master/master_client.hpp"
#include "mc/store/client_service.hpp"
#include "mc/store/data_manager.hpp"
#include "mc/store/peer_client.hpp"
#include "mc/tiered/tiered_backend.hpp"
#include "store_fixture.hpp"
#include "store_parts.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

using namespace std::chrono_literals;
using mc::test::bytes_of;
using mc::test::random_bytes;
using mc::test::writable;

namespace {
// Buffers registered here are filled by the owner's runtime thread (the
// in-process transport) and read by this thread with only a socket (the RPC
// reply) ordering the two, which ThreadSanitizer cannot see: compare through
// the uninstrumented checksum().
bool same_bytes(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  return a.size() == b.size() && mc::test::checksum(a.data(), a.size()) == mc::test::checksum(b.data(), b.size());
}
bool all_zero(const std::vector<std::uint8_t>& a) { return same_bytes(a, std::vector<std::uint8_t>(a.size(), 0)); }
}  // namespace

namespace {

/// A listening TCP socket the test owns; connections() counts what arrived.
struct foreign_listener {
  int fd = -1;
  std::uint16_t port = 0;
  foreign_listener(const char* ip, std::uint16_t want_port) {
    auto l = mc::test::listen_tcp(ip, want_port, 16, SOCK_NONBLOCK);
    fd = l.fd;
    port = l.port;
  }
  /// Connections the kernel completed so far (the handshake needs no accept()).
  int connections() {
    int n = 0;
    for (int c; (c = ::accept(fd, nullptr, nullptr)) >= 0; ++n) ::close(c);
    return n;
  }
  ~foreign_listener() { ::close(fd); }
};

std::uint16_t port_of(const std::string& endpoint) {
  return static_cast<std::uint16_t>(std::stoi(endpoint.substr(endpoint.rfind(':') + 1)));
}

}  // namespace

TEST_SUITE("client service guard") {
  TEST_CASE(
      "a requester naming a foreign transfer endpoint is refused and nothing connects there; a CLI-style "
      "requester is served at its own IP") {
    mc::test::cluster c;
    auto& a = c.add("A");
    auto& b = c.add("B");
    auto v = random_bytes(40001, 11);
    REQUIRE(c.on(0, a.put("k", bytes_of(v))));

    std::vector<std::uint8_t> buf(v.size(), 0);
    auto reg = b.register_buffer(std::as_writable_bytes(std::span(buf)));
    REQUIRE(reg.has_value());
    foreign_listener foreign("127.0.0.1", 0);
    auto desc = reg->describe();
    auto forged = desc;
    forged.endpoint = "127.0.0.1:" + std::to_string(foreign.port);

    // A registered requester (id "B") may only name its registered endpoint.
    mc::store::peer_client named(3s);
    named.set_requester_id("B");
    auto r1 = c.on(1, named.read_remote(a.rpc_endpoint(), "k", forged));
    CHECK(mc::is(r1.value.error(), mc::errc::access_denied));
    auto w1 = c.on(1, named.write_remote(a.rpc_endpoint(), "k2", forged));
    CHECK(mc::is(w1.error(), mc::errc::access_denied));
    CHECK_FALSE(a.data().exists("k2"));
    // An id the master does not know is refused too.
    mc::store::peer_client ghost(3s);
    ghost.set_requester_id("ghost");
    auto r2 = c.on(1, ghost.read_remote(a.rpc_endpoint(), "k", desc));
    CHECK(mc::is(r2.value.error(), mc::errc::access_denied));
    CHECK(foreign.connections() == 0);
    CHECK(all_zero(buf));  // nothing arrived
    // Each refused item is counted (mc_store_refused_total{reason="access_denied"}).
    CHECK(a.stats().service_access_denied == 3);
    CHECK(a.stats().service_overloaded == 0);

    // The master knows B's transfer endpoint and engine instance.
    mc::master::master_client m(c.master_address(), 3s);
    auto info = c.on(1, m.get_client("B"));
    REQUIRE(info.has_value());
    CHECK(info->transfer_endpoint == b.transfer_endpoint());
    CHECK(info->transfer_instance == b.engine().instance_id());
    CHECK(info->transfer_instance != 0);
    CHECK(mc::is(c.on(1, m.get_client("ghost")).error(), mc::errc::client_not_found));

    // The honest named request works.
    auto ok = c.on(1, named.read_remote(a.rpc_endpoint(), "k", desc));
    REQUIRE(ok.value.has_value());
    CHECK(same_bytes(buf, v));

    // CLI-style (no id): the descriptor's host is ignored; the owner uses the
    // RPC connection's IP (127.0.0.1) with the descriptor's port. A listener on
    // 127.0.0.2 at that port never sees a connection.
    // (A fresh buffer: refilling `buf` here would race, in ThreadSanitizer's
    // view, with the owner thread's earlier copy into it.)
    std::vector<std::uint8_t> buf2(v.size(), 0);
    auto reg2 = b.register_buffer(std::as_writable_bytes(std::span(buf2)));
    REQUIRE(reg2.has_value());
    auto desc2 = reg2->describe();
    foreign_listener other_host("127.0.0.2", port_of(desc2.endpoint));
    auto cli_desc = desc2;
    cli_desc.endpoint = "127.0.0.2:" + std::to_string(other_host.port);
    mc::store::peer_client cli(3s);
    auto r3 = c.on(1, cli.read_remote(a.rpc_endpoint(), "k", cli_desc));
    REQUIRE(r3.value.has_value());
    CHECK(same_bytes(buf2, v));
    CHECK(other_host.connections() == 0);
  }

  TEST_CASE("a remote write above max_remote_write_bytes is refused with OVERLOADED and evicts nothing") {
    mc::test::cluster c;
    auto& a = c.add("A", R"({"tiers":[{"type":"DRAM","capacity":"1MiB","priority":100}]})", "auto",
                    [](mc::store::client_options& o) { o.limits.max_remote_write_bytes = 64 << 10; });
    auto& b = c.add("B");
    std::vector<std::vector<std::uint8_t>> values;
    for (int i = 0; i < 12; ++i) {
      values.push_back(random_bytes(60000 + 7 * i, 100 + i));
      REQUIRE(c.on(0, a.put(mc::test::numbered("v", i), bytes_of(values.back()))));
    }
    auto big = random_bytes(300001, 9);
    mc::store::put_options po;
    po.where = mc::store::placement::remote;
    po.target = a.rpc_endpoint();
    auto r = c.on(1, b.put("big", bytes_of(big), po));
    REQUIRE(r.has_error());
    CHECK(mc::is(r.error(), mc::errc::overloaded));
    CHECK_FALSE(a.data().exists("big"));
    CHECK(a.stats().service_overloaded >= 1);  // mc_store_refused_total{reason="overloaded"}
    CHECK(a.stats().service_access_denied == 0);
    CHECK(a.backend().usage().at(0).evictions == 0);
    for (int i = 0; i < 12; ++i) {
      std::vector<std::uint8_t> back(values[i].size());
      auto g = c.on(0, a.get(mc::test::numbered("v", i), writable(back)));
      REQUIRE(g.has_value());
      CHECK(back == values[i]);
    }
    // Below the cap, a remote write still works.
    auto small = random_bytes(65000, 10);
    REQUIRE(c.on(1, b.put("small", bytes_of(small), po)));
    CHECK(a.data().exists("small"));
  }

  TEST_CASE(
      "keys and bytes in flight per connection and per peer are capped: the excess items of a batch "
      "fail with OVERLOADED, the rest succeed, and the counts are released afterwards") {
    mc::test::cluster c;
    auto& a = c.add("A", {}, "auto", [](mc::store::client_options& o) {
      o.limits.max_inflight_keys_per_connection = 3;
      o.limits.max_inflight_bytes_per_peer = 10000;
    });
    auto& b = c.add("B");
    std::vector<std::vector<std::uint8_t>> vals;
    for (int i = 0; i < 4; ++i) {
      vals.push_back(random_bytes(1001, 20 + i));
      REQUIRE(c.on(0, a.put(mc::test::numbered("s", i), bytes_of(vals.back()))));
    }
    auto big = random_bytes(6007, 30);
    REQUIRE(c.on(0, a.put("b0", bytes_of(big))));
    REQUIRE(c.on(0, a.put("b1", bytes_of(big))));

    mc::store::peer_client pc(5s);
    pc.set_requester_id(b.id());
    std::vector<std::vector<std::uint8_t>> bufs(6);
    std::vector<mc::transfer::region> regs;
    auto run = [&](std::vector<std::string> keys, std::vector<std::size_t> sizes) {
      std::vector<mc::store::peer_item> items;
      for (std::size_t i = 0; i < keys.size(); ++i) {
        bufs[i].assign(sizes[i], 0);
        regs.push_back(*b.register_buffer(std::as_writable_bytes(std::span(bufs[i]))));
        items.push_back({keys[i], regs.back().describe()});
      }
      auto r = c.on(1, pc.batch_read_remote(a.rpc_endpoint(), std::move(items)));
      REQUIRE(r.has_value());
      return std::move(*r);
    };
    auto four = run({"s0", "s1", "s2", "s3"}, {1001, 1001, 1001, 1001});
    for (int i = 0; i < 3; ++i) {
      REQUIRE(four[i].value.has_value());
      CHECK(same_bytes(bufs[i], vals[i]));
    }
    CHECK(mc::is(four[3].value.error(), mc::errc::overloaded));
    CHECK(all_zero(bufs[3]));

    auto two_big = run({"b0", "b1"}, {6007, 6007});
    REQUIRE(two_big[0].value.has_value());
    CHECK(same_bytes(bufs[0], big));
    CHECK(mc::is(two_big[1].value.error(), mc::errc::overloaded));
    CHECK(a.stats().service_overloaded == 2);  // four[3] and two_big[1]

    auto again = run({"s1", "s2", "s3"}, {1001, 1001, 1001});  // everything was released
    for (int i = 0; i < 3; ++i) {
      REQUIRE(again[i].value.has_value());
      CHECK(same_bytes(bufs[i], vals[i + 1]));
    }
  }

  TEST_CASE("a requester's deadline is cut to max_request_timeout on the owner") {
    mc::test::cluster c;
    auto& a = c.add("A", {}, "tcp", [](mc::store::client_options& o) { o.limits.max_request_timeout = 300ms; });
    c.add("B");
    auto v = random_bytes(20011, 12);
    REQUIRE(c.on(0, a.put("k", bytes_of(v))));
    // A CLI-style request whose transfer endpoint never answers: the owner
    // gives up after its own 300 ms, long before the requester's 20 s.
    foreign_listener silent("127.0.0.1", 0);
    mc::transfer::remote_buffer dest{"127.0.0.1:" + std::to_string(silent.port), 4096, v.size(), 7, 0};
    mc::store::peer_client cli(20s);
    auto t0 = std::chrono::steady_clock::now();
    auto r = c.on(1, cli.read_remote(a.rpc_endpoint(), "k", dest));
    auto took = std::chrono::steady_clock::now() - t0;
    REQUIRE(r.value.has_error());
    CHECK(took < 5s);
    CHECK(silent.connections() == 1);  // it did try the requester's own IP
  }

  TEST_CASE("the limits are flags with documented bounds") {
    mc::store::client_options o;
    auto set = mc::store::make_option_set(o);
    auto parsed = set.parse(std::vector<std::string>{"--max_request_timeout=5s", "--max_remote_write_bytes=1MiB",
                                                     "--max_inflight_keys_per_peer=7"});
    REQUIRE_MESSAGE(parsed.what == mc::config::outcome::kind::run, parsed.message);
    CHECK(mc::store::resolve(o, set).empty());
    CHECK(o.limits.max_request_timeout == 5s);
    CHECK(o.limits.max_remote_write_bytes == (1u << 20));
    CHECK(o.limits.max_inflight_keys_per_peer == 7);
    o.limits.max_request_timeout = 61s;
    CHECK_FALSE(mc::store::resolve(o, set).empty());
  }

  TEST_CASE("ha_membership_ttl: whole seconds, at least 2 s and 3 heartbeat periods, at most 1 h") {
    mc::store::client_options o;
    auto set = mc::store::make_option_set(o);
    auto parsed = set.parse(std::vector<std::string>{"--ha_membership_ttl=3s", "--heartbeat_interval=1s"});
    REQUIRE_MESSAGE(parsed.what == mc::config::outcome::kind::run, parsed.message);
    CHECK(mc::store::resolve(o, set).empty());
    CHECK(o.ha_membership_ttl == 3s);
    for (auto bad : {std::chrono::milliseconds(1500), std::chrono::milliseconds(2500), std::chrono::milliseconds(0),
                     std::chrono::milliseconds(3'601'000)}) {
      CAPTURE(bad.count());
      o.ha_membership_ttl = bad;
      CHECK(mc::store::resolve(o, set).find("ha_membership_ttl") != std::string::npos);
    }
    o.ha_membership_ttl = 3s;
    o.heartbeat_interval = 1500ms;  // renewals every 1.5 s could let a 3 s lease lapse
    CHECK(mc::store::resolve(o, set).find("ha_membership_ttl") != std::string::npos);
  }

  TEST_CASE("resolve refuses a malformed master address or advertised host with the reason") {
    mc::store::client_options o;
    auto set = mc::store::make_option_set(o);
    auto parsed =
        set.parse(std::vector<std::string>{"--master_server_address=[::1]:50051", "--local_hostname=fd00::5"});
    REQUIRE_MESSAGE(parsed.what == mc::config::outcome::kind::run, parsed.message);
    CHECK(mc::store::resolve(o, set).empty());
    for (const char* bad : {"127.0.0.1", "::1:50051", "127.0.0.1:0", "[::1]:50051x", "a b:1"}) {
      CAPTURE(bad);
      o.master_server_address = bad;
      auto why = mc::store::resolve(o, set);
      CHECK(why.find("master_server_address") != std::string::npos);
    }
    o.master_server_address = "127.0.0.1:50051";
    for (const char* bad : {"a b", "host:1", "[::1", "-x"}) {
      CAPTURE(bad);
      o.local_hostname = bad;
      CHECK(mc::store::resolve(o, set).find("local_hostname") != std::string::npos);
    }
  }
}
