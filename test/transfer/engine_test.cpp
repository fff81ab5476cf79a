#include "mc/runtime/deadline.hpp"
#include "mc/runtime/when_all.hpp"
#include "transfer_fixture.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <thread>

using namespace std::chrono_literals;
using namespace mc::transfer;
using mc::transfer::test::bytes;
using mc::transfer::test::cbytes;
using mc::transfer::test::loopback_options;
using mc::transfer::test::two_engines;

namespace {

/// Writes `n` random bytes into a fresh region of b and reads them back.
void round_trip(two_engines& t, std::size_t n, std::uint64_t seed) {
  std::vector<std::uint8_t> target(n + 64, 0xAB);
  auto reg = t.b->register_memory(target.data() + 32, n);
  REQUIRE(reg.has_value());
  auto src = mc::test::random_bytes(n, seed);
  auto w = t.rt.block_on(t.a->write(cbytes(src), reg->describe()));
  REQUIRE_MESSAGE(w.has_value(), "write of " << n << ": " << w.error().message());
  CHECK(mc::test::checksum(target.data() + 32, n) == mc::test::checksum(src.data(), n));
  // Guard bytes around the region are untouched.
  for (int i = 0; i < 32; ++i) {
    CHECK(target[i] == 0xAB);
    CHECK(target[32 + n + i] == 0xAB);
  }
  std::vector<std::uint8_t> back(n, 0);
  auto r = t.rt.block_on(t.a->read(bytes(back), reg->describe()));
  REQUIRE_MESSAGE(r.has_value(), "read of " << n << ": " << r.error().message());
  CHECK(mc::test::checksum(back.data(), n) == mc::test::checksum(src.data(), n));
}

/// Checks a batch of writes (even i) and reads (odd i) of local[i] against
/// remote[off[i], +len[i]) (its bytes were `fill` before): a refused item got
/// ACCESS_DENIED and left remote untouched, every other one moved exactly its
/// bytes, and the `tail` bytes after each item are unchanged.
void check_mixed_batch(const std::vector<mc::result<void>>& res, const std::vector<std::uint8_t>& remote,
                       const std::vector<std::uint8_t>& fill, const std::vector<std::vector<std::uint8_t>>& local,
                       const std::vector<std::size_t>& off, const std::vector<std::size_t>& len,
                       const std::function<bool(std::size_t)>& refused, std::size_t tail) {
  REQUIRE(res.size() == len.size());
  for (std::size_t i = 0; i < len.size(); ++i) {
    CAPTURE(i);
    const auto* r = remote.data() + off[i];
    if (refused(i)) {
      CHECK(mc::is(res[i].error(), mc::errc::access_denied));
      CHECK(std::memcmp(r, fill.data() + off[i], len[i]) == 0);  // untouched
      continue;
    }
    REQUIRE(res[i].has_value());
    if (i % 2 == 0)
      CHECK(std::memcmp(r, local[i].data(), len[i]) == 0);
    else
      CHECK(std::memcmp(local[i].data(), fill.data() + off[i], len[i]) == 0);
    CHECK(std::memcmp(r + len[i], fill.data() + off[i] + len[i], tail) == 0);  // nothing past the item
  }
}

/// The tests' own sockets live on the runtime's io_context, never on an
/// io_context of their own: a short-lived io_context's io_uring ring, unmapped
/// and soon mapped again at the same address by the next one, is a race to
/// TSan (the kernel's writes to the shared ring are invisible to it).
///
/// Connects to 127.0.0.1:`port`, sends 48 bytes that are no transfer header
/// and reads: success when the peer closed the connection (EOF), else
/// transfer_fail (connect or write failed, a byte or another error came).
mc::task<mc::result<void>> closes_after_garbage(std::uint16_t port) {
  namespace asio = boost::asio;
  asio::ip::tcp::socket s(co_await asio::this_coro::executor);
  const asio::ip::tcp::endpoint to(asio::ip::make_address("127.0.0.1"), port);
  boost::system::error_code ec;
  co_await s.async_connect(to, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return mc::fail(mc::errc::transfer_fail);
  std::array<std::uint8_t, 48> garbage{'G', 'E', 'T', ' '};
  co_await asio::async_write(s, asio::buffer(garbage), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return mc::fail(mc::errc::transfer_fail);
  std::uint8_t one = 0;
  co_await s.async_read_some(asio::buffer(&one, 1), asio::redirect_error(asio::use_awaitable, ec));
  if (ec != asio::error::eof) co_return mc::fail(mc::errc::transfer_fail);
  co_return mc::result<void>{};
}

}  // namespace

TEST_SUITE("transfer_engine") {
  TEST_CASE("random payloads survive a TCP round trip at odd sizes and slice boundaries") {
    two_engines t;
    const std::size_t s = t.a->options().slice_size;
    std::uint64_t seed = 1;
    for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(4095), std::size_t(65537), s - 1, s, s + 1,
                          3 * s + 17, 2 * s - 1})
      round_trip(t, n, seed++);
  }

  TEST_CASE("a 64 MiB payload survives a TCP round trip") {
    two_engines t;
    round_trip(t, 64u << 20, 99);
  }

  TEST_CASE("small slices spread one request over many connections") {
    auto o = loopback_options();
    o.slice_size = 4096;
    two_engines t(o);
    round_trip(t, 1000003, 5);
    CHECK(t.a->stats().outbound_connections <= o.connections_per_peer * t.rt.size());
  }

