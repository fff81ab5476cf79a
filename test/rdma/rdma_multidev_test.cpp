// Several RDMA devices used together by one TransferEngine (multi-rail).
// Inside the Soft-RoCE VM, run by multidev_test.sh: RXE_VM_DEV=rxe0 and
// RXE_VM_DEV2=rxe1 (a second rxe device on its own dummy netdev). The two
// devices do not reach each other, each reaches itself: both engines use
// [rxe0, rxe1] and device k pairs with device k. Skipped (77) elsewhere.
#include "peer_process.hpp"
#include "mc/runtime/when_all.hpp"
#include "transfer_fixture.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

using namespace mc::transfer;
using namespace mc::transfer::test;
using namespace std::chrono_literals;

namespace {

const int skip_without_devices = [] {
  if (!std::getenv("RXE_VM_DEV") || !std::getenv("RXE_VM_DEV2")) {
    std::puts("rdma multidev tests: RXE_VM_DEV / RXE_VM_DEV2 unset (run test/rdma/multidev_test.sh): skipped");
    std::fflush(stdout);
    std::_Exit(77);
  }
  return 0;
}();

std::string dev1() { return std::getenv("RXE_VM_DEV"); }
std::string dev2() { return std::getenv("RXE_VM_DEV2"); }

engine_options options(std::vector<std::string> devs, bool forced = true) {
  engine_options o;
  o.bind_host = "127.0.0.1";
  o.protocol = "rdma";
  o.enable_in_process = false;
  o.enable_same_host = false;
  o.device_names = std::move(devs);
  if (const char* g = std::getenv("RXE_VM_GID_INDEX")) o.gid_index = std::atoi(g);
  if (forced) o.force = transport_kind::rdma;
  o.slice_size = 256u << 10;  // several slices per MiB: both rails get work
  o.default_timeout = 60s;
  return o;
}

std::vector<std::string> both() { return {dev1(), dev2()}; }

template <class T>
T run(two_engines& e, mc::task<T> t) {
  return e.rt.block_on(std::move(t));
}

/// Bytes device `k` carried as initiator (engine stats).
std::uint64_t dev_bytes(const engine& e, std::size_t k) {
  auto s = e.stats();
  return k < s.rdma_devices.size() ? s.rdma_devices[k].bytes : 0;
}

/// The kernel's own packet counter of an rxe device (independent proof that
/// the device carried traffic); 0 when it cannot be read.
std::uint64_t sent_pkts(const std::string& dev) {
  std::ifstream f("/sys/class/infiniband/" + dev + "/ports/1/hw_counters/sent_pkts");
  std::uint64_t v = 0;
  f >> v;
  return v;
}

}  // namespace

