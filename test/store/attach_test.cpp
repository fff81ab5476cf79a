// Standalone (attach) mode, in one process: an attached_client (its own
// runtime and TransferEngine) uses the store through node 0's attach service.
#include "attach_fixture.hpp"

#include "mc/runtime/when_all.hpp"
#include "mc/store/client_options.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <future>
#include <numeric>

using namespace mc::test;
using mc::errc;

namespace {

constexpr std::uint8_t sentinel = sentinel_byte;

/// Round trips of odd sizes with checksums; bytes past the value untouched.
void round_trips(attached_cluster& a, attacher& at, const std::string& tag) {
  const std::size_t sizes[] = {1, 3, 4097, 65537, (1u << 20) + 7, 5 * (1u << 20) + 13};
  std::uint64_t seed = 11;
  for (auto n : sizes) {
    CAPTURE(n);
    auto key = cat(tag, "-", std::to_string(n));
    auto v = random_bytes(n, seed++);
    REQUIRE(at.on(a_put(*at.c, key, one(v))));
    std::vector<std::uint8_t> buf(n + 19, sentinel);
    auto r = at.on(a_get(*at.c, key, one_mut(buf)));
    REQUIRE(r);
    CHECK(*r == n);
    CHECK(checksum(buf.data(), n) == checksum(v.data(), n));
    CHECK(std::all_of(buf.begin() + static_cast<long>(n), buf.end(), [](auto b) { return b == sentinel; }));
    // The node itself holds it (its tiers, its master registration).
    std::vector<std::uint8_t> direct(n);
    auto d = a.cl.on(0, n_get(a.node(), key, writable(direct)));
    REQUIRE(d);
    CHECK(checksum(direct.data(), n) == checksum(v.data(), n));
  }
}

}  // namespace