  TEST_CASE("a wrong token is refused with ACCESS_DENIED and nothing is written") {
    two_engines t;
    std::vector<std::uint8_t> target(4096, 0x11);
    auto reg = t.b->register_memory(target.data(), target.size());
    REQUIRE(reg);
    auto d = reg->describe();
    d.token ^= 1;
    auto src = mc::test::random_bytes(4096, 3);
    auto w = t.rt.block_on(t.a->write(cbytes(src), d));
    REQUIRE(w.has_error());
    CHECK(mc::is(w.error(), mc::errc::access_denied));
    for (auto b : target) REQUIRE(b == 0x11);
    std::vector<std::uint8_t> back(4096, 0x22);
    auto r = t.rt.block_on(t.a->read(bytes(back), d));
    CHECK(mc::is(r.error(), mc::errc::access_denied));
    // The connection stays usable after a refusal (payload was drained).
    auto ok = t.rt.block_on(t.a->write(cbytes(src), reg->describe()));
    CHECK(ok.has_value());
    CHECK(std::memcmp(target.data(), src.data(), src.size()) == 0);
    CHECK(t.b->stats().served_rejects == 2);
  }

  TEST_CASE("one byte past the end of a region is refused with ACCESS_DENIED and nothing is written") {
    two_engines t;
    std::vector<std::uint8_t> target(8192, 0x33);
    auto reg = t.b->register_memory(target.data(), 4096);
    REQUIRE(reg);
    auto d = reg->describe();
    d.length = 4097;  // a forged descriptor
    auto src = mc::test::random_bytes(4097, 4);
    auto w = t.rt.block_on(t.a->write(cbytes(src), d));
    REQUIRE(w.has_error());
    CHECK(mc::is(w.error(), mc::errc::access_denied));  // one code for every "not yours"
    for (auto b : target) REQUIRE(b == 0x33);
    auto d2 = reg->describe(4095, 1);
    d2.address += 1;  // starts at the end
    auto w2 = t.rt.block_on(t.a->write(cbytes(src).first(1), d2));
    CHECK(mc::is(w2.error(), mc::errc::access_denied));
    for (auto b : target) REQUIRE(b == 0x33);
  }

  TEST_CASE("an unregistered region is refused with ACCESS_DENIED and nothing is written") {
    two_engines t;
    std::vector<std::uint8_t> target(4096, 0x44);
    auto reg = t.b->register_memory(target.data(), target.size());
    REQUIRE(reg);
    auto d = reg->describe();
    reg->reset();
    auto src = mc::test::random_bytes(4096, 5);
    auto w = t.rt.block_on(t.a->write(cbytes(src), d));
    REQUIRE(w.has_error());
    CHECK(mc::is(w.error(), mc::errc::access_denied));
    for (auto b : target) REQUIRE(b == 0x44);
    CHECK(t.b->stats().registered_regions == 0);
  }

  TEST_CASE("caller errors are INVALID_PARAMS and empty transfers succeed") {
    two_engines t;
    std::vector<std::uint8_t> target(100);
    auto reg = t.b->register_memory(target.data(), target.size());
    REQUIRE(reg);
    std::vector<std::uint8_t> big(101);
    CHECK(mc::is(t.rt.block_on(t.a->write(cbytes(big), reg->describe())).error(), mc::errc::invalid_params));
    auto d = reg->describe();
    d.endpoint.clear();
    CHECK(mc::is(t.rt.block_on(t.a->read(bytes(target).first(10), d)).error(), mc::errc::invalid_params));
    CHECK(t.rt.block_on(t.a->read(std::span<std::byte>(), reg->describe())).has_value());
    CHECK_THROWS_AS((void)reg->describe(50, 51), std::out_of_range);
    CHECK(t.b->register_memory(nullptr, 10).error() == mc::errc::invalid_params);
    CHECK(t.b->register_memory(target.data(), 0).error() == mc::errc::invalid_params);
  }

  TEST_CASE("a batch returns one result per request, in order") {
    two_engines t;
    std::vector<std::uint8_t> target(1 << 20, 0);
    auto reg = t.b->register_memory(target.data(), target.size());
    REQUIRE(reg);
    auto src = mc::test::random_bytes(1 << 20, 6);
    std::vector<request> reqs;
    const std::size_t part = (1 << 20) / 16;
    for (std::size_t i = 0; i < 16; ++i)
      reqs.push_back(request::make_write(cbytes(src).subspan(i * part, part), reg->describe(i * part, part)));
    auto bad = reg->describe(0, 8);
    bad.token += 1;
    reqs.insert(reqs.begin() + 3, request::make_write(cbytes(src).first(8), bad));
    auto res = t.rt.block_on(t.a->batch(std::move(reqs)));
    REQUIRE(res.size() == 17);
    for (std::size_t i = 0; i < res.size(); ++i) {
      if (i == 3)
        CHECK(mc::is(res[i].error(), mc::errc::access_denied));
      else
        CHECK(res[i].has_value());
    }
    CHECK(std::memcmp(target.data(), src.data(), src.size()) == 0);
  }

