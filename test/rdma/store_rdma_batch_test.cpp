// The inference data path over RDMA verbs (Soft-RoCE in the VM; skipped
// elsewhere), scaled down for emulated RDMA (15-50 MB/s): batches grouped by
// owner, scatter-gather values, inline small values beside transferred ones,
// transfers forced onto RDMA (transfer_transport = rdma).
#include "mc/store/client.hpp"
#include "store_fixture.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

using mc::test::bytes_of;
using mc::test::cluster;
using mc::test::random_bytes;
using mc::test::writable;

namespace {

const int skip_without_device = [] {
  if (!std::getenv("RXE_VM_DEV")) {
    std::puts("rdma store batch tests: RXE_VM_DEV is unset (not inside the Soft-RoCE VM): skipped");
    std::fflush(stdout);
    std::_Exit(77);
  }
  return 0;
}();

void rdma_node(mc::store::client_options& o) {
  o.protocol = "rdma";
  o.device_names = std::getenv("RXE_VM_DEV");
  o.device_list = {o.device_names};
  o.transfer_transport = "rdma";
  o.rpc_timeout = std::chrono::seconds(30);
}

std::uint64_t rdma_bytes(mc::store::client& c) {
  auto s = c.engine().stats().initiated[static_cast<std::size_t>(mc::transfer::transport_kind::rdma)];
  return s.read_bytes + s.write_bytes;
}

using mut_pieces = std::vector<std::span<std::byte>>;

}  // namespace

