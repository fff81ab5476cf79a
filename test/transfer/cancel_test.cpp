// Cancellation on the TCP data path: a transfer cut short mid-payload (by
// its deadline) leaves nothing behind on the pooled connection; the next
// transfer to the same peer is byte-exact, and nothing throws.
#include "transfer_fixture.hpp"

#include <chrono>

using namespace std::chrono_literals;
using namespace mc::transfer;
using mc::transfer::test::bytes;
using mc::transfer::test::cbytes;
using mc::transfer::test::loopback_options;

namespace {

/// One connection per peer and one slice per request: a transfer cut short
/// leaves its only connection mid-payload, the next one must not reuse it.
engine_options one_connection() {
  auto o = loopback_options(transport_kind::tcp);
  o.connections_per_peer = 1;
  o.slice_size = 64u << 20;
  return o;
}

}  // namespace

TEST_SUITE("transfer_cancel") {
  TEST_CASE("a TCP transfer cancelled mid-payload leaves the next transfer to that peer byte-exact") {
    mc::transfer::test::two_engines t(one_connection(), one_connection());
    const std::size_t big = (48u << 20) + 7;
    auto owner = mc::test::random_bytes(big, 11);
    auto reg = t.b->register_memory(owner.data(), owner.size());
    REQUIRE(reg);
    std::vector<std::uint8_t> sink(big);
    int cut = 0;
    for (int round = 0; round < 12; ++round) {
      CAPTURE(round);
      // READ and WRITE of 48 MiB with a deadline far too short to finish.
      const auto deadline = std::chrono::microseconds(200 + 300 * round);
      mc::result<void> r;
      if (round % 2 == 0) {
        CHECK_NOTHROW(r = t.rt.block_on(t.a->read(bytes(sink), reg->describe(), deadline)));
      } else {
        auto junk = mc::test::random_bytes(big, 100 + round);
        CHECK_NOTHROW(r = t.rt.block_on(t.a->write(cbytes(junk), reg->describe(), deadline)));
        // A cut write may have landed partly: make the owner's bytes known
        // again with a complete write (itself a "next transfer").
        auto fresh = mc::test::random_bytes(big, 200 + round);
        mc::result<void> restore;
        CHECK_NOTHROW(restore = t.rt.block_on(t.a->write(cbytes(fresh), reg->describe(), 30s)));
        REQUIRE(restore.has_value());
        CHECK(mc::test::checksum(owner.data(), big) == mc::test::checksum(fresh.data(), big));
      }
      if (r.has_error()) {
        CHECK(mc::is(r.error(), mc::errc::timeout));
        ++cut;
      }
      // The next transfer on the same engine to the same peer: an odd-sized
      // range at an odd offset, compared by checksum.
      const std::size_t off = 4093 + static_cast<std::size_t>(round) * 977, len = (1u << 20) + 3 + round;
      std::vector<std::uint8_t> back(len);
      mc::result<void> next;
      CHECK_NOTHROW(next = t.rt.block_on(t.a->read(bytes(back), reg->describe(off, len), 30s)));
      REQUIRE(next.has_value());
      CHECK(mc::test::checksum(back.data(), len) == mc::test::checksum(owner.data() + off, len));
    }
    CHECK(cut > 0);  // at least one transfer was really cut short
  }
}