  TEST_CASE(
      "a large same-host or in-process batch is cut over the runtime's threads, a TCP one is not; every byte lands") {
    for (auto force : {transport_kind::tcp, transport_kind::same_host, transport_kind::in_process}) {
      CAPTURE(static_cast<int>(force));
      auto o = loopback_options(force);
      o.spread_bytes = 64u << 10;  // parts of >= 64 KiB: two threads, two parts
      o.slice_size = 64u << 10;    // TCP: each part opens its own connections
      two_engines t(o, loopback_options(force));
      // Items of odd sizes; the cut falls inside item 2, whose token is
      // wrong: both of its halves are refused, nothing of it lands.
      const std::vector<std::size_t> len = {70001, 300007, 1000003, 5, 257000, 1};
      std::size_t total = 0;
      for (auto n : len) total += n + 7;
      std::vector<std::uint8_t> remote(total, 0);
      auto fill = mc::test::random_bytes(remote.size(), 90);
      std::memcpy(remote.data(), fill.data(), fill.size());
      auto reg = t.b->register_memory(remote.data(), remote.size());
      REQUIRE(reg);
      std::vector<std::vector<std::uint8_t>> local;
      std::vector<std::size_t> off;
      std::vector<request> reqs;
      std::size_t at = 0;
      for (std::size_t i = 0; i < len.size(); ++i) {
        off.push_back(at);
        local.push_back(mc::test::random_bytes(len[i], 200 + i));
        auto d = reg->describe(at, len[i]);
        if (i == 2) d.token ^= 1;
        reqs.push_back(i % 2 == 0 ? request::make_write(cbytes(local[i]), d) : request::make_read(bytes(local[i]), d));
        at += len[i] + 7;
      }
      auto res = t.rt.block_on(t.a->batch(std::move(reqs)));
      check_mixed_batch(
          res, remote, fill, local, off, len, [](std::size_t i) { return i == 2; }, 7);
      auto s = t.a->stats().initiated[std::size_t(force)];
      CHECK(s.write_ops + s.read_ops == len.size() - 1);  // counted per request, not per part
      CHECK(s.errors == 1);
      // One item alone is cut too (a 5 MiB + 3 write, read back).
      round_trip(t, (5u << 20) + 3, 91);
      // Same-host: the refused item was cut into sub-items by the chunks
      // (max(spread_bytes, bytes / (4 x 4 claimers), min(8 MiB, bytes / 4
      // claimers)) each, lib/transfer README), so the target refused one
      // grant per sub-item. TCP is never
      // cut (one thread's pool holds at most connections_per_peer
      // connections).
      if (force == transport_kind::same_host) {
        std::size_t bytes = 0;
        for (auto n : len) bytes += n;
        const std::size_t chunk =
            std::max<std::size_t>({o.spread_bytes, bytes / 16, std::min<std::size_t>(8u << 20, bytes / 4)});
        const std::size_t first = len[0] + len[1], last = first + len[2] - 1;
        CHECK(last / chunk - first / chunk + 1 > 1);
        CHECK(t.b->stats().served_rejects == last / chunk - first / chunk + 1);
      }
      if (force == transport_kind::tcp) CHECK(t.a->stats().outbound_connections <= o.connections_per_peer);
    }
  }

  TEST_CASE("a spread same-host batch sends its windows' releases with the next grants and ends holding none") {
    auto o = loopback_options(transport_kind::same_host);
    o.spread_bytes = 64u << 10;  // chunks of ~256 KiB: several windows per claimer
    two_engines t(o, loopback_options(transport_kind::same_host));
    constexpr std::size_t n = 96, piece = 40961, gap = 13;  // odd sizes, pieces apart
    std::vector<std::uint8_t> remote(n * (piece + gap));
    auto fill = mc::test::random_bytes(remote.size(), 301);
    std::memcpy(remote.data(), fill.data(), fill.size());
    auto reg = t.b->register_memory(remote.data(), remote.size());
    REQUIRE(reg);
    for (int round = 0; round < 2; ++round) {  // reads, then writes of fresh bytes
      CAPTURE(round);
      std::vector<std::vector<std::uint8_t>> local;
      std::vector<request> reqs;
      for (std::size_t i = 0; i < n; ++i) {
        auto d = reg->describe(i * (piece + gap), piece);
        if (round == 0) {
          local.emplace_back(piece, 0);
          reqs.push_back(request::make_read(bytes(local.back()), d));
        } else {
          local.push_back(mc::test::random_bytes(piece, 400 + i));
          reqs.push_back(request::make_write(cbytes(local.back()), d));
        }
      }
      auto res = t.rt.block_on(t.a->batch(std::move(reqs)));
      REQUIRE(res.size() == n);
      for (std::size_t i = 0; i < n; ++i) {
        CAPTURE(i);
        CHECK(res[i].has_value());
        const auto* at = remote.data() + i * (piece + gap);
        CHECK(std::memcmp(local[i].data(), round == 0 ? fill.data() + i * (piece + gap) : at, piece) == 0);
        CHECK(std::memcmp(at + piece, fill.data() + i * (piece + gap) + piece, gap) == 0);  // the gaps untouched
      }
    }
    // Releases went out behind later windows' grants...
    CHECK(t.a->stats().same_host_releases_deferred > 0);
    // ...and the last ones before each batch returned: the target ends every
    // grant (its control thread reads them a moment later), none expires.
    for (int i = 0; i < 400 && t.b->stats().same_host_grants_held != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK(t.b->stats().same_host_grants_held == 0);
    reg->reset();
    CHECK(t.b->stats().revoked_with_grants == 0);
  }

  TEST_CASE("spread_bytes 0 never cuts a batch, and a spread below 64 KiB is refused") {
    auto o = loopback_options(transport_kind::same_host);
    o.spread_bytes = 0;
    {
      two_engines t(o, loopback_options(transport_kind::same_host));
      std::vector<std::uint8_t> remote((9u << 20) + 3);  // the default spread_bytes would cut it
      auto reg = t.b->register_memory(remote.data(), remote.size());
      REQUIRE(reg);
      auto d = reg->describe();
      d.token ^= 1;
      std::vector<std::uint8_t> local(remote.size());
      CHECK(mc::is(t.rt.block_on(t.a->read(bytes(local), d)).error(), mc::errc::access_denied));
      CHECK(t.b->stats().served_rejects == 1);  // one grant asked: not cut
    }
    mc::runtime::runtime rt(1);
    o.spread_bytes = 4096;
    CHECK_THROWS_AS(engine(rt, o), std::invalid_argument);
  }

  TEST_CASE("a batch of many small reads and writes, mixed, with refusals among them, keeps every stream in step") {
    for (auto force : {transport_kind::tcp, transport_kind::same_host}) {
      CAPTURE(static_cast<int>(force));
      // TCP, small slices: many windows per connection, two in flight, answers
      // read ahead with payloads. Same-host: windows of up to 64 grants, their
      // answers sent and received in bulk. Refused items in the middle of windows.
      auto o = loopback_options(force);
      o.slice_size = 4096;
      two_engines t(o, loopback_options(force));
      constexpr std::size_t n = 300;
      std::vector<std::uint8_t> remote(4u << 20);
      auto fill = mc::test::random_bytes(remote.size(), 77);
      std::memcpy(remote.data(), fill.data(), fill.size());
      auto reg = t.b->register_memory(remote.data(), remote.size());
      REQUIRE(reg);
      std::vector<std::vector<std::uint8_t>> local(n);
      std::vector<std::size_t> off(n), len(n);
      std::vector<request> reqs;
      std::uint64_t x = 12345;
      std::size_t at = 0;
      for (std::size_t i = 0; i < n; ++i) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        len[i] = 1 + (x >> 33) % 13000;  // 1 B .. ~3 slices, never a multiple on purpose
        off[i] = at;
        at += len[i] + 3;
        REQUIRE(at < remote.size());
        local[i] = mc::test::random_bytes(len[i], 1000 + i);
        auto d = reg->describe(off[i], len[i]);
        if (i % 37 == 5) d.token ^= 1;  // refused
        if (i % 2 == 0)
          reqs.push_back(request::make_write(cbytes(local[i]), d));
        else
          reqs.push_back(request::make_read(bytes(local[i]), d));
      }
      auto res = t.rt.block_on(t.a->batch(std::move(reqs)));
      check_mixed_batch(
          res, remote, fill, local, off, len, [](std::size_t i) { return i % 37 == 5; }, 1);
      // The pooled connections are in step: another batch over them works.
      auto again = mc::test::random_bytes(70001, 3);
      auto w = t.rt.block_on(t.a->write(cbytes(again), reg->describe(0, again.size())));
      REQUIRE(w.has_value());
      CHECK(std::memcmp(remote.data(), again.data(), again.size()) == 0);
    }
  }