TEST_SUITE("rdma_multidev") {
  // Peer mode: the killed-peer case below re-executes this binary with
  // MULTIDEV_PEER_SIZE=N and --test-case=<this name>: a two-device engine
  // serving N random bytes (seed 4242); prints "READY endpoint address length
  // token" and serves until stdin closes.
  TEST_CASE("multidev peer process") {
    const char* size = std::getenv("MULTIDEV_PEER_SIZE");
    if (!size) return;  // a normal run: nothing to do
    mc::transfer::engine_options o;
    o.bind_host = "127.0.0.1";
    o.protocol = "rdma";
    o.device_names = {std::getenv("RXE_VM_DEV"), std::getenv("RXE_VM_DEV2")};
    if (const char* g = std::getenv("RXE_VM_GID_INDEX")) o.gid_index = std::atoi(g);
    const int rc = serve_peer(o, std::stoull(size), "multidev peer");
    std::fflush(stdout);
    std::_Exit(rc);
  }

  TEST_CASE("both devices are opened and listed in the engine stats") {
    two_engines e(options(both()), options(both()));
    auto s = e.a->stats();
    REQUIRE(s.rdma_devices.size() == 2);
    CHECK(s.rdma_devices[0].name == dev1());
    CHECK(s.rdma_devices[1].name == dev2());
    // An unusable name in an explicit list is skipped, not fatal.
    two_engines f(options({dev1(), "no_such_device"}), options({dev1()}));
    CHECK(f.a->stats().rdma_devices.size() == 1);
  }

  TEST_CASE("WRITE then READ back random payloads from 1 byte to 16 MiB over two devices") {
    two_engines e(options(both()), options(both()));
    const std::size_t sizes[] = {
        1, 7, 4095, 65537, (1u << 20) - 1, (1u << 20) + 1, (5u << 20) + 3, (16u << 20) - 3, 16u << 20};
    constexpr std::size_t cap = 16u << 20;
    std::vector<std::uint8_t> target(cap + 3);
    auto treg = e.b->register_memory(target.data(), target.size());
    REQUIRE(treg);
    std::vector<std::uint8_t> src(cap), back(cap);
    auto sreg = e.a->register_memory(src.data(), src.size());
    auto breg = e.a->register_memory(back.data(), back.size());
    REQUIRE(sreg);
    REQUIRE(breg);
    const auto pk0 = sent_pkts(dev1()), pk1 = sent_pkts(dev2());
    std::uint64_t seed = 11;
    for (auto n : sizes) {
      CAPTURE(n);
      auto payload = mc::test::random_bytes(n, seed++);
      std::memcpy(src.data(), payload.data(), n);
      const std::size_t off = n % 3;
      auto d = treg->describe(off, n);
      auto w = run(e, e.a->write(std::as_bytes(std::span(src.data(), n)), d));
      REQUIRE(w.has_value());
      CHECK(mc::test::checksum(target.data() + off, n) == mc::test::checksum(payload.data(), n));
      std::memset(back.data(), 0, n);
      auto r = run(e, e.a->read(std::as_writable_bytes(std::span(back.data(), n)), d));
      REQUIRE(r.has_value());
      CHECK(mc::test::checksum(back.data(), n) == mc::test::checksum(payload.data(), n));
    }
    // Both devices carried data: our counters and the kernel's.
    const auto b0 = dev_bytes(*e.a, 0), b1 = dev_bytes(*e.a, 1);
    MESSAGE("device bytes: " << dev1() << " " << b0 << ", " << dev2() << " " << b1);
    CHECK(b0 > (8u << 20));
    CHECK(b1 > (8u << 20));
    const auto p0 = sent_pkts(dev1()) - pk0, p1 = sent_pkts(dev2()) - pk1;
    MESSAGE("hw_counters sent_pkts: " << dev1() << " +" << p0 << ", " << dev2() << " +" << p1);
    CHECK(p0 > 1000);
    CHECK(p1 > 1000);
  }

  TEST_CASE("a derived registration uses its parent's MRs on both devices; fence(peer) kills the QPs of both") {
    two_engines e(options(both()), options(both()));
    std::vector<std::uint8_t> target(6u << 20, 0x19);
    auto parent = e.b->register_memory(target.data(), target.size());
    REQUIRE(parent);
    CHECK(e.b->stats().rdma_memory_registrations == 2);  // one MR per device
    const std::size_t off = 12345, n = (4u << 20) + 3;
    auto child = e.b->register_within(*parent, off, n, region_access::remote_read_write);
    REQUIRE(child);
    const auto b0 = dev_bytes(*e.a, 0), b1 = dev_bytes(*e.a, 1);
    auto payload = mc::test::random_bytes(n, 77);
    REQUIRE(run(e, e.a->write(cbytes(payload), child->describe())).has_value());
    CHECK(mc::test::checksum(target.data() + off, n) == mc::test::checksum(payload.data(), n));
    std::vector<std::uint8_t> back(n);
    REQUIRE(run(e, e.a->read(bytes(back), child->describe())).has_value());
    CHECK(mc::test::checksum(back.data(), n) == mc::test::checksum(payload.data(), n));
    CHECK(dev_bytes(*e.a, 0) - b0 > (1u << 20));  // device 1 used the rkey rdma_rkey gave for the child
    CHECK(dev_bytes(*e.a, 1) - b1 > (1u << 20));
    CHECK(e.b->stats().rdma_memory_registrations == 2);  // none for the child
    const auto d = child->describe();
    child->reset();
    REQUIRE(run(e, e.b->fence(e.a->endpoint())).has_value());
    CHECK(e.b->stats().fenced_queue_pairs >= 2);
    auto late = mc::test::random_bytes(n, 78);
    auto w = run(e, e.a->write(cbytes(late), d, 20s));
    REQUIRE_FALSE(w.has_value());
    CHECK(mc::test::checksum(target.data() + off, n) == mc::test::checksum(payload.data(), n));
    REQUIRE(run(e, e.a->write(cbytes(late), parent->describe(0, n))).has_value());  // reconnects
    CHECK(mc::test::checksum(target.data(), n) == mc::test::checksum(late.data(), n));
  }

  TEST_CASE("a batch of mixed READs and WRITEs is spread over both devices") {
    two_engines e(options(both()), options(both()));
    constexpr std::size_t k = 32, n = 100003;
    std::vector<std::uint8_t> target(k * n);
    auto treg = e.b->register_memory(target.data(), target.size());
    REQUIRE(treg);
    auto init = mc::test::random_bytes(target.size(), 77);
    std::memcpy(target.data(), init.data(), init.size());
    // Half of the local buffers registered, half not (bounce buffers per device).
    std::vector<std::uint8_t> local(k * n);
    auto lreg = e.a->register_memory(local.data(), local.size() / 2);
    REQUIRE(lreg);
    std::vector<request> reqs;
    std::vector<std::vector<std::uint8_t>> payloads(k);
    for (std::size_t i = 0; i < k; ++i) {
      auto span = std::span(local.data() + i * n, n);
      if (i % 2) {
        payloads[i] = mc::test::random_bytes(n, 500 + i);
        std::memcpy(span.data(), payloads[i].data(), n);
        reqs.push_back(request::make_write(std::as_bytes(span), treg->describe(i * n, n)));
      } else {
        reqs.push_back(request::make_read(std::as_writable_bytes(span), treg->describe(i * n, n)));
      }
    }
    // Warm-up: the first transfer to a peer connects device 0 first (it
    // learns the peer's device count); device 1's QP and rkey may arrive only
    // after a transfer is over. Read until device 1 has carried data.
    std::vector<std::uint8_t> warm(2u << 20);
    for (int i = 0; i < 8 && dev_bytes(*e.a, 1) == 0; ++i)
      REQUIRE(run(e, e.a->read(bytes(warm), treg->describe(0, warm.size()))).has_value());
    const auto warm0 = dev_bytes(*e.a, 0), warm1 = dev_bytes(*e.a, 1);
    auto res = run(e, e.a->batch(std::move(reqs)));
    for (std::size_t i = 0; i < k; ++i) {
      CAPTURE(i);
      REQUIRE(res[i].has_value());
      const auto* expect = i % 2 ? payloads[i].data() : init.data() + i * n;
      CHECK(mc::test::checksum(target.data() + i * n, n) == mc::test::checksum(expect, n));
      if (i % 2 == 0) CHECK(mc::test::checksum(local.data() + i * n, n) == mc::test::checksum(init.data() + i * n, n));
    }
    MESSAGE("batch bytes: device 0 +" << dev_bytes(*e.a, 0) - warm0 << ", device 1 +" << dev_bytes(*e.a, 1) - warm1);
    CHECK(dev_bytes(*e.a, 0) > warm0);
    CHECK(dev_bytes(*e.a, 1) > warm1);
    // Concurrent single-slice transfers rotate over the devices too.
    const auto before1 = dev_bytes(*e.a, 1);
    std::vector<mc::task<int>> tasks;
    std::vector<std::vector<std::uint8_t>> mine(16, std::vector<std::uint8_t>(4099));
    for (std::size_t i = 0; i < mine.size(); ++i)
      tasks.push_back([](engine* a, remote_buffer d, std::vector<std::uint8_t>* b) -> mc::task<int> {
        auto r = co_await a->read(std::as_writable_bytes(std::span(*b)), d);
        co_return r ? 1 : 0;
      }(e.a.get(), treg->describe(i * n, 4099), &mine[i]));
    auto rs = e.rt.block_on([](std::vector<mc::task<int>> v) -> mc::task<std::vector<int>> {
      co_return co_await mc::when_all(std::move(v));
    }(std::move(tasks)));
    for (std::size_t i = 0; i < rs.size(); ++i) {
      CAPTURE(i);
      CHECK(rs[i] == 1);
      CHECK(std::memcmp(mine[i].data(), target.data() + i * n, 4099) == 0);
    }
    CHECK(dev_bytes(*e.a, 1) > before1);
  }

  TEST_CASE("a peer with one device is reached on device 0 only, in both directions") {
    two_engines e(options(both()), options({dev1()}));
    std::vector<std::uint8_t> target(6u << 20);
    auto treg = e.b->register_memory(target.data(), target.size());
    REQUIRE(treg);
    auto payload = mc::test::random_bytes(target.size() - 1, 3);
    REQUIRE(run(e, e.a->write(cbytes(payload), treg->describe(1, payload.size()))).has_value());
    CHECK(mc::test::checksum(target.data() + 1, payload.size()) == mc::test::checksum(payload.data(), payload.size()));
    std::vector<std::uint8_t> back(payload.size());
    REQUIRE(run(e, e.a->read(bytes(back), treg->describe(1, back.size()))).has_value());
    CHECK(back == payload);
    CHECK(dev_bytes(*e.a, 0) >= 2 * payload.size());
    CHECK(dev_bytes(*e.a, 1) == 0);
    // The one-device engine reaches the two-device engine (device 0's rkey is in the token).
    std::vector<std::uint8_t> mem(3u << 20);
    auto areg = e.a->register_memory(mem.data(), mem.size());
    REQUIRE(areg);
    auto p2 = mc::test::random_bytes(mem.size(), 4);
    REQUIRE(run(e, e.b->write(cbytes(p2), areg->describe())).has_value());
    CHECK(mem == p2);
  }

  TEST_CASE("a two-device engine reaches a TCP-only engine over TCP, both ways") {
    engine_options tcp_only;
    tcp_only.bind_host = "127.0.0.1";
    tcp_only.enable_in_process = false;
    tcp_only.enable_same_host = false;
    two_engines e(options(both(), false), tcp_only);
    std::vector<std::uint8_t> target(3u << 20);
    auto treg = e.b->register_memory(target.data(), target.size());
    REQUIRE(treg);
    auto payload = mc::test::random_bytes(target.size(), 21);
    REQUIRE(run(e, e.a->write(cbytes(payload), treg->describe())).has_value());
    CHECK(target == payload);
    CHECK(e.a->stats().initiated[static_cast<std::size_t>(transport_kind::tcp)].write_ops == 1);
    CHECK(dev_bytes(*e.a, 0) + dev_bytes(*e.a, 1) == 0);
    std::vector<std::uint8_t> mem(65537, 9);
    auto areg = e.a->register_memory(mem.data(), mem.size());
    REQUIRE(areg);
    std::vector<std::uint8_t> got(mem.size());
    REQUIRE(run(e, e.b->read(bytes(got), areg->describe())).has_value());
    CHECK(got == mem);
  }

  TEST_CASE("wrong tokens and dead regions fail cleanly on every device; other transfers continue") {
    two_engines e(options(both()), options(both()));
    std::vector<std::uint8_t> target(4u << 20, 0x5a);
    auto treg = e.b->register_memory(target.data(), target.size());
    REQUIRE(treg);
    std::vector<std::uint8_t> buf(4u << 20, 1);
    auto d = treg->describe();
    auto bad_key = d;
    bad_key.token ^= 0x00ff00ffu;                             // another device-0 rkey and an unknown token
    auto r1 = run(e, e.a->write(cbytes(buf), bad_key, 20s));  // 16 slices: both devices
    REQUIRE_FALSE(r1.has_value());
    CHECK(mc::is(r1.error(), mc::errc::access_denied));
    auto small = bad_key;
    small.length = 100;
    std::vector<std::uint8_t> s1(100);
    auto r2 = run(e, e.a->read(bytes(s1), small, 20s));
    REQUIRE_FALSE(r2.has_value());
    CHECK(mc::is(r2.error(), mc::errc::access_denied));
    auto past = treg->describe(target.size() - 4096, 4096);
    past.address += 1;
    std::vector<std::uint8_t> s2(4096);
    auto r3 = run(e, e.a->read(bytes(s2), past, 20s));
    REQUIRE_FALSE(r3.has_value());
    CHECK(mc::is(r3.error(), mc::errc::access_denied));
    CHECK(target[0] == 0x5a);
    // Good transfers still work on both devices (rebuilt QPs).
    const auto before1 = dev_bytes(*e.a, 1);
    REQUIRE(run(e, e.a->write(cbytes(buf), d, 20s)).has_value());
    CHECK(target == buf);
    CHECK(dev_bytes(*e.a, 1) > before1);
    // A bad request inside a batch fails alone.
    std::vector<std::uint8_t> b1(1u << 20), b2(1u << 20), b3(1u << 20);
    auto bk = bad_key;
    bk.length = 1u << 20;
    std::vector<request> reqs{request::make_read(bytes(b1), treg->describe(0, 1u << 20)),
                              request::make_read(bytes(b2), bk),
                              request::make_read(bytes(b3), treg->describe(1u << 20, 1u << 20))};
    auto rs = run(e, e.a->batch(std::move(reqs), 20s));
    CHECK(rs[0].has_value());
    REQUIRE_FALSE(rs[1].has_value());
    CHECK(mc::is(rs[1].error(), mc::errc::access_denied));
    CHECK(rs[2].has_value());
    // Unregistered on the target: device 0's rkey is dead and the cached
    // device-1 rkey too (the cache entry is dropped, the region reported gone).
    treg->reset();
    auto r4 = run(e, e.a->read(bytes(buf), d, 20s));
    REQUIRE_FALSE(r4.has_value());
    CHECK((mc::is(r4.error(), mc::errc::out_of_range) || mc::is(r4.error(), mc::errc::access_denied)));
    // A new registration of the same memory works again on both devices.
    auto treg2 = e.b->register_memory(target.data(), target.size());
    REQUIRE(treg2);
    const auto before2 = dev_bytes(*e.a, 1);
    auto fresh = mc::test::random_bytes(target.size(), 8);
    REQUIRE(run(e, e.a->write(cbytes(fresh), treg2->describe(), 20s)).has_value());
    CHECK(target == fresh);
    CHECK(dev_bytes(*e.a, 1) > before2);
  }

  TEST_CASE("a two-device peer process killed mid-transfer fails the transfer on every device") {
    const std::size_t size = 64u << 20;
    ::setenv("MULTIDEV_PEER_SIZE", std::to_string(size).c_str(), 1);
    child_process peer({"/proc/self/exe", "--test-case=multidev peer process", "--no-intro=true"});
    ::unsetenv("MULTIDEV_PEER_SIZE");
    REQUIRE(peer.started());
    auto ready = read_ready(peer, 60s);
    REQUIRE(ready);
    const remote_buffer d = *ready;
    mc::runtime::runtime rt(2);
    rt.start();
    engine a(rt, options(both()));
    REQUIRE(a.start());
    std::vector<std::uint8_t> buf(size);
    auto reg = a.register_memory(buf.data(), buf.size());
    REQUIRE(reg);
    // Warm-up: device 0 learns the peer's two devices, then both carry data
    // (bytes checked against the peer's seed). The first QP + rkey of device 1
    // may arrive after a transfer is over: read until device 1 carried data.
    const auto expect = mc::test::random_bytes(4u << 20, 4242);
    for (int i = 0; i < 8 && (i < 2 || a.stats().rdma_devices.at(1).bytes == 0); ++i)
      REQUIRE(rt.block_on(a.read(std::as_writable_bytes(std::span(buf.data(), expect.size())), d)).has_value());
    CHECK(std::memcmp(buf.data(), expect.data(), expect.size()) == 0);
    CHECK(a.stats().rdma_devices.at(1).bytes > 0);
    // Named members, not a structured binding: clang 14 cannot capture a
    // binding in doctest's CAPTURE lambda.
    const auto killed = read_while_killing(rt, a, buf, d, peer);
    const auto& result = killed.result;
    const auto took = killed.took;
    CAPTURE(std::chrono::duration_cast<std::chrono::milliseconds>(took).count());
    REQUIRE_FALSE(result.has_value());
    CAPTURE(result.error().message());
    CHECK((mc::is(result.error(), mc::errc::transfer_fail) || mc::is(result.error(), mc::errc::timeout)));
    CHECK(took < 30s);
    a.stop();
  }
}