TEST_SUITE("store rdma batch") {
  TEST_CASE("batch put and get over RDMA, into registered memory and scattered into pieces, byte-exact") {
    cluster cl;
    auto& a = cl.add("a", {}, "rdma", rdma_node);
    auto& b = cl.add("b", {}, "rdma", rdma_node);

    // SGLang shape, scaled: 16 keys x ~256 KiB, put remote to B, read back
    // into one registered buffer.
    const std::size_t n = 16, size = (256 << 10) + 3;
    std::vector<std::uint8_t> mem(n * size);
    auto reg = a.register_buffer(writable(mem));
    REQUIRE(reg.has_value());
    std::vector<std::string> keys;
    std::vector<std::vector<std::uint8_t>> vals;
    std::vector<std::span<const std::byte>> srcs;
    for (std::size_t i = 0; i < n; ++i) {
      keys.push_back(mc::test::numbered("sg/", i));
      vals.push_back(random_bytes(size, 10 + i));
    }
    for (auto& v : vals) srcs.push_back(bytes_of(v));
    mc::store::put_options remote;
    remote.where = mc::store::placement::remote;
    remote.target = b.rpc_endpoint();
    auto before = rdma_bytes(b);  // the owner initiates: it READs the puts and WRITEs the gets
    auto put = cl.on(0, a.batch_put(keys, srcs, remote));
    for (auto& r : put) REQUIRE(r.has_value());
    std::vector<std::span<std::byte>> dst;
    for (std::size_t i = 0; i < n; ++i) dst.emplace_back(reinterpret_cast<std::byte*>(mem.data() + i * size), size);
    auto rpcs = a.stats().batch_rpcs;
    auto got = cl.on(0, a.batch_get(keys, dst));
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE_MESSAGE(got[i].has_value(), keys[i] << ": " << got[i].error().message());
      CHECK(mc::test::checksum(mem.data() + i * size, size) == mc::test::checksum(vals[i].data(), size));
    }
    CHECK(a.stats().batch_rpcs - rpcs == 1);        // one owner, one RPC
    CHECK(rdma_bytes(b) >= before + 2 * n * size);  // both directions went over RDMA

    // Scattered into strided pieces of the registered buffer, gaps between
    // them: one derived token for the key (a scatter registration), each
    // piece's range validated by the owner with us (rdma_check) before its
    // WRITE; nothing lands in the gaps.
    std::fill(mem.begin(), mem.end(), std::uint8_t{0xEE});
    const auto derived0 = a.engine().stats().derived_registrations;
    mut_pieces strided;
    for (std::size_t p = 0, at = 0; at < size; ++p) {
      const auto len = std::min<std::size_t>(size - at, 8192 + p * 3);
      strided.emplace_back(reinterpret_cast<std::byte*>(mem.data()) + p * 20000, len);
      at += len;
    }
    REQUIRE(strided.size() * 20000 < mem.size());
    auto sg = cl.on(0, a.batch_get_parts({keys[0]}, {strided}));
    REQUIRE_MESSAGE(sg[0].has_value(), sg[0].error().message());
    std::size_t at = 0, outside = 0;
    for (std::size_t p = 0; p < strided.size(); ++p) {
      CHECK(std::memcmp(strided[p].data(), vals[0].data() + at, strided[p].size()) == 0);
      at += strided[p].size();
      for (std::size_t k = p * 20000 + strided[p].size(); k < (p + 1) * 20000; ++k) outside += mem[k] != 0xEE;
    }
    CHECK(outside == 0);
    CHECK(a.engine().stats().derived_registrations == derived0 + 1);

    // vLLM shape, scaled: 4 keys, each gathered from / scattered into 16
    // pieces of ~8 KiB, plus two small values answered inline, to one owner.
    std::vector<std::string> k2;
    std::vector<std::vector<std::uint8_t>> v2;
    for (std::size_t i = 0; i < 4; ++i) {
      k2.push_back(mc::test::numbered("vl/", i));
      v2.push_back(random_bytes(16 * 8192 + 5, 50 + i));
      std::vector<std::span<const std::byte>> pieces;
      for (std::size_t p = 0; p < 17; ++p) {
        auto off = p * 8192;
        pieces.emplace_back(reinterpret_cast<const std::byte*>(v2.back().data()) + off,
                            std::min<std::size_t>(8192, v2.back().size() - off));
      }
      REQUIRE(cl.on(1, b.put_parts(k2.back(), pieces)));
    }
    for (std::size_t i = 0; i < 2; ++i) {
      k2.push_back(mc::test::numbered("small/", i));
      v2.push_back(random_bytes(4096 + i, 80 + i));
      REQUIRE(cl.on(1, b.put(k2.back(), bytes_of(v2.back()))));
    }
    std::vector<std::vector<std::uint8_t>> layer(17, std::vector<std::uint8_t>(4 * 8192));  // per-layer buffers
    std::vector<std::vector<std::uint8_t>> small_out(2, std::vector<std::uint8_t>(4097));
    std::vector<mut_pieces> pieces;
    for (std::size_t i = 0; i < 4; ++i) {
      mut_pieces ps;
      for (std::size_t p = 0; p < 17; ++p)
        ps.emplace_back(reinterpret_cast<std::byte*>(layer[p].data()) + i * 8192, p < 16 ? 8192 : 5);
      pieces.push_back(std::move(ps));
    }
    for (auto& s : small_out) pieces.push_back({writable(s)});
    auto stats0 = a.stats();
    auto r = cl.on(0, a.batch_get_parts(k2, pieces));
    auto stats1 = a.stats();
    for (std::size_t i = 0; i < k2.size(); ++i) REQUIRE_MESSAGE(r[i].has_value(), k2[i]);
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t p = 0; p < 17; ++p) {
        auto len = p < 16 ? std::size_t{8192} : std::size_t{5};
        CHECK(std::equal(v2[i].begin() + static_cast<std::ptrdiff_t>(p * 8192),
                         v2[i].begin() + static_cast<std::ptrdiff_t>(p * 8192 + len),
                         layer[p].begin() + static_cast<std::ptrdiff_t>(i * 8192)));
      }
    for (std::size_t i = 0; i < 2; ++i) CHECK(std::equal(v2[4 + i].begin(), v2[4 + i].end(), small_out[i].begin()));
    CHECK(stats1.batch_rpcs - stats0.batch_rpcs == 1);  // inline and transferred: one round trip
    CHECK(stats1.inline_reads - stats0.inline_reads == 2);
  }

  TEST_CASE("gets and puts of unregistered memory go through the bounce arena: no ibv_reg_mr per call") {
    cluster cl;
    auto& a = cl.add("a", {}, "rdma", rdma_node);
    auto& b = cl.add("b", {}, "rdma", rdma_node);
    const std::size_t n = 6, size = (700 << 10) + 11;  // several 1 MiB slots in all, not slot multiples
    std::vector<std::string> keys;
    std::vector<std::vector<std::uint8_t>> vals, outs;
    std::vector<std::span<const std::byte>> srcs;
    std::vector<std::span<std::byte>> dsts;
    for (std::size_t i = 0; i < n; ++i) {
      keys.push_back(mc::test::numbered("bn/", i));
      vals.push_back(random_bytes(size + i, 200 + i));
      outs.emplace_back(size + i);
    }
    for (auto& v : vals) srcs.push_back(bytes_of(v));
    for (auto& o : outs) dsts.push_back(writable(o));
    auto mrs0 = a.engine().stats().rdma_memory_registrations;
    mc::store::put_options remote;
    remote.where = mc::store::placement::remote;  // the master's route: its transfer endpoint is known
    auto put = cl.on(0, a.batch_put(keys, srcs, remote));
    for (auto& r : put) REQUIRE(r.has_value());
    auto got = cl.on(0, a.batch_get(keys, dsts));
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE_MESSAGE(got[i].has_value(), keys[i]);
      CHECK(outs[i] == vals[i]);
    }
    CHECK(a.engine().stats().rdma_memory_registrations == mrs0);  // the arena was registered once, at start
    (void)b;
  }
}