  TEST_CASE("many concurrent transfers from both threads all land intact") {
    two_engines t;
    constexpr std::size_t n = 64, size = 100003;
    std::vector<std::vector<std::uint8_t>> targets(n, std::vector<std::uint8_t>(size));
    std::vector<mc::transfer::region> regs;
    for (auto& v : targets) regs.push_back(*t.b->register_memory(v.data(), v.size()));
    std::vector<std::vector<std::uint8_t>> srcs, backs;
    for (std::size_t i = 0; i < n; ++i) {
      srcs.push_back(mc::test::random_bytes(size, 100 + i));
      backs.emplace_back(size);
    }
    std::atomic<int> good{0};
    auto one = [](engine* e, std::span<const std::byte> s, std::span<std::byte> back, remote_buffer d,
                  std::atomic<int>* good) -> mc::task<int> {
      auto w = co_await e->write(s, d);
      if (!w) co_return 0;
      auto r = co_await e->read(back, d);
      if (r && std::memcmp(back.data(), s.data(), s.size()) == 0) good->fetch_add(1);
      co_return 0;
    };
    auto all = [&](std::size_t thread) -> mc::task<int> {
      std::vector<mc::task<int>> ts;
      for (std::size_t i = thread; i < n; i += 2)
        ts.push_back(one(t.a.get(), cbytes(srcs[i]), bytes(backs[i]), regs[i].describe(), &good));
      co_await mc::when_all(std::move(ts));
      co_return 0;
    };
    std::thread other([&] { t.rt.block_on(all(1), 1); });
    t.rt.block_on(all(0), 0);
    other.join();
    CHECK(good.load() == int(n));
    CHECK(t.a->stats().initiated[0].errors == 0);
  }

  TEST_CASE("1000 writes each immediately read back never see a stale byte") {
    two_engines t;
    std::vector<std::uint8_t> target(65536 + 3);
    auto reg = t.b->register_memory(target.data(), target.size());
    REQUIRE(reg);
    auto body = [](engine* e, remote_buffer d) -> mc::task<int> {
      std::vector<std::uint8_t> back(d.length);
      int stale = 0;
      for (int i = 0; i < 1000; ++i) {
        auto src = mc::test::random_bytes(d.length, 1000 + i);
        auto w = co_await e->write(cbytes(src), d);
        if (!w) co_return -1;
        auto r = co_await e->read(bytes(back), d);
        if (!r) co_return -1;
        if (std::memcmp(back.data(), src.data(), src.size()) != 0) ++stale;
      }
      co_return stale;
    };
    CHECK(t.rt.block_on(body(t.a.get(), reg->describe())) == 0);
  }

