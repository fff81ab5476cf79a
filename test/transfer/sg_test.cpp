// Scatter-gather requests of the TCP transport (wire.hpp: write_sg_req /
// read_sg_req): the pieces of scattered values travel many to a request,
// their bytes land exactly where each piece says, a refused piece fails only
// its own item, and the target refuses or closes on hostile tables.
#include "raw_conn.hpp"
#include "transfer_fixture.hpp"
#include "wire.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <thread>

using namespace mc::transfer;
using mc::transfer::test::answer;
using mc::transfer::test::bytes;
using mc::transfer::test::cbytes;
using mc::transfer::test::loopback_options;
using mc::transfer::test::raw_conn;
using mc::transfer::test::two_engines;
namespace wire = mc::transfer::detail;

namespace {

/// A scatter-gather request: header (count in `address`, token 0 unless
/// `header_token`), table, then `payload`.
std::vector<std::byte> sg_request(wire::wire_op op, std::uint64_t id, const std::vector<wire::sg_segment>& segs,
                                  std::uint64_t total, std::span<const std::byte> payload = {}, std::uint64_t count = 0,
                                  std::uint64_t header_token = 0) {
  wire::header h;
  h.op = op;
  h.request_id = id;
  h.address = count ? count : segs.size();
  h.length = total;
  h.token = header_token;
  wire::header_bytes hb;
  wire::encode(h, hb);
  std::vector<std::byte> out(hb.begin(), hb.end());
  for (auto& s : segs) {
    std::array<std::byte, wire::sg_entry_size> e;
    wire::encode_sg_entry(s, e.data());
    out.insert(out.end(), e.begin(), e.end());
  }
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

}  // namespace

TEST_SUITE("transfer_sg") {
  TEST_CASE("pieces of random sizes in several regions, in any order, travel many to a request and land exactly") {
    two_engines t;
    std::mt19937_64 rng(4242);
    // Three target regions with guard bytes between them; pieces of 1 B ..
    // 96 KiB (and a few above the 1 MiB slice, which go alone) at shuffled
    // places in them, gathered from / scattered into shuffled places of one
    // local buffer.
    constexpr std::size_t region = 24u << 20;
    std::vector<std::uint8_t> target(3 * region + 3 * 4096, 0xEE);
    std::vector<mc::transfer::region> regs;
    for (int r = 0; r < 3; ++r) {
      auto g = t.b->register_memory(target.data() + r * (region + 4096), region);
      REQUIRE(g);
      regs.push_back(std::move(*g));
    }
    std::vector<std::size_t> len;
    std::size_t total = 0;
    while (total < 40u << 20) {
      std::size_t n = rng() % 50 == 0 ? (1u << 20) + rng() % (1u << 20) : 1 + rng() % (96u << 10);
      if (rng() % 7 == 0) n = 1 + rng() % 64;
      len.push_back(n);
      total += n;
    }
    const std::size_t pieces = len.size();
    // Remote places: pieces laid out in each region in a shuffled order.
    std::vector<std::size_t> order(pieces);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<std::pair<int, std::size_t>> where(pieces);  // region, offset
    std::array<std::size_t, 3> used{};
    for (auto i : order) {
      int r = static_cast<int>(rng() % 3);
      while (used[static_cast<std::size_t>(r)] + len[i] > region) r = (r + 1) % 3;
      where[i] = {r, used[static_cast<std::size_t>(r)]};
      used[static_cast<std::size_t>(r)] += len[i];
    }
    // Local places: another shuffle of one buffer.
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<std::size_t> local_off(pieces);
    std::size_t at = 0;
    for (auto i : order) {
      local_off[i] = at;
      at += len[i];
    }
    auto src = mc::test::random_bytes(total, 77);
    std::vector<request> writes, reads;
    std::vector<std::uint8_t> back(total, 0);
    for (std::size_t i = 0; i < pieces; ++i) {
      auto d = regs[static_cast<std::size_t>(where[i].first)].describe(where[i].second, len[i]);
      writes.push_back(request::make_write(cbytes(src).subspan(local_off[i], len[i]), d));
      reads.push_back(request::make_read(bytes(back).subspan(local_off[i], len[i]), d));
    }
    const auto before = t.b->stats();
    auto wr = t.rt.block_on(t.a->batch(writes));
    REQUIRE(wr.size() == pieces);
    for (auto& r : wr) REQUIRE(r.has_value());
    for (std::size_t i = 0; i < pieces; ++i) {
      const auto* p = target.data() + static_cast<std::size_t>(where[i].first) * (region + 4096) + where[i].second;
      REQUIRE(std::memcmp(p, src.data() + local_off[i], len[i]) == 0);
    }
    for (int r = 0; r < 3; ++r)  // the guard bytes after each region
      for (std::size_t k = 0; k < 4096; ++k) REQUIRE(target[r * (region + 4096) + region + k] == 0xEE);
    auto rr = t.rt.block_on(t.a->batch(reads));
    for (auto& r : rr) REQUIRE(r.has_value());
    CHECK(mc::test::checksum(back.data(), total) == mc::test::checksum(src.data(), total));
    const auto after = t.b->stats();
    // Many pieces per request: far fewer requests served than pieces moved.
    CHECK(after.served_write_ops - before.served_write_ops < pieces / 4);
    CHECK(after.served_read_ops - before.served_read_ops < pieces / 4);
    CHECK(after.served_write_bytes - before.served_write_bytes == total);
    CHECK(after.served_read_bytes - before.served_read_bytes == total);
    CHECK(after.served_rejects == before.served_rejects);
  }

  TEST_CASE("a refused piece inside a scatter-gather request fails only its own item") {
    two_engines t;
    std::vector<std::uint8_t> target(1u << 20, 0x11);
    auto reg = t.b->register_memory(target.data(), 512u << 10);  // the upper half is not registered
    REQUIRE(reg);
    auto src = mc::test::random_bytes(200 * 1000, 5);
    std::vector<std::uint8_t> back(200 * 1000, 0);
    std::vector<request> writes, reads;
    std::vector<bool> bad;
    for (std::size_t i = 0; i < 200; ++i) {
      auto d = reg->describe(i * 2000, 1000);  // every other 1000 bytes
      bool refused = false;
      if (i % 37 == 5) {
        d.token ^= 0x40;  // wrong token
        refused = true;
      } else if (i % 41 == 7) {
        d.address = reinterpret_cast<std::uintptr_t>(target.data()) + (512u << 10) - 500;  // past the end
        refused = true;
      }
      writes.push_back(request::make_write(cbytes(src).subspan(i * 1000, 1000), d));
      reads.push_back(request::make_read(bytes(back).subspan(i * 1000, 1000), d));
      bad.push_back(refused);
    }
    auto wr = t.rt.block_on(t.a->batch(writes));
    auto rr = t.rt.block_on(t.a->batch(reads));
    for (std::size_t i = 0; i < 200; ++i) {
      CAPTURE(i);
      if (bad[i]) {
        CHECK(mc::is(wr[i].error(), mc::errc::access_denied));
        CHECK(mc::is(rr[i].error(), mc::errc::access_denied));
        CHECK(std::all_of(back.begin() + static_cast<long>(i * 1000), back.begin() + static_cast<long>(i * 1000 + 1000),
                          [](auto b) { return b == 0; }));
        continue;
      }
      REQUIRE(wr[i].has_value());
      REQUIRE(rr[i].has_value());
      CHECK(std::memcmp(target.data() + i * 2000, src.data() + i * 1000, 1000) == 0);
      CHECK(std::memcmp(back.data() + i * 1000, src.data() + i * 1000, 1000) == 0);
      CHECK(std::all_of(target.begin() + static_cast<long>(i * 2000 + 1000),
                        target.begin() + static_cast<long>(i * 2000 + 2000), [](auto b) { return b == 0x11; }));
    }
    CHECK(std::all_of(target.begin() + (512 << 10), target.end(), [](auto b) { return b == 0x11; }));
  }

  TEST_CASE("hostile scatter-gather tables: closed when malformed, refused when not granted, served when right") {
    two_engines t;
    std::vector<std::uint8_t> target(64u << 10, 0x22);
    auto reg = t.b->register_memory(target.data(), 32u << 10);
    REQUIRE(reg);
    auto ro = t.b->register_memory(target.data() + (40u << 10), 8u << 10, region_access::remote_read);
    REQUIRE(ro);
    const auto base = reinterpret_cast<std::uintptr_t>(target.data());
    const auto tok = reg->token();
    const auto ep = t.b->endpoint();
    using op = wire::wire_op;
    auto pay = mc::test::random_bytes(300, 9);
    auto payload = std::as_bytes(std::span(pay));
    std::vector<wire::sg_segment> good = {{base + 100, 100, tok}, {base + 5000, 200, tok}};

    SUBCASE("malformed: the connection is closed and nothing is written") {
      std::vector<std::vector<std::byte>> cases;
      cases.push_back(sg_request(op::write_sg_req, 1, good, 300, payload, /*count=*/65));        // too many
      cases.push_back(sg_request(op::write_sg_req, 1, {}, 300, payload, /*count=*/0));           // none
      cases.push_back(sg_request(op::write_sg_req, 1, good, 299, payload));                      // sum short
      cases.push_back(sg_request(op::write_sg_req, 1, good, 301, payload));                      // sum long
      cases.push_back(sg_request(op::write_sg_req, 1, good, 300, payload, 0, /*token=*/tok));    // header token
      cases.push_back(sg_request(op::read_sg_req, 1, {{base, 0, tok}, {base, 300, tok}}, 300));  // empty segment
      cases.push_back(sg_request(op::read_sg_req, 1, {{~std::uint64_t{0} - 10, 100, tok}, {base, 200, tok}}, 300));
      cases.push_back(sg_request(op::read_sg_req, 1, {{base, ~std::uint64_t{0}, tok}, {base, 301, tok}}, 300));
      for (auto& c : cases) {
        raw_conn rc(ep);
        rc.send(c);
        CHECK(rc.closed_by_peer());
      }
      CHECK(std::all_of(target.begin(), target.end(), [](auto b) { return b == 0x22; }));
    }

    SUBCASE("not granted: one refusal for the request, its payload drained, the connection serves on") {
      raw_conn rc(ep);
      const std::vector<std::vector<wire::sg_segment>> refused = {
          {{base + 100, 100, tok}, {base + 5000, 200, tok ^ 1}},             // wrong token
          {{base + 100, 100, tok}, {base + (32u << 10) - 100, 200, tok}},    // past the end
          {{base + 100, 100, tok}, {base + (40u << 10), 200, ro->token()}},  // read-only region
      };
      std::uint64_t id = 10;
      for (auto& segs : refused) {
        rc.send(sg_request(op::write_sg_req, id, segs, 300, payload));
        auto a = answer(rc);
        REQUIRE(a);
        CHECK(a->op == op::write_resp);
        CHECK(a->request_id == id);
        CHECK(a->status == static_cast<std::int32_t>(mc::errc::access_denied));
        CHECK(a->length == 0);
        ++id;
      }
      CHECK(std::all_of(target.begin(), target.end(), [](auto b) { return b == 0x22; }));
      // A read whose second piece names an unknown token is refused whole.
      rc.send(sg_request(op::read_sg_req, id, {{base + (40u << 10), 10, ro->token()}, {base, 10, 12345}}, 20));
      auto a = answer(rc);
      REQUIRE(a);
      CHECK(a->op == op::read_resp);
      CHECK(a->status == static_cast<std::int32_t>(mc::errc::access_denied));
      ++id;
      // Then a good write and a read of it back, on the same connection.
      rc.send(sg_request(op::write_sg_req, id, good, 300, payload));
      a = answer(rc);
      REQUIRE(a);
      CHECK(a->status == 0);
      CHECK(a->request_id == id);
      CHECK(std::memcmp(target.data() + 100, pay.data(), 100) == 0);
      CHECK(std::memcmp(target.data() + 5000, pay.data() + 100, 200) == 0);
      CHECK(target[99] == 0x22);
      CHECK(target[200] == 0x22);
      CHECK(target[5200] == 0x22);
      ++id;
      // Reversed order and overlapping read segments come back in table order.
      std::vector<wire::sg_segment> rev = {{base + 5000, 200, tok}, {base + 100, 100, tok}, {base + 150, 10, tok}};
      rc.send(sg_request(op::read_sg_req, id, rev, 310));
      a = answer(rc);
      REQUIRE(a);
      CHECK(a->op == op::read_resp);
      CHECK(a->status == 0);
      REQUIRE(a->length == 310);
      auto got = rc.recv(310);
      REQUIRE(got.size() == 310);
      CHECK(std::memcmp(got.data(), pay.data() + 100, 200) == 0);
      CHECK(std::memcmp(got.data() + 200, pay.data(), 100) == 0);
      CHECK(std::memcmp(got.data() + 300, pay.data() + 50, 10) == 0);
    }
  }

  TEST_CASE("unregistering a region while scattered writes stream into it: nothing lands afterwards") {
    auto o = loopback_options();
    two_engines t(o);
    std::vector<std::uint8_t> target(8u << 20);
    auto reg = t.b->register_memory(target.data(), target.size());
    REQUIRE(reg);
    auto src = mc::test::random_bytes(target.size(), 8);
    // 256 pieces of 32 KiB, in reverse order: every request is scatter-gather.
    std::vector<request> reqs;
    const std::size_t piece = 32u << 10;
    for (std::size_t i = 0; i < target.size() / piece; ++i) {
      const std::size_t at = target.size() - (i + 1) * piece;
      reqs.push_back(request::make_write(cbytes(src).subspan(i * piece, piece), reg->describe(at, piece)));
    }
    std::atomic<int> started{0};
    auto writer = [](engine* e, std::vector<request> r, std::atomic<int>* started) -> mc::task<int> {
      int failures = 0;
      for (int i = 0; i < 40; ++i) {
        started->fetch_add(1);
        auto rs = co_await e->batch(r);
        for (auto& x : rs)
          if (!x) {
            if (!mc::is(x.error(), mc::errc::access_denied) && !mc::is(x.error(), mc::errc::transfer_fail))
              co_return -1;
            ++failures;
          }
      }
      co_return failures;
    };
    std::thread w([&] { CHECK(t.rt.block_on(writer(t.a.get(), reqs, &started), 0) > 0); });
    while (started.load() < 2) std::this_thread::yield();
    REQUIRE(t.b->unregister_memory(reg->token()));
    std::memset(target.data(), 0x77, target.size());
    w.join();
    CHECK(std::all_of(target.begin(), target.end(), [](auto b) { return b == 0x77; }));
  }
  TEST_CASE("scattered writes over two regions, one unregistered midway: its pieces fail, the other's land") {
    two_engines t;
    const std::size_t piece = 16u << 10, pieces = 128;  // per region
    std::vector<std::uint8_t> a(pieces * piece), b(pieces * piece);
    auto ra = t.b->register_memory(a.data(), a.size());
    auto rb = t.b->register_memory(b.data(), b.size());
    REQUIRE(ra);
    REQUIRE(rb);
    auto src = mc::test::random_bytes(2 * pieces * piece, 31);
    // Pieces alternate between the regions: every request names both.
    std::vector<request> reqs;
    for (std::size_t i = 0; i < 2 * pieces; ++i) {
      auto& r = i % 2 ? *rb : *ra;
      reqs.push_back(request::make_write(cbytes(src).subspan(i * piece, piece), r.describe((i / 2) * piece, piece)));
    }
    std::atomic<int> started{0};
    auto writer = [](engine* e, std::vector<request> r, std::atomic<int>* started) -> mc::task<int> {
      int b_failures = 0;
      for (int i = 0; i < 40; ++i) {
        started->fetch_add(1);
        auto rs = co_await e->batch(r);
        for (std::size_t k = 0; k < rs.size(); ++k)
          if (!rs[k]) {
            if (k % 2 == 1)
              ++b_failures;  // region b stays registered
            else if (!mc::is(rs[k].error(), mc::errc::access_denied) && !mc::is(rs[k].error(), mc::errc::transfer_fail))
              co_return -1;
          }
      }
      co_return b_failures;
    };
    int result = -2;
    std::thread w([&] { result = t.rt.block_on(writer(t.a.get(), reqs, &started), 0); });
    while (started.load() < 2) std::this_thread::yield();
    REQUIRE(t.b->unregister_memory(ra->token()));
    std::memset(a.data(), 0x77, a.size());
    w.join();
    CHECK(result == 0);  // every piece of b landed, every time
    CHECK(std::all_of(a.begin(), a.end(), [](auto x) { return x == 0x77; }));
    for (std::size_t i = 0; i < pieces; ++i)
      REQUIRE(std::memcmp(b.data() + i * piece, src.data() + (2 * i + 1) * piece, piece) == 0);
  }

  TEST_CASE("a READ pipelined before a WRITE of the same bytes carries the bytes from before the write") {
    // Plain and scatter-gather: the target queues READ answers and reads
    // their bytes when it sends them; a later WRITE must not overtake them.
    two_engines t;
    std::vector<std::uint8_t> target(4096, 0x22);
    auto reg = t.b->register_memory(target.data(), target.size());
    REQUIRE(reg);
    const auto base = reinterpret_cast<std::uintptr_t>(target.data());
    raw_conn rc(t.b->endpoint());
    std::vector<std::byte> out;
    auto add = [&](wire::wire_op op, std::uint64_t id, std::uint64_t len) {
      wire::header h;
      h.op = op;
      h.request_id = id;
      h.address = base;
      h.length = len;
      h.token = reg->token();
      wire::header_bytes hb;
      wire::encode(h, hb);
      out.insert(out.end(), hb.begin(), hb.end());
    };
    add(wire::wire_op::read_req, 1, 16);
    add(wire::wire_op::write_req, 2, 16);
    for (int i = 0; i < 16; ++i) out.push_back(std::byte{0x99});
    const std::vector<wire::sg_segment> segs = {{base + 100, 8, reg->token()}, {base + 50, 8, reg->token()}};
    auto r = sg_request(wire::wire_op::read_sg_req, 3, segs, 16);
    out.insert(out.end(), r.begin(), r.end());
    std::vector<std::byte> pay(16, std::byte{0x55});
    auto w = sg_request(wire::wire_op::write_sg_req, 4, segs, 16, pay);
    out.insert(out.end(), w.begin(), w.end());
    rc.send(out);  // one send: the target receives all four requests at once
    for (std::uint64_t id = 1; id <= 4; ++id) {
      auto a = answer(rc);
      REQUIRE(a);
      CHECK(a->request_id == id);
      CHECK(a->status == 0);
      if (id % 2 == 1) {
        auto got = rc.recv(16);
        REQUIRE(got.size() == 16);
        CHECK(std::all_of(got.begin(), got.end(), [](auto b) { return b == std::byte{0x22}; }));
      }
    }
    CHECK(target[0] == 0x99);
    CHECK(target[100] == 0x55);
    CHECK(target[50] == 0x55);
  }
}