TEST_SUITE("store attach") {
  TEST_CASE("an attached process puts and gets odd sizes byte-exact over every transport the node picks") {
    for (std::string transport : {"auto", "tcp", "same_host"}) {
      CAPTURE(transport);
      attached_cluster a(1, transport);
      attacher at(a);
      CHECK(at.c->node_id() == "node0");
      round_trips(a, at, transport);
      // The node moved the bytes with the transport it was told to use
      // ("auto" within one process: in_process).
      auto kind = transport == "tcp"         ? mc::transfer::transport_kind::tcp
                  : transport == "same_host" ? mc::transfer::transport_kind::same_host
                                             : mc::transfer::transport_kind::in_process;
      auto used = a.node().engine().stats().initiated[static_cast<std::size_t>(kind)];
      CHECK(used.write_ops >= 6);  // gets: pushed into the attacher
      CHECK(used.read_ops >= 6);   // puts: pulled from it
      auto s = a.server->stats();
      CHECK(s.put_keys >= 6);
      CHECK(s.get_keys >= 6);
      CHECK(s.staged_gets == 0);  // every key was local to the node: zero-copy from its tier
      CHECK(at.c->engine().stats().registered_regions == 0);  // every call's exposure was revoked
      CHECK(eventually([&] { return drained(*a.server); }));
    }
  }

  TEST_CASE("a node whose tier is an SSD serves attachers through its staging buffers") {
    attached_cluster a(1, "auto", {}, R"({"tiers":[{"type":"SSD","capacity":"96MiB","priority":10,"path":"@DIR@"}]})");
    attacher at(a);
    round_trips(a, at, "ssd");
    // A batch of several SSD values in one call, scattered on the way back.
    std::vector<std::string> keys;
    std::vector<std::vector<std::uint8_t>> vals, outs;
    for (int i = 0; i < 5; ++i) {
      keys.push_back(cat("ssd-b", std::to_string(i)));
      vals.push_back(
          random_bytes(3 * 4096 + 17 + static_cast<std::size_t>(i) * 100003, 300 + static_cast<std::uint64_t>(i)));
    }
    std::vector<const_pieces> in;
    for (auto& v : vals) in.push_back(one(v));
    for (auto& r : at.on(a_batch_put(*at.c, keys, in))) CHECK(r);
    for (auto& v : vals) outs.emplace_back(v.size());
    std::vector<mut_pieces> bufs;
    for (auto& o : outs) bufs.push_back(one_mut(o));
    auto g = at.on(a_batch_get(*at.c, keys, bufs));
    for (std::size_t i = 0; i < vals.size(); ++i) {
      REQUIRE(g[i]);
      CHECK(checksum(outs[i].data(), vals[i].size()) == checksum(vals[i].data(), vals[i].size()));
    }
    CHECK(eventually([&] { return drained(*a.server); }));
  }

  TEST_CASE("scatter-gather pieces in both directions, and pieces inside a registered buffer") {
    attached_cluster a;
    mc::store::attach_options o;
    o.local_buffer_bytes = 3 << 20;
    attacher at(a, o);
    for (std::size_t n : {std::size_t{1} << 10, std::size_t{300007}, std::size_t{(2u << 20) + 333}}) {
      CAPTURE(n);
      auto src = random_bytes(n, n);
      auto src_pieces = random_pieces(src, 70001, n);
      auto v = gather(src_pieces, n);  // the value: the pieces in order (not in memory order)
      auto key = cat("sg-", std::to_string(n));
      REQUIRE(at.on(a_put(*at.c, key, to_const(src_pieces))));
      std::vector<std::uint8_t> dst(n + 5000, sentinel);
      auto pieces = random_pieces(dst, 50021, n + 1);
      auto r = at.on(a_get(*at.c, key, pieces));
      REQUIRE(r);
      CHECK(*r == n);
      CHECK(checksum(gather(pieces, n).data(), n) == checksum(v.data(), n));
      // The same through the registered local buffer (derived registrations).
      auto lb = at.c->local_buffer();
      REQUIRE(lb.size() == (3u << 20));
      std::memset(lb.data(), 0, lb.size());
      auto derived_before = at.c->engine().stats().derived_registrations;
      auto g = at.on(a_get(*at.c, key, {lb.subspan(7, n)}));
      REQUIRE(g);
      CHECK(checksum(lb.data() + 7, n) == checksum(v.data(), n));
      CHECK(at.c->engine().stats().derived_registrations > derived_before);
    }
    // register_buffer: a long-lived registration (Mooncake parity).
    std::vector<std::uint8_t> big(1 << 20);
    auto reg = at.c->register_buffer(writable(big));
    REQUIRE(reg);
    auto g = at.on(a_get(*at.c, "sg-1024", {writable(big).subspan(100, 2000)}));
    REQUIRE(g);
    CHECK(*g == 1024);
  }

  TEST_CASE("batches report per key: missing keys, short buffers and bad keys leave stored values intact") {
    attached_cluster a;
    attacher at(a);
    auto va = random_bytes(1000, 1), vb = random_bytes(70001, 2);
    auto put = at.on(a_batch_put(*at.c, {"a", "b", "", "nopieces"}, {one(va), one(vb), one(va), {}}));
    REQUIRE(put.size() == 4);
    CHECK(put[0]);
    CHECK(put[1]);
    CHECK(mc::is(put[2].error(), errc::invalid_key));
    CHECK(mc::is(put[3].error(), errc::invalid_params));
    std::vector<std::uint8_t> b1(1000), b2(5), b3(70000, sentinel), b4(10), b5(1000);
    auto r = at.on(a_batch_get(*at.c, {"a", "missing", "b", "", "a"},
                               {one_mut(b1), one_mut(b2), one_mut(b3), one_mut(b4), one_mut(b5)}));
    REQUIRE(r.size() == 5);
    REQUIRE(r[0]);
    CHECK(*r[0] == 1000);
    CHECK(checksum(b1.data(), 1000) == checksum(va.data(), 1000));
    CHECK(mc::is(r[1].error(), errc::object_not_found));
    CHECK(mc::is(r[2].error(), errc::buffer_overflow));
    CHECK(std::all_of(b3.begin(), b3.end(), [](auto x) { return x == sentinel; }));  // nothing written
    CHECK(mc::is(r[3].error(), errc::invalid_key));
    REQUIRE(r[4]);
    CHECK(checksum(b5.data(), 1000) == checksum(va.data(), 1000));
    // No room at all: the value exists, so buffer_overflow (not found otherwise).
    auto none = at.on(a_batch_get(*at.c, {"b", "zzz"}, {mut_pieces{}, mut_pieces{}}));
    CHECK(mc::is(none[0].error(), errc::buffer_overflow));
    CHECK(mc::is(none[1].error(), errc::object_not_found));
    // Keys and values of different counts: every key fails.
    auto mism = at.on(a_batch_get(*at.c, {"a", "b"}, {one_mut(b1)}));
    REQUIRE(mism.size() == 2);
    CHECK(mc::is(mism[0].error(), errc::invalid_params));
    CHECK(mc::is(mism[1].error(), errc::invalid_params));
    // The stored value is intact.
    std::vector<std::uint8_t> full(70001);
    auto f = at.on(a_get(*at.c, "b", one_mut(full)));
    REQUIRE(f);
    CHECK(checksum(full.data(), full.size()) == checksum(vb.data(), vb.size()));
  }

  TEST_CASE("a batch larger than the node's keys per call is split and answered in order") {
    mc::store::attach_server_options so;
    so.max_keys_per_call = 7;
    attached_cluster a(1, "auto", so);
    attacher at(a);
    std::vector<std::string> keys;
    std::vector<std::vector<std::uint8_t>> vals;
    for (int i = 0; i < 30; ++i) {
      keys.push_back(cat("k", std::to_string(i)));
      vals.push_back(random_bytes(100 + static_cast<std::size_t>(i) * 977, static_cast<std::uint64_t>(i)));
    }
    std::vector<const_pieces> in;
    for (auto& v : vals) in.push_back(one(v));
    auto p = at.on(a_batch_put(*at.c, keys, in));
    for (auto& r : p) CHECK(r);
    std::vector<std::vector<std::uint8_t>> outs;
    std::vector<mut_pieces> bufs;
    for (auto& v : vals) outs.emplace_back(v.size() + 3);
    for (auto& o : outs) bufs.push_back(one_mut(o));
    auto g = at.on(a_batch_get(*at.c, keys, bufs));
    for (std::size_t i = 0; i < vals.size(); ++i) {
      REQUIRE(g[i]);
      CHECK(*g[i] == vals[i].size());
      CHECK(checksum(outs[i].data(), vals[i].size()) == checksum(vals[i].data(), vals[i].size()));
    }
    CHECK(a.server->stats().calls >= 10);  // 30 keys / 7 per call, both ways
  }

  TEST_CASE("a key held by another node is read through the attached node (staged, bounded)") {
    attached_cluster a(2);
    attacher at(a);
    auto far = random_bytes((2u << 20) + 5, 77);
    REQUIRE(a.cl.on(1, n_put(a.node(1), "far", bytes_of(far))));
    auto near = random_bytes(4099, 78);
    REQUIRE(at.on(a_put(*at.c, "near", one(near))));
    std::vector<std::uint8_t> b1(far.size() + 10, sentinel), b2(near.size()), b3(16), b4(100, sentinel);
    auto r = at.on(
        a_batch_get(*at.c, {"far", "near", "nowhere", "far"}, {one_mut(b1), one_mut(b2), one_mut(b3), one_mut(b4)}));
    REQUIRE(r[0]);
    CHECK(*r[0] == far.size());
    CHECK(checksum(b1.data(), far.size()) == checksum(far.data(), far.size()));
    CHECK(b1[far.size()] == sentinel);
    REQUIRE(r[1]);
    CHECK(checksum(b2.data(), b2.size()) == checksum(near.data(), near.size()));
    CHECK(mc::is(r[2].error(), errc::object_not_found));
    CHECK(mc::is(r[3].error(), errc::buffer_overflow));
    CHECK(std::all_of(b4.begin(), b4.end(), [](auto x) { return x == sentinel; }));
    CHECK(a.server->stats().staged_gets >= 2);
    // Rooms above 4 MiB: the node asks the value's size first and stages
    // about that much (a missing key / a too short room are answered then).
    auto huge = random_bytes((5u << 20) + 9, 79);
    REQUIRE(a.cl.on(1, n_put(a.node(1), "huge", bytes_of(huge))));
    std::vector<std::uint8_t> r1(64u << 20, sentinel), r2(64u << 20), r3((4u << 20) + (1u << 19), sentinel);
    auto big = at.on(
        a_batch_get(*at.c, {"far", "nowhere", "huge", "huge"}, {one_mut(r1), one_mut(r2), one_mut(r3), one_mut(r2)}));
    REQUIRE(big[0]);
    CHECK(checksum(r1.data(), far.size()) == checksum(far.data(), far.size()));
    CHECK(r1[far.size()] == sentinel);
    CHECK(mc::is(big[1].error(), errc::object_not_found));
    CHECK(mc::is(big[2].error(), errc::buffer_overflow));
    CHECK(std::all_of(r3.begin(), r3.end(), [](auto x) { return x == sentinel; }));
    REQUIRE(big[3]);
    CHECK(checksum(r2.data(), huge.size()) == checksum(huge.data(), huge.size()));
    CHECK(eventually([&] { return drained(*a.server); }));
    // exists / size_of see the other node's key too.
    auto e = at.on(a_exists(*at.c, {"far", "nowhere"}));
    REQUIRE(e[0]);
    CHECK(*e[0]);
    REQUIRE(e[1]);
    CHECK(!*e[1]);
    auto s = at.on(a_size(*at.c, "far"));
    REQUIRE(s);
    CHECK(*s == far.size());
  }

  TEST_CASE("a remote value larger than the node's staging bound is too_large, a local one is not") {
    mc::store::attach_server_options so;
    so.max_staging_bytes = 1 << 20;
    attached_cluster a(2, "auto", so);
    attacher at(a);
    auto big = random_bytes((1u << 20) + 1, 5);
    REQUIRE(a.cl.on(1, n_put(a.node(1), "big", bytes_of(big))));
    REQUIRE(at.on(a_put(*at.c, "bighere", one(big))));
    std::vector<std::uint8_t> buf(2 << 20);
    auto r = at.on(a_get(*at.c, "big", one_mut(buf)));
    CHECK(mc::is(r.error(), errc::too_large));
    auto l = at.on(a_get(*at.c, "bighere", one_mut(buf)));
    REQUIRE(l);
    CHECK(checksum(buf.data(), big.size()) == checksum(big.data(), big.size()));
    CHECK(eventually([&] { return drained(*a.server); }));
  }

  TEST_CASE("exists, size_of and remove") {
    attached_cluster a;
    attacher at(a);
    auto v = random_bytes(12345, 9);
    REQUIRE(at.on(a_put(*at.c, "x", one(v))));
    auto e = at.on(a_exists(*at.c, {"x", "y", ""}));
    REQUIRE(e.size() == 3);
    CHECK((e[0] && *e[0]));
    CHECK((e[1] && !*e[1]));
    CHECK(mc::is(e[2].error(), errc::invalid_key));
    auto s = at.on(a_size(*at.c, "x"));
    REQUIRE(s);
    CHECK(*s == v.size());
    CHECK(mc::is(at.on(a_size(*at.c, "y")).error(), errc::object_not_found));
    REQUIRE(at.on(a_remove(*at.c, "x")));
    CHECK(mc::is(at.on(a_remove(*at.c, "x")).error(), errc::object_not_found));
    CHECK(mc::is(at.on(a_size(*at.c, "x")).error(), errc::object_not_found));
    auto e2 = at.on(a_exists(*at.c, {"x"}));
    CHECK((e2[0] && !*e2[0]));
  }

  TEST_CASE("many coroutines on two threads use one attached_client at once") {
    attached_cluster a;
    attacher at(a);
    auto worker = [](mc::store::attached_client& c, int id) -> mc::task<int> {
      int bad = 0;
      for (int i = 0; i < 12; ++i) {
        auto n = static_cast<std::size_t>(1 + (id * 7919 + i * 104729) % 300000);
        auto v = random_bytes(n, static_cast<std::uint64_t>(id * 100 + i));
        auto key = cat("c", std::to_string(id), "-", std::to_string(i));
        const_pieces src = {bytes_of(v)};
        if (!co_await c.put_parts(key, std::move(src))) ++bad;
        std::vector<std::uint8_t> out(n);
        mut_pieces dst = {writable(out)};
        auto r = co_await c.get_parts(key, std::move(dst));
        if (!r || *r != n || checksum(out.data(), n) != checksum(v.data(), n)) ++bad;
      }
      co_return bad;
    };
    auto run = [](mc::store::attached_client& c, decltype(worker)& w, int base) -> mc::task<int> {
      std::vector<mc::task<int>> ts;
      for (int k = 0; k < 8; ++k) ts.push_back(w(c, base + k));
      auto rs = co_await mc::when_all(std::move(ts));
      co_return std::accumulate(rs.begin(), rs.end(), 0);
    };
    int other_bad = -1;
    std::thread other([&] { other_bad = at.on(run(*at.c, worker, 100), 1); });
    CHECK(at.on(run(*at.c, worker, 0), 0) == 0);
    other.join();
    CHECK(other_bad == 0);
    CHECK(eventually([&] { return drained(*a.server); }));
  }

  TEST_CASE("concurrent calls on the same memory never revoke each other's exposure") {
    attached_cluster a;
    attacher at(a);
    auto v = random_bytes(200003, 5);
    auto worker = [](mc::store::attached_client& c, const std::vector<std::uint8_t>& v, int id) -> mc::task<int> {
      int bad = 0;
      for (int i = 0; i < 10; ++i) {
        const_pieces src = {bytes_of(v)};  // every call exposes the same bytes
        if (!co_await c.put_parts(cat("same-", std::to_string(id), "-", std::to_string(i)), std::move(src))) ++bad;
      }
      co_return bad;
    };
    auto run = [](mc::store::attached_client& c, decltype(worker)& w, const std::vector<std::uint8_t>& v,
                  int base) -> mc::task<int> {
      std::vector<mc::task<int>> ts;
      for (int k = 0; k < 8; ++k) ts.push_back(w(c, v, base + k));
      auto rs = co_await mc::when_all(std::move(ts));
      co_return std::accumulate(rs.begin(), rs.end(), 0);
    };
    int other_bad = -1;
    std::thread other([&] { other_bad = at.on(run(*at.c, worker, v, 100), 1); });
    CHECK(at.on(run(*at.c, worker, v, 0), 0) == 0);
    other.join();
    CHECK(other_bad == 0);
    std::vector<std::uint8_t> back(v.size());
    REQUIRE(at.on(a_get(*at.c, "same-105-9", one_mut(back))));
    CHECK(checksum(back.data(), back.size()) == checksum(v.data(), v.size()));
  }

  TEST_CASE("an attacher that gives up mid-call leaves nothing held on the node") {
    attached_cluster a;
    auto v = random_bytes((4u << 20) + 3, 3);
    REQUIRE(a.cl.on(0, n_put(a.node(), "v", bytes_of(v))));
    {
      attacher at(a);
      std::vector<std::vector<std::uint8_t>> bufs(16, std::vector<std::uint8_t>(v.size()));
      std::vector<mut_pieces> pieces;
      for (auto& b : bufs) pieces.push_back(one_mut(b));
      std::promise<std::size_t> done;
      auto fut = done.get_future();
      boost::asio::cancellation_signal cancel;
      auto ex = at.rt.executor(0);
      boost::asio::co_spawn(ex, a_batch_get(*at.c, std::vector<std::string>(16, "v"), pieces),
                            boost::asio::bind_cancellation_slot(
                                cancel.slot(), [&done](std::exception_ptr, std::vector<mc::result<std::size_t>> r) {
                                  std::size_t ok = 0;
                                  for (auto& x : r) ok += x ? 1 : 0;
                                  done.set_value(ok);
                                }));
      // Cancel as soon as the node works on the call (or after it finished:
      // the node must be clean either way).
      (void)eventually([&] { return a.server->stats().calls_in_flight > 0 || a.server->stats().get_keys > 0; });
      // The signal lives on this stack frame: wait for the posted emit to have
      // run, not only for the call to finish (it may finish first; an emit
      // still queued would then touch a destroyed signal).
      std::promise<void> emitted;
      boost::asio::post(ex, [&cancel, &emitted] {
        cancel.emit(boost::asio::cancellation_type::terminal);
        emitted.set_value();
      });
      emitted.get_future().wait();
      fut.wait();
    }
    CHECK(eventually([&] { return drained(*a.server); }));
    // The node keeps serving: a new attacher works.
    attacher again(a);
    std::vector<std::uint8_t> out(v.size());
    auto r = again.on(a_get(*again.c, "v", one_mut(out)));
    REQUIRE(r);
    CHECK(checksum(out.data(), out.size()) == checksum(v.data(), v.size()));
  }

  TEST_CASE("connect refuses bad addresses and a node without an attach listener") {
    mc::runtime::runtime rt(1);
    rt.start();
    std::string why;
    CHECK(mc::is(mc::store::attached_client::connect(rt, "nohostport", {}, &why).error(), errc::invalid_params));
    CHECK(mc::is(mc::store::attached_client::connect(rt, "127.0.0.1:0", {}, &why).error(), errc::invalid_params));
    CHECK(mc::is(mc::store::attached_client::connect(rt, "192.0.2.1:12345", {}, &why).error(), errc::invalid_params));
    CHECK(why.find("not on this host") != std::string::npos);
    mc::store::attach_options o;
    o.attach_port = 1;  // nothing listens there
    o.rpc_timeout = std::chrono::seconds(2);
    CHECK(!mc::store::attached_client::connect(rt, "127.0.0.1:12345", o, &why));
    CHECK(mc::store::derived_attach_port(12345) == 13345);
    CHECK(mc::store::derived_attach_port(65000) == 1024 + (65000 + 1000 - 65536));
    CHECK(mc::store::derived_attach_port(0) == 0);
    for (const char* bad : {"[::1]:80x", "::1:12345", "127.0.0.1:65536", "[127.0.0.1]:1", "127.0.0.1 :1"}) {
      CAPTURE(bad);
      CHECK(mc::is(mc::store::attached_client::connect(rt, bad, {}, &why).error(), errc::invalid_params));
      CHECK(!mc::store::server_port_of(bad));
    }
    CHECK(mc::store::server_port_of("[::1]:12345").value() == 12345);
    CHECK(mc::store::is_loopback_endpoint("127.1.2.3:1"));
    CHECK(mc::store::is_loopback_endpoint("[::1]:1"));
    CHECK(mc::store::is_loopback_endpoint("localhost:1"));
    CHECK(!mc::store::is_loopback_endpoint("127.example:1"));
    CHECK(!mc::store::is_loopback_endpoint("127.0.0.1"));  // not host:port
    mc::rpc::shutdown(rt);
    rt.stop();
  }

}  // TEST_SUITE