  TEST_CASE("in-process transport is chosen automatically for an engine of this process") {
    two_engines t(loopback_options(std::nullopt), loopback_options(std::nullopt));
    round_trip(t, 3 * (1 << 20) + 5, 7);
    auto s = t.a->stats();
    CHECK(s.initiated[std::size_t(transport_kind::in_process)].write_ops == 1);
    CHECK(s.initiated[std::size_t(transport_kind::tcp)].write_ops == 0);
    // Same checks as a remote target.
    std::vector<std::uint8_t> target(64, 1);
    auto reg = t.b->register_memory(target.data(), target.size());
    auto d = reg->describe();
    d.token ^= 0xff;
    std::vector<std::uint8_t> src(64, 2);
    CHECK(mc::is(t.rt.block_on(t.a->write(cbytes(src), d)).error(), mc::errc::access_denied));
    for (auto b : target) REQUIRE(b == 1);
  }
}

TEST_SUITE("transfer_engine_failures") {
  TEST_CASE("a peer that accepts but never answers yields TIMEOUT within the deadline") {
    mc::runtime::runtime rt(1);
    rt.start();
    auto& io = rt.context(0);  // the runtime's: no short-lived io_context (see closes_after_garbage)
    boost::asio::ip::tcp::acceptor acc(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    std::vector<boost::asio::ip::tcp::socket> held;
    std::atomic<bool> done{false};
    std::thread server([&] {
      while (!done) {
        boost::system::error_code ec;
        auto s = acc.accept(ec);
        if (!ec) held.push_back(std::move(s));
      }
    });
    engine a(rt, loopback_options());
    REQUIRE(a.start());
    remote_buffer d{"127.0.0.1:" + std::to_string(acc.local_endpoint().port()), 4096, 1 << 20, 42};
    std::vector<std::uint8_t> buf(1 << 20);
    auto t0 = std::chrono::steady_clock::now();
    auto r = rt.block_on(a.read(bytes(buf), d, 300ms));
    auto took = std::chrono::steady_clock::now() - t0;
    CHECK(mc::is(r.error(), mc::errc::timeout));
    CHECK(took < 2s);
    auto w = rt.block_on(a.write(cbytes(buf), d, 300ms));
    CHECK(mc::is(w.error(), mc::errc::timeout));
    done = true;
    boost::asio::ip::tcp::socket poke(io);
    boost::system::error_code ec;
    poke.connect(acc.local_endpoint(), ec);
    server.join();
    a.stop();
  }

  TEST_CASE("a peer that resets the connection yields TRANSFER_FAIL, and nobody listening too") {
    mc::runtime::runtime rt(1);
    rt.start();
    auto& io = rt.context(0);  // the runtime's: no short-lived io_context (see closes_after_garbage)
    boost::asio::ip::tcp::acceptor acc(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    auto port = acc.local_endpoint().port();
    std::atomic<bool> done{false};
    std::thread server([&] {
      boost::system::error_code ec;
      for (int i = 0; i < 8; ++i) {
        auto s = acc.accept(ec);
        if (ec || done.load()) break;
        s.set_option(boost::asio::socket_base::linger(true, 0), ec);
        std::uint8_t junk[48];
        s.read_some(boost::asio::buffer(junk), ec);
        s.close(ec);  // RST
      }
    });
    engine a(rt, loopback_options());
    REQUIRE(a.start());
    remote_buffer d{"127.0.0.1:" + std::to_string(port), 4096, 4096, 42};
    std::vector<std::uint8_t> buf(4096);
    auto r = rt.block_on(a.read(bytes(buf), d, 5s));
    CHECK(mc::is(r.error(), mc::errc::transfer_fail));
    // Wake the accepting thread with a connection instead of closing the
    // acceptor under it (an acceptor is not safe to close from another thread).
    done = true;
    {
      boost::asio::ip::tcp::socket poke(io);
      boost::system::error_code ec;
      poke.connect({boost::asio::ip::make_address("127.0.0.1"), port}, ec);
    }
    server.join();
    acc.close();
    auto r2 = rt.block_on(a.read(bytes(buf), d, 5s));
    CHECK(mc::is(r2.error(), mc::errc::transfer_fail));
    a.stop();
  }

  TEST_CASE("a malformed header closes the connection and a refused write's payload is drained") {
    two_engines t;
    std::vector<std::uint8_t> target(4096, 0x55);
    auto reg = t.b->register_memory(target.data(), target.size());
    REQUIRE(reg.has_value());
    auto ep = t.b->endpoint();
    auto port = static_cast<std::uint16_t>(std::stoi(ep.substr(ep.rfind(':') + 1)));
    auto closed = t.rt.block_on(mc::with_deadline(closes_after_garbage(port), 10s));
    CHECK_MESSAGE(closed.has_value(), closed.error().message());
    for (auto b : target) REQUIRE(b == 0x55);
  }

  TEST_CASE("unregistering a region while writes stream into it is safe") {
    auto o = loopback_options();
    o.slice_size = 64 * 1024;
    two_engines t(o);
    std::vector<std::uint8_t> target(16u << 20);
    auto reg = t.b->register_memory(target.data(), target.size());
    auto d = reg->describe();
    auto src = mc::test::random_bytes(target.size(), 8);
    std::atomic<int> started{0};
    auto writer = [](engine* e, std::span<const std::byte> s, remote_buffer d,
                     std::atomic<int>* started) -> mc::task<int> {
      int failures = 0;
      for (int i = 0; i < 50; ++i) {
        started->fetch_add(1);
        auto w = co_await e->write(s, d);
        if (!w) {
          if (!mc::is(w.error(), mc::errc::access_denied) && !mc::is(w.error(), mc::errc::transfer_fail)) co_return -1;
          ++failures;
        }
      }
      co_return failures;
    };
    std::thread w([&] { CHECK(t.rt.block_on(writer(t.a.get(), cbytes(src), d, &started), 0) > 0); });
    while (started.load() < 2) std::this_thread::yield();
    REQUIRE(t.b->unregister_memory(reg->token()));
    // From here on nothing may land in the buffer.
    std::memset(target.data(), 0x77, target.size());
    w.join();
    for (std::size_t i = 0; i < target.size(); i += 4096) REQUIRE(target[i] == 0x77);
    CHECK(std::all_of(target.begin(), target.end(), [](auto b) { return b == 0x77; }));
  }

  TEST_CASE("stop with transfers in flight fails them promptly instead of hanging") {
    auto t = std::make_unique<two_engines>();
    std::vector<std::uint8_t> target(32u << 20);
    auto reg = t->b->register_memory(target.data(), target.size());
    auto src = mc::test::random_bytes(target.size(), 9);
    std::atomic<int> started{0};
    mc::result<void> last;
    std::thread w([&] {
      auto loop = [](engine* e, std::span<const std::byte> s, remote_buffer d, std::atomic<int>* st,
                     mc::result<void>* last) -> mc::task<int> {
        for (;;) {
          st->fetch_add(1);
          *last = co_await e->write(s, d, 30s);
          if (!*last) co_return 0;
        }
      };
      t->rt.block_on(loop(t->a.get(), cbytes(src), reg->describe(), &started, &last), 1);
    });
    while (started.load() < 2) std::this_thread::yield();
    auto t0 = std::chrono::steady_clock::now();
    t->a->stop();
    w.join();
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    REQUIRE(last.has_error());
    CHECK((mc::is(last.error(), mc::errc::shutting_down) || mc::is(last.error(), mc::errc::transfer_fail)));
  }

  TEST_CASE("configuration errors are clear") {
    mc::runtime::runtime rt(1);
    rt.start();
    engine_options o;
    o.protocol = "rdma";
    CHECK_THROWS_WITH_AS(engine(rt, o), doctest::Contains("protocol 'rdma'"), std::invalid_argument);  // no device here
    engine_options s;
    s.slice_size = 1;
    CHECK_THROWS_AS(engine(rt, s), std::invalid_argument);
    engine a(rt, loopback_options());
    REQUIRE(a.start());
    auto o2 = loopback_options();
    auto ep = a.endpoint();
    o2.port = static_cast<std::uint16_t>(std::stoi(ep.substr(ep.rfind(':') + 1)));
    engine b(rt, o2);
    auto r = b.start();
    REQUIRE(r.has_error());
    CHECK(mc::is(r.error(), mc::errc::io_error));
    engine_options bad;
    bad.bind_host = "not-an-address";
    engine c(rt, bad);
    CHECK(mc::is(c.start().error(), mc::errc::invalid_params));
  }

  TEST_CASE("the advertised endpoint is the bound address, or a real interface for a wildcard") {
    mc::runtime::runtime rt(1);
    rt.start();
    engine a(rt, loopback_options());
    REQUIRE(a.start());
    CHECK(a.endpoint().rfind("127.0.0.1:", 0) == 0);
    engine_options w;
    w.bind_host = "0.0.0.0";
    w.advertise_host = "node7.example";
    engine b(rt, w);
    REQUIRE(b.start());
    CHECK(b.endpoint().rfind("node7.example:", 0) == 0);
  }
}

TEST_SUITE("transfer_same_host") {
  TEST_CASE("a target that does not tell its bound on live grants (an older version) gets windows of 64") {
    for (bool legacy : {true, false}) {
      CAPTURE(legacy);
      if (legacy) ::setenv("MC_TRANSFER_TEST_LEGACY_GRANTS", "1", 1);
      auto oa = loopback_options(transport_kind::same_host);
      oa.connections_per_peer = 1;  // the whole batch on one connection
      two_engines t(oa, loopback_options(transport_kind::same_host));
      ::unsetenv("MC_TRANSFER_TEST_LEGACY_GRANTS");
      // 150 small writes then 150 small reads: windows of up to 256 grants
      // (one per direction) against a target that tells its bound, of 64
      // against one that does not (which refuses the 65th live grant of a
      // connection).
      constexpr std::size_t n = 300, len = 4099;
      std::vector<std::uint8_t> remote(n * len + 1);
      auto fill = mc::test::random_bytes(remote.size(), 5);
      std::memcpy(remote.data(), fill.data(), fill.size());
      auto reg = t.b->register_memory(remote.data(), remote.size());
      REQUIRE(reg);
      std::vector<std::vector<std::uint8_t>> local(n);
      std::vector<request> reqs;
      for (std::size_t i = 0; i < n; ++i) {
        local[i] = mc::test::random_bytes(len, 600 + i);
        auto d = reg->describe(1 + i * len, len);
        if (i < n / 2)
          reqs.push_back(request::make_write(cbytes(local[i]), d));
        else
          reqs.push_back(request::make_read(bytes(local[i]), d));
      }
      auto res = t.rt.block_on(t.a->batch(std::move(reqs)));
      REQUIRE(res.size() == n);
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE_MESSAGE(res[i].has_value(), i, ": ", res[i].error().message());
        const auto* src = i < n / 2 ? remote.data() + 1 + i * len : fill.data() + 1 + i * len;
        CHECK(std::memcmp(local[i].data(), src, len) == 0);
      }
      CHECK(t.b->stats().served_rejects == 0);
      CHECK(t.a->stats().initiated[std::size_t(transport_kind::same_host)].errors == 0);
      // Pieces under one token go as runs (one grant per up to 64) only to
      // a target that tells it serves them.
      if (legacy)
        CHECK(t.b->stats().same_host_range_grants == 0);
      else
        CHECK(t.b->stats().same_host_range_grants >= n / 64);
    }
  }

  TEST_CASE("runs of pieces under one token: random sizes round-trip; a piece outside fails alone") {
    auto o = loopback_options(transport_kind::same_host);
    o.spread_bytes = 0;  // the batch as it is, one window after another
    o.connections_per_peer = 1;
    two_engines t(o, loopback_options(transport_kind::same_host));
    std::mt19937_64 rng(77);
    constexpr std::size_t n = 400;
    std::vector<std::size_t> off(n), len(n);
    std::size_t at = 3;
    for (std::size_t i = 0; i < n; ++i) {
      len[i] = 1 + rng() % 20000;
      off[i] = at;
      at += len[i] + rng() % 5;  // gaps of 0-4 bytes stay untouched
    }
    std::vector<std::uint8_t> remote(at + 11);
    auto fill = mc::test::random_bytes(remote.size(), 78);
    std::memcpy(remote.data(), fill.data(), fill.size());
    auto reg = t.b->register_memory(remote.data(), remote.size());
    REQUIRE(reg);
    // Pieces 37 and 300 (in two different runs) name a range past the
    // region's end under its token.
    auto bad = [](std::size_t i) { return i == 37 || i == 300; };
    for (bool write : {true, false}) {
      CAPTURE(write);
      std::vector<std::vector<std::uint8_t>> local(n);
      std::vector<request> reqs;
      for (std::size_t i = 0; i < n; ++i) {
        local[i] = mc::test::random_bytes(len[i], 1000 + i + (write ? 0 : n));
        auto d = reg->describe(off[i], len[i]);
        if (bad(i))
          d.address =
              static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(remote.data())) + remote.size() - len[i] / 2;
        reqs.push_back(write ? request::make_write(cbytes(local[i]), d) : request::make_read(bytes(local[i]), d));
      }
      const auto runs = t.b->stats().same_host_range_grants;
      auto res = t.rt.block_on(t.a->batch(std::move(reqs)));
      REQUIRE(res.size() == n);
      for (std::size_t i = 0; i < n; ++i) {
        CAPTURE(i);
        if (bad(i)) {
          REQUIRE_FALSE(res[i].has_value());
          CHECK(mc::is(res[i].error(), mc::errc::access_denied));
          continue;
        }
        REQUIRE_MESSAGE(res[i].has_value(), res[i].error().message());
        if (write) {
          CHECK(mc::test::checksum(remote.data() + off[i], len[i]) == mc::test::checksum(local[i].data(), len[i]));
          std::memcpy(fill.data() + off[i], local[i].data(), len[i]);
        } else {
          CHECK(mc::test::checksum(local[i].data(), len[i]) == mc::test::checksum(fill.data() + off[i], len[i]));
        }
      }
      CHECK(std::memcmp(remote.data(), fill.data(), remote.size()) == 0);  // gaps and the tail untouched
      CHECK(t.b->stats().same_host_range_grants - runs >= n / 64 - 2);
    }
  }

  // Both engines live in this process; forcing same_host makes the initiator
  // go through the control socket and process_vm_* against its own pid.
  TEST_CASE("same-host transfers survive a round trip at odd sizes") {
    auto o = loopback_options(transport_kind::same_host);
    o.spread_bytes = 0;  // one grant per request (a cut request takes one per part)
    two_engines t(o, loopback_options(transport_kind::same_host));
    std::uint64_t seed = 50;
    for (std::size_t n : {std::size_t(1), std::size_t(4095), std::size_t(1u << 20) + 1, std::size_t(17u << 20) + 3})
      round_trip(t, n, seed++);
    auto s = t.a->stats();
    CHECK(s.initiated[std::size_t(transport_kind::same_host)].write_ops == 4);
    CHECK(s.initiated[std::size_t(transport_kind::same_host)].errors == 0);
    CHECK(t.b->stats().served_write_ops == 4);
  }

  TEST_CASE("same-host grants are refused for a wrong token, a range past the end and an unregistered region") {
    two_engines t(loopback_options(transport_kind::same_host), loopback_options(transport_kind::same_host));
    std::vector<std::uint8_t> target(8192, 0x5A);
    auto reg = t.b->register_memory(target.data(), 4096);
    REQUIRE(reg);
    std::vector<std::uint8_t> src(4097, 0x01);
    auto bad = reg->describe();
    bad.token ^= 2;
    CHECK(mc::is(t.rt.block_on(t.a->write(cbytes(src).first(4096), bad)).error(), mc::errc::access_denied));
    auto past = reg->describe();
    past.length = 4097;
    CHECK(mc::is(t.rt.block_on(t.a->write(cbytes(src), past)).error(), mc::errc::access_denied));
    auto d = reg->describe();
    reg->reset();
    CHECK(mc::is(t.rt.block_on(t.a->write(cbytes(src).first(4096), d)).error(), mc::errc::access_denied));
    for (auto b : target) REQUIRE(b == 0x5A);
    CHECK(t.b->stats().served_rejects == 3);
  }

  TEST_CASE("unregistering during same-host transfers returns at once and refuses every later grant") {
    two_engines t(loopback_options(transport_kind::same_host), loopback_options(transport_kind::same_host));
    std::vector<std::uint8_t> target(32u << 20);
    auto reg = t.b->register_memory(target.data(), target.size());
    auto src = mc::test::random_bytes(target.size(), 77);
    std::atomic<int> started{0};
    std::atomic<bool> revoked{false};
    std::atomic<int> bad{0};
    std::thread w([&] {
      auto loop = [](engine* e, std::span<const std::byte> s, remote_buffer d, std::atomic<int>* st,
                     std::atomic<bool>* revoked, std::atomic<int>* bad) -> mc::task<int> {
        for (int i = 0; i < 200; ++i) {
          st->fetch_add(1);
          const bool after = revoked->load();
          auto r = co_await e->write(s, d);
          if (r && after) bad->fetch_add(1);  // a grant after the revocation
          if (!r) {
            if (!mc::is(r.error(), mc::errc::access_denied)) bad->fetch_add(1);
            co_return 0;
          }
        }
        co_return 0;
      };
      t.rt.block_on(loop(t.a.get(), cbytes(src), reg->describe(), &started, &revoked, &bad), 1);
    });
    while (started.load() < 3) std::this_thread::yield();
    const auto t0 = std::chrono::steady_clock::now();
    reg->reset();  // never waits for the peer's grant
    revoked = true;
    CHECK(std::chrono::steady_clock::now() - t0 < 100ms);
    w.join();
    CHECK(bad.load() == 0);
    // Nobody copies any more: the region's memory is ours again.
    std::memset(target.data(), 0x66, target.size());
    CHECK(std::all_of(target.begin(), target.end(), [](auto b) { return b == 0x66; }));
  }

  TEST_CASE("forcing same-host towards a peer that is not on this host is UNSUPPORTED") {
    mc::runtime::runtime rt(1);
    rt.start();
    engine a(rt, loopback_options(transport_kind::same_host));
    REQUIRE(a.start());
    std::vector<std::uint8_t> buf(16);
    remote_buffer d{"192.0.2.1:9", 4096, 16, 1};  // TEST-NET-1: nobody here
    CHECK(mc::is(rt.block_on(a.read(bytes(buf), d, 2s)).error(), mc::errc::unsupported));
  }
}

TEST_SUITE("transfer_engine_failures") {
  TEST_CASE("pooled connections to a peer that restarted on the same endpoint are replaced transparently") {
    // Each pooled connection's first use after the restart fails: as a
    // single request, or as a batch of small ones (a same-host window).
    for (auto force : {transport_kind::tcp, transport_kind::same_host})
      for (bool batch_first : {false, true}) {
        CAPTURE(to_string(force));
        CAPTURE(batch_first);
        mc::runtime::runtime rt(1);
        rt.start();
        engine a(rt, loopback_options(force));
        REQUIRE(a.start());
        auto b = std::make_unique<engine>(rt, loopback_options(force));
        REQUIRE(b->start());
        auto ep = b->endpoint();
        std::vector<std::uint8_t> target(1 << 16);
        auto src = mc::test::random_bytes(target.size(), 11);
        // Writes of `src` to `target` in pieces of odd sizes, each checked.
        auto in_pieces = [&](const region& reg) {
          std::vector<request> reqs;
          for (std::size_t off = 0, i = 0; off < src.size(); off += 1021 + i % 7, ++i) {
            const auto n = std::min<std::size_t>(1021 + i % 7, src.size() - off);
            reqs.push_back(request::make_write(cbytes(src).subspan(off, n), reg.describe(off, n)));
          }
          const auto count = reqs.size();
          auto rs = rt.block_on(a.batch(std::move(reqs)));
          REQUIRE(rs.size() == count);
          for (auto& r : rs) REQUIRE_MESSAGE(r.has_value(), r.error().message());
          CHECK(std::memcmp(target.data(), src.data(), src.size()) == 0);
        };
        auto whole = [&](const region& reg) {
          auto w = rt.block_on(a.write(cbytes(src), reg.describe()));
          REQUIRE_MESSAGE(w.has_value(), w.error().message());
          CHECK(std::memcmp(target.data(), src.data(), src.size()) == 0);
        };
        {
          auto reg = b->register_memory(target.data(), target.size());
          REQUIRE(reg);
          whole(*reg);
          in_pieces(*reg);  // several connections pooled
        }
        b->stop();
        b.reset();
        auto o = loopback_options(force);
        o.port = static_cast<std::uint16_t>(std::stoi(ep.substr(ep.rfind(':') + 1)));
        engine b2(rt, o);
        REQUIRE(b2.start());
        REQUIRE(b2.endpoint() == ep);
        std::fill(target.begin(), target.end(), 0);
        auto reg = b2.register_memory(target.data(), target.size());
        REQUIRE(reg);
        src = mc::test::random_bytes(target.size(), batch_first ? 12 : 13);
        batch_first ? in_pieces(*reg) : whole(*reg);
        src = mc::test::random_bytes(target.size(), batch_first ? 14 : 15);
        batch_first ? whole(*reg) : in_pieces(*reg);
      }
  }
}

TEST_SUITE("transfer_same_host") {
  TEST_CASE("when the kernel refuses cross-memory attach the engine falls back to TCP") {
    ::setenv("MC_TRANSFER_TEST_REFUSE_CMA", "1", 1);
    auto oa = loopback_options(std::nullopt);
    oa.enable_in_process = false;  // so that same-host is the first choice
    two_engines t(oa, loopback_options(std::nullopt));
    ::unsetenv("MC_TRANSFER_TEST_REFUSE_CMA");
    round_trip(t, (1u << 20) + 7, 90);
    round_trip(t, 333, 91);
    auto s = t.a->stats();
    CHECK(s.same_host_fallbacks >= 1);
    CHECK(s.initiated[std::size_t(transport_kind::tcp)].write_ops == 2);
    CHECK(s.initiated[std::size_t(transport_kind::same_host)].write_ops == 0);
    CHECK(s.initiated[std::size_t(transport_kind::tcp)].errors == 0);
  }
}
