// Derived registrations (engine::register_within), the containing-region
// lookup, cheap unpredictable tokens and the fence over TCP, same-host and
// in-process (the RDMA side runs in the Soft-RoCE VM: test/rdma).
#include "transfer_fixture.hpp"

#include "csprng.hpp"
#include "registry.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <unordered_set>

using namespace std::chrono_literals;
using namespace mc::transfer;
using mc::transfer::test::bytes;
using mc::transfer::test::cbytes;
using mc::transfer::test::denied;
using mc::transfer::test::local_transports;
using mc::transfer::test::loopback_options;
using mc::transfer::test::two_engines;

TEST_SUITE("transfer_derived") {
  TEST_CASE("derived registrations round-trip random payloads at odd sizes and offsets over every local transport") {
    for (auto force : local_transports) {
      CAPTURE(to_string(force));
      two_engines t(loopback_options(force), loopback_options(force));
      std::vector<std::uint8_t> target((3u << 20) + 333, 0);
      auto parent = t.b->register_memory(target.data(), target.size());
      REQUIRE(parent);
      std::uint64_t seed = 7;
      std::size_t off = 3;
      for (std::size_t n : {std::size_t(1), std::size_t(4095), std::size_t(65537), std::size_t((1u << 20) + 1),
                            std::size_t((2u << 20) - 7)}) {
        CAPTURE(n);
        auto child = t.b->register_within(*parent, off, n, region_access::remote_read_write);
        REQUIRE(child);
        CHECK(child->token() != parent->token());
        CHECK(child->data() == parent->data() + off);
        auto payload = mc::test::random_bytes(n, seed++);
        REQUIRE(t.rt.block_on(t.a->write(cbytes(payload), child->describe())).has_value());
        CHECK(mc::test::checksum(target.data() + off, n) == mc::test::checksum(payload.data(), n));
        std::vector<std::uint8_t> back(n);
        REQUIRE(t.rt.block_on(t.a->read(bytes(back), child->describe())).has_value());
        CHECK(mc::test::checksum(back.data(), n) == mc::test::checksum(payload.data(), n));
        off = (off + n + 11) % (target.size() - (2u << 20));
      }
      CHECK(t.b->stats().derived_registrations == 5);
      CHECK(t.b->stats().rdma_memory_registrations == 0);
    }
  }

  TEST_CASE("a revoked derived registration refuses late WRITEs and READs while its parent and siblings still work") {
    for (auto force : local_transports) {
      CAPTURE(to_string(force));
      two_engines t(loopback_options(force), loopback_options(force));
      std::vector<std::uint8_t> target(300001, 0x11);
      auto parent = t.b->register_memory(target.data(), target.size(), region_access::remote_read_write);
      REQUIRE(parent);
      auto c1 = t.b->register_within(*parent, 1001, 100003, region_access::remote_read_write);
      auto c2 = t.b->register_within(*parent, 150001, 100003, region_access::remote_write);
      auto c3 = t.b->register_within(*parent, 0, 999, region_access::remote_read_write);
      REQUIRE(c1);
      REQUIRE(c2);
      REQUIRE(c3);
      const auto d1 = c1->describe();
      const auto d3 = c3->describe();
      c1->reset();                                               // revoked by its handle
      REQUIRE(t.b->unregister_memory(c3->token()).has_value());  // revoked by token
      auto payload = mc::test::random_bytes(100003, 3);
      std::vector<std::uint8_t> back(100003);
      CHECK(denied(t.rt.block_on(t.a->write(cbytes(payload), d1))));
      CHECK(denied(t.rt.block_on(t.a->read(bytes(back), d1))));
      CHECK(denied(t.rt.block_on(t.a->write(cbytes(payload).first(999), d3))));
      CHECK(std::all_of(target.begin(), target.begin() + 150001, [](auto b) { return b == 0x11; }));
      // The sibling and the parent still work.
      REQUIRE(t.rt.block_on(t.a->write(cbytes(payload), c2->describe())).has_value());
      CHECK(mc::test::checksum(target.data() + 150001, payload.size()) ==
            mc::test::checksum(payload.data(), payload.size()));
      CHECK(denied(t.rt.block_on(t.a->read(bytes(back), c2->describe()))));  // remote_write only
      REQUIRE(t.rt.block_on(t.a->read(bytes(back), parent->describe(150001, back.size()))).has_value());
      CHECK(back == payload);
      REQUIRE(t.rt.block_on(t.a->write(cbytes(payload), parent->describe(1001, payload.size()))).has_value());
      CHECK(mc::test::checksum(target.data() + 1001, payload.size()) ==
            mc::test::checksum(payload.data(), payload.size()));
    }
  }

  TEST_CASE("revoking a derived registration while writes stream into it: nothing lands after the revocation") {
    // TCP and in-process (same-host grants have the documented lease residual).
    for (auto force : {transport_kind::tcp, transport_kind::in_process}) {
      CAPTURE(to_string(force));
      auto o = loopback_options(force);
      o.slice_size = 64 * 1024;
      two_engines t(o, loopback_options(force));
      std::vector<std::uint8_t> target(16u << 20, 0);
      auto parent = t.b->register_memory(target.data(), target.size());
      REQUIRE(parent);
      const std::size_t off = 1234567, n = (12u << 20) + 5;
      auto child = t.b->register_within(*parent, off, n, region_access::remote_write);
      REQUIRE(child);
      auto src = mc::test::random_bytes(n, 31);
      std::atomic<int> started{0};
      auto writer = [](engine* e, std::span<const std::byte> s, remote_buffer d,
                       std::atomic<int>* started) -> mc::task<int> {
        int failures = 0;
        for (int i = 0; i < 50; ++i) {
          started->fetch_add(1);
          auto w = co_await e->write(s, d);
          if (!w) {
            if (!mc::is(w.error(), mc::errc::access_denied) && !mc::is(w.error(), mc::errc::transfer_fail))
              co_return -1;
            ++failures;
          }
        }
        co_return failures;
      };
      std::thread w([&] { CHECK(t.rt.block_on(writer(t.a.get(), cbytes(src), child->describe(), &started), 0) > 0); });
      while (started.load() < 2) std::this_thread::yield();
      child->reset();
      // From here on nothing may land in the child's range.
      std::memset(target.data() + off, 0x77, n);
      w.join();
      CHECK(std::all_of(target.begin() + off, target.begin() + off + n, [](auto b) { return b == 0x77; }));
      // The parent is untouched by the child's revocation.
      REQUIRE(t.rt.block_on(t.a->write(cbytes(src).first(4096), parent->describe(0, 4096))).has_value());
      CHECK(std::equal(src.begin(), src.begin() + 4096, target.begin()));
    }
  }

  TEST_CASE("a derived registration is confined to its range: one byte before or after is refused") {
    for (auto force : local_transports) {
      CAPTURE(to_string(force));
      two_engines t(loopback_options(force), loopback_options(force));
      std::vector<std::uint8_t> target(8192, 0x22);
      auto parent = t.b->register_memory(target.data(), target.size());
      REQUIRE(parent);
      auto c = t.b->register_within(*parent, 1000, 4001, region_access::remote_read_write);
      REQUIRE(c);
      auto src = mc::test::random_bytes(4002, 9);
      auto past = c->describe();
      past.length += 1;
      auto before = c->describe();
      before.address -= 1;
      CHECK(denied(t.rt.block_on(t.a->write(cbytes(src), past))));
      CHECK(denied(t.rt.block_on(t.a->write(cbytes(src).first(4001), before))));
      CHECK(std::all_of(target.begin(), target.end(), [](auto b) { return b == 0x22; }));
    }
  }

  TEST_CASE("a scatter registration serves its pieces (one batch, random sizes and order) and nothing between them") {
    for (auto force : local_transports) {
      CAPTURE(to_string(force));
      two_engines t(loopback_options(force), loopback_options(force));
      std::vector<std::uint8_t> target((5u << 20) + 777, 0x33);
      auto parent = t.b->register_memory(target.data(), target.size());
      REQUIRE(parent);
      // 97 pieces of random sizes (1 B .. ~100 KiB) with random gaps (0 B,
      // i.e. adjacent and merged, or 1 .. 4 KiB), handed over in a shuffled
      // order; a piece's bytes are the value's, in the shuffled order.
      std::uint64_t x = 0x9e3779b97f4a7c15ull;
      auto next = [&x](std::uint64_t m) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return x % m;
      };
      std::vector<std::span<std::byte>> pieces;
      std::vector<std::pair<std::size_t, std::size_t>> gaps;  // (offset, length) of the bytes between pieces
      std::size_t at = 5;
      for (int i = 0; i < 97; ++i) {
        const auto n = static_cast<std::size_t>(1 + (i % 7 == 0 ? 0 : next(100000)));
        pieces.push_back(std::as_writable_bytes(std::span(target)).subspan(at, n));
        at += n;
        const auto gap = static_cast<std::size_t>(next(3) == 0 ? 0 : 1 + next(4096));
        if (gap > 0) gaps.emplace_back(at, gap);
        at += gap;
      }
      REQUIRE(at < target.size());
      for (std::size_t i = pieces.size(); i > 1; --i) std::swap(pieces[i - 1], pieces[next(i)]);
      auto sc = t.b->register_pieces_within(pieces, region_access::remote_read_write);
      REQUIRE(sc);
      CHECK(sc->token() != parent->token());
      std::size_t total = 0;
      for (auto& p : pieces) total += p.size();
      auto src = mc::test::random_bytes(total, 41);
      std::vector<request> writes, reads;
      std::vector<std::uint8_t> back(total, 0);
      std::size_t off = 0;
      for (auto& p : pieces) {
        auto d = sc->describe(static_cast<std::uint64_t>(p.data() - sc->data()), p.size());
        writes.push_back(request::make_write(cbytes(src).subspan(off, p.size()), d));
        reads.push_back(request::make_read(bytes(back).subspan(off, p.size()), d));
        off += p.size();
      }
      for (auto& r : t.rt.block_on(t.a->batch(writes))) REQUIRE(r.has_value());
      off = 0;
      for (auto& p : pieces) {
        REQUIRE(std::memcmp(p.data(), src.data() + off, p.size()) == 0);
        off += p.size();
      }
      for (auto& r : t.rt.block_on(t.a->batch(reads))) REQUIRE(r.has_value());
      CHECK(mc::test::checksum(back.data(), total) == mc::test::checksum(src.data(), total));
      // Nothing between the pieces: into a gap, across a gap's first or last
      // byte, before the first piece, past the last one.
      const std::byte one[2]{};
      auto at_addr = [&](std::size_t o, std::size_t n) {
        auto d = sc->describe(0, 1);
        d.address = reinterpret_cast<std::uintptr_t>(target.data()) + o;
        d.length = n;
        return d;
      };
      for (auto [g, n] : gaps) {
        CHECK(denied(t.rt.block_on(t.a->write(std::span(one, 1), at_addr(g, 1)))));
        CHECK(denied(t.rt.block_on(t.a->write(std::span(one, 2), at_addr(g - 1, 2)))));
        CHECK(denied(t.rt.block_on(t.a->write(std::span(one, 2), at_addr(g + n - 1, 2)))));
      }
      CHECK(denied(t.rt.block_on(t.a->write(std::span(one, 1), at_addr(4, 1)))));
      CHECK(denied(t.rt.block_on(t.a->write(std::span(one, 1), at_addr(at, 1)))));
      for (auto [g, n] : gaps)
        CHECK(std::all_of(target.begin() + static_cast<std::ptrdiff_t>(g),
                          target.begin() + static_cast<std::ptrdiff_t>(g + n), [](auto b) { return b == 0x33; }));
      // Revoked as a whole: every piece refused; the parent still works.
      const auto d0 = sc->describe(static_cast<std::uint64_t>(pieces[0].data() - sc->data()), pieces[0].size());
      sc->reset();
      CHECK(denied(t.rt.block_on(t.a->write(cbytes(src).first(pieces[0].size()), d0))));
      REQUIRE(t.rt.block_on(t.a->read(bytes(back).first(1000), parent->describe(0, 1000))).has_value());
    }
  }

  TEST_CASE("a scatter registration refuses bad pieces and pieces outside one registration") {
    mc::runtime::runtime rt(1);
    engine e(rt, loopback_options(transport_kind::tcp));
    std::vector<std::byte> a(65536), b(65536);
    auto ra = e.register_memory(a.data(), a.size());
    auto rb = e.register_memory(b.data(), b.size(), region_access::remote_read);
    REQUIRE(ra);
    REQUIRE(rb);
    auto err = [](const mc::result<region>& r, mc::errc c) { return !r && mc::is(r.error(), c); };
    using pieces = std::vector<std::span<std::byte>>;
    const auto rw = region_access::remote_read_write;
    CHECK(err(e.register_pieces_within(pieces{}, rw), mc::errc::invalid_params));
    CHECK(err(e.register_pieces_within(pieces{std::span(a).first(0)}, rw), mc::errc::invalid_params));
    CHECK(err(e.register_pieces_within(pieces{std::span(a).first(8), std::span<std::byte>()}, rw),
              mc::errc::invalid_params));
    CHECK(err(e.register_pieces_within(pieces{std::span(a).first(8)}, static_cast<region_access>(9)),
              mc::errc::invalid_params));
    CHECK(err(e.register_pieces_within(pieces(4097, std::span(a).first(8)), rw), mc::errc::invalid_params));
    // Pieces in two registrations, or past the end of the first one's.
    CHECK(err(e.register_pieces_within(pieces{std::span(a).first(8), std::span(b).first(8)}, rw),
              mc::errc::out_of_range));
    CHECK(err(e.register_pieces_within(pieces{std::span(a).first(8), std::span(a.data() + 65530, 16)}, rw),
              mc::errc::out_of_range));
    // More access than the registration grants: none holds them with it.
    CHECK(
        err(e.register_pieces_within(pieces{std::span(b).first(8), std::span(b).last(8)}, rw), mc::errc::out_of_range));
    auto ok = e.register_pieces_within(pieces{std::span(b).last(8), std::span(b).first(8)}, region_access::remote_read);
    REQUIRE(ok);
    CHECK(ok->data() == b.data());
    CHECK(ok->size() == b.size());
    CHECK(e.register_pieces_within(pieces(4096, std::span(a).first(8)), rw).has_value());  // the same piece: merged
    rb->reset();  // the parent's end revokes the scatter registration too
    CHECK(e.stats().registered_regions == 1);
  }

  TEST_CASE("a derived registration cannot exceed its parent's access or range") {
    two_engines t;
    std::vector<std::uint8_t> target(65536);
    auto parent = t.b->register_memory(target.data(), target.size(), region_access::remote_write);
    REQUIRE(parent);
    auto inv = [](const mc::result<region>& r) { return !r && mc::is(r.error(), mc::errc::invalid_params); };
    CHECK(inv(t.b->register_within(*parent, 0, 16, region_access::remote_read)));
    CHECK(inv(t.b->register_within(*parent, 0, 16, region_access::remote_read_write)));
    CHECK(inv(t.b->register_within(*parent, 0, 16, static_cast<region_access>(7))));
    CHECK(inv(t.b->register_within(*parent, 0, 0, region_access::remote_write)));
    CHECK(inv(t.b->register_within(*parent, 65536, 1, region_access::remote_write)));
    CHECK(inv(t.b->register_within(*parent, 1, 65536, region_access::remote_write)));
    CHECK(inv(t.b->register_within(*parent, ~0ull, 2, region_access::remote_write)));
    CHECK(inv(t.b->register_within(region{}, 0, 1, region_access::remote_write)));
    CHECK(inv(t.a->register_within(*parent, 0, 16, region_access::remote_write)));  // another engine's region
    CHECK(t.b->register_within(*parent, 0, 65536, region_access::remote_write).has_value());
    auto lo = t.b->register_within(*parent, 100, 10, region_access::local_only);
    REQUIRE(lo);
    // A local_only child refuses peers although its parent grants WRITE.
    std::vector<std::uint8_t> src(10, 1);
    CHECK(denied(t.rt.block_on(t.a->write(cbytes(src), lo->describe()))));
    // A child of a local_only child cannot grant more.
    CHECK(inv(t.b->register_within(*lo, 0, 5, region_access::remote_write)));
    // The parent unregistered behind its handle's back: out_of_range.
    REQUIRE(t.b->unregister_memory(parent->token()).has_value());
    auto gone = t.b->register_within(*parent, 0, 16, region_access::remote_write);
    REQUIRE_FALSE(gone);
    CHECK(mc::is(gone.error(), mc::errc::out_of_range));
  }

  TEST_CASE("unregistering the parent revokes every derived registration, nested ones too") {
    for (auto force : local_transports) {
      CAPTURE(to_string(force));
      two_engines t(loopback_options(force), loopback_options(force));
      std::vector<std::uint8_t> target(1u << 20, 0x33);
      auto parent = t.b->register_memory(target.data(), target.size());
      REQUIRE(parent);
      auto child = t.b->register_within(*parent, 4096, 65536, region_access::remote_read_write);
      REQUIRE(child);
      auto grandchild = t.b->register_within(*child, 7, 1001, region_access::remote_write);
      REQUIRE(grandchild);
      CHECK(static_cast<void*>(grandchild->data()) == target.data() + 4096 + 7);
      auto src = mc::test::random_bytes(1001, 4);
      REQUIRE(t.rt.block_on(t.a->write(cbytes(src), grandchild->describe())).has_value());
      CHECK(t.b->stats().registered_regions == 3);
      const auto dc = child->describe();
      const auto dg = grandchild->describe();
      parent->reset();
      CHECK(t.b->stats().registered_regions == 0);
      auto other = mc::test::random_bytes(1001, 5);
      CHECK(denied(t.rt.block_on(t.a->write(cbytes(other), dc))));
      CHECK(denied(t.rt.block_on(t.a->write(cbytes(other), dg))));
      CHECK(mc::test::checksum(target.data() + 4096 + 7, 1001) == mc::test::checksum(src.data(), 1001));
      // The children's handles only drop their bookkeeping; a new registration works.
      grandchild->reset();
      child->reset();
      auto again = t.b->register_memory(target.data(), target.size());
      REQUIRE(again);
      REQUIRE(t.rt.block_on(t.a->write(cbytes(other), again->describe(0, other.size()))).has_value());
      CHECK(mc::test::checksum(target.data(), 1001) == mc::test::checksum(other.data(), 1001));
    }
  }

  TEST_CASE("revoking a child leaves its parent's other children and the parent registered") {
    two_engines t;
    std::vector<std::uint8_t> target(4096);
    auto parent = t.b->register_memory(target.data(), target.size());
    REQUIRE(parent);
    std::vector<region> kids;
    for (int i = 0; i < 64; ++i) {
      auto c = t.b->register_within(*parent, static_cast<std::uint64_t>(i) * 64, 64, region_access::remote_write);
      REQUIRE(c);
      kids.push_back(std::move(*c));
    }
    CHECK(t.b->stats().registered_regions == 65);
    const auto d0 = kids[0].describe();
    for (int i = 0; i < 64; i += 2) kids[static_cast<std::size_t>(i)].reset();
    CHECK(t.b->stats().registered_regions == 33);
    std::vector<std::uint8_t> src(64, 0x77);
    CHECK(t.rt.block_on(t.a->write(cbytes(src), kids[1].describe())).has_value());
    CHECK(denied(t.rt.block_on(t.a->write(cbytes(src), d0))));
    kids.clear();
    CHECK(t.b->stats().registered_regions == 1);
  }

  TEST_CASE("find_registration and register_within(addr) locate the registration that contains a span") {
    two_engines t;
    std::vector<std::uint8_t> a(100000), b(50000);
    auto ra = t.b->register_memory(a.data(), a.size(), region_access::remote_write);
    auto rb = t.b->register_memory(b.data(), b.size(), region_access::local_only);
    REQUIRE(ra);
    REQUIRE(rb);
    auto f = t.b->find_registration(a.data() + 10, 99990);
    REQUIRE(f);
    CHECK(static_cast<void*>(f->data) == ra->data());
    CHECK(f->size == a.size());
    CHECK(f->token == ra->token());
    CHECK(f->access == region_access::remote_write);
    CHECK_FALSE(t.b->find_registration(a.data() + 10, 99991));  // one byte past the end
    CHECK_FALSE(t.b->find_registration(a.data(), 0));
    CHECK(t.b->find_registration(b.data(), 1)->token == rb->token());
    CHECK_FALSE(t.b->find_registration(b.data(), 1, region_access::remote_write));  // access filter
    CHECK_FALSE(t.a->find_registration(a.data(), 1));                               // another engine's
    // Derived registrations are not "containing registrations".
    auto child = t.b->register_within(a.data() + 5000, 20001, region_access::remote_write);
    REQUIRE(child);
    CHECK(static_cast<void*>(child->data()) == a.data() + 5000);
    CHECK(t.b->find_registration(a.data() + 5000, 1)->token == ra->token());
    auto payload = mc::test::random_bytes(20001, 8);
    REQUIRE(t.rt.block_on(t.a->write(cbytes(payload), child->describe())).has_value());
    CHECK(mc::test::checksum(a.data() + 5000, payload.size()) == mc::test::checksum(payload.data(), payload.size()));
    auto oor = [](const mc::result<region>& r) { return !r && mc::is(r.error(), mc::errc::out_of_range); };
    CHECK(oor(t.b->register_within(b.data(), 10, region_access::remote_write)));  // b is local_only
    CHECK(oor(t.b->register_within(a.data() + 99999, 2, region_access::remote_write)));
    std::uint8_t stray = 0;
    CHECK(oor(t.b->register_within(&stray, 1, region_access::local_only)));
    ra->reset();
    CHECK_FALSE(t.b->find_registration(a.data(), 1));
    CHECK(oor(t.b->register_within(a.data(), 1, region_access::local_only)));
    CHECK(denied(t.rt.block_on(t.a->write(cbytes(payload), child->describe()))));  // revoked with its parent
  }

  TEST_CASE("a per-request (non-derivable) registration is never another request's parent") {
    two_engines t;
    std::vector<std::uint8_t> a(70001);
    // Request 1 registers the buffer for itself; request 2, over the same
    // bytes, must not derive from it (request 1's end would revoke it too).
    auto one = t.b->register_memory(a.data(), a.size(), region_access::remote_write, /*derivable=*/false);
    REQUIRE(one);
    CHECK_FALSE(t.b->find_registration(a.data(), a.size()));
    auto derived = t.b->register_within(a.data(), a.size(), region_access::remote_write);
    REQUIRE_FALSE(derived);
    CHECK(mc::is(derived.error(), mc::errc::out_of_range));
    auto two = t.b->register_memory(a.data(), a.size(), region_access::remote_write, /*derivable=*/false);
    REQUIRE(two);
    one->reset();  // request 1 ends
    auto payload = mc::test::random_bytes(a.size(), 21);
    REQUIRE(t.rt.block_on(t.a->write(cbytes(payload), two->describe())).has_value());  // request 2 unaffected
    CHECK(mc::test::checksum(a.data(), a.size()) == mc::test::checksum(payload.data(), payload.size()));
    // A lasting registration over the same bytes is a parent as before.
    auto lasting = t.b->register_memory(a.data(), a.size(), region_access::remote_write);
    REQUIRE(lasting);
    CHECK(t.b->register_within(a.data() + 1, 10, region_access::remote_write));
  }

  TEST_CASE("registration tokens are unique, never zero, and cost no getrandom per call") {
    using namespace mc::transfer::detail;
    (void)random_nonzero_u64();  // this thread is seeded
    const auto seeds0 = csprng_seed_count();
    std::unordered_set<std::uint64_t> seen;
    constexpr int draws = 1'000'000;
    seen.reserve(draws);
    int bit63 = 0;
    for (int i = 0; i < draws; ++i) {
      const auto v = random_nonzero_u64();
      REQUIRE(v != 0);
      seen.insert(v);
      bit63 += static_cast<int>(v >> 63);
    }
    CHECK(seen.size() == draws);
    CHECK(csprng_seed_count() == seeds0);  // no reseed on this thread
    CHECK(bit63 > draws / 2 - 5000);       // roughly balanced bits
    CHECK(bit63 < draws / 2 + 5000);
    // Another thread seeds its own generator once and draws other values.
    std::vector<std::uint64_t> theirs;
    std::thread th([&] {
      for (int i = 0; i < 1000; ++i) theirs.push_back(random_nonzero_u64());
    });
    th.join();
    CHECK(csprng_seed_count() == seeds0 + 1);
    CHECK(std::none_of(theirs.begin(), theirs.end(), [&](auto v) { return seen.count(v); }));
    // A forked child reseeds: its draws differ from the parent's next ones.
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::uint64_t v[4];
      for (auto& x : v) x = random_nonzero_u64();
      const bool ok = ::write(fds[1], v, sizeof v) == static_cast<ssize_t>(sizeof v);
      ::_exit(ok ? 0 : 1);
    }
    std::uint64_t child_v[4] = {};
    std::uint64_t mine[4];
    for (auto& x : mine) x = random_nonzero_u64();
    CHECK(::read(fds[0], child_v, sizeof child_v) == static_cast<ssize_t>(sizeof child_v));
    int st = 0;
    ::waitpid(pid, &st, 0);
    ::close(fds[0]);
    ::close(fds[1]);
    for (int i = 0; i < 4; ++i) CHECK(child_v[i] != mine[i]);
    // Registration tokens: unique and nonzero too.
    two_engines t;
    std::vector<std::uint8_t> buf(4096);
    auto parent = t.b->register_memory(buf.data(), buf.size());
    REQUIRE(parent);
    std::unordered_set<std::uint64_t> tokens{parent->token()};
    std::vector<region> kids;
    for (int i = 0; i < 10000; ++i) {
      auto c = t.b->register_within(*parent, static_cast<std::uint64_t>(i) % 4000, 96, region_access::remote_read);
      REQUIRE(c);
      REQUIRE(c->token() != 0);
      tokens.insert(c->token());
      kids.push_back(std::move(*c));
    }
    CHECK(tokens.size() == 10001);
  }

  TEST_CASE("the ChaCha20 block function matches the RFC 8439 test vector") {
    std::array<std::uint32_t, 8> key{};
    for (std::uint32_t i = 0; i < 8; ++i) {
      const std::uint32_t b = 4 * i;
      key[i] = b | (b + 1) << 8 | (b + 2) << 16 | (b + 3) << 24;  // bytes 00 01 02 .. 1f
    }
    const std::array<std::uint32_t, 3> nonce{0x09000000u, 0x4a000000u, 0};  // 00 00 00 09 00 00 00 4a 00 00 00 00
    const auto out = mc::transfer::detail::chacha20_block(key, 1, nonce);
    const std::uint8_t expect[64] = {0x10, 0xf1, 0xe7, 0xe4, 0xd1, 0x3b, 0x59, 0x15, 0x50, 0x0f, 0xdd, 0x1f, 0xa3,
                                     0x20, 0x71, 0xc4, 0xc7, 0xd1, 0xf4, 0xc7, 0x33, 0xc0, 0x68, 0x03, 0x04, 0x22,
                                     0xaa, 0x9a, 0xc3, 0xd4, 0x6c, 0x4e, 0xd2, 0x82, 0x64, 0x46, 0x07, 0x9f, 0xaa,
                                     0x09, 0x14, 0xc2, 0xd7, 0x05, 0xd9, 0x8b, 0x02, 0xa2, 0xb5, 0x12, 0x9c, 0xd1,
                                     0xde, 0x16, 0x4e, 0xb9, 0xcb, 0xd0, 0x83, 0xe8, 0xa2, 0x50, 0x3c, 0x4e};
    CHECK(std::equal(out.begin(), out.end(), std::begin(expect)));
  }

  TEST_CASE("fence over TCP, same-host and in-process is a counted no-op that leaves transfers working") {
    for (auto force : local_transports) {
      CAPTURE(to_string(force));
      two_engines t(loopback_options(force), loopback_options(force));
      std::vector<std::uint8_t> target(70001);
      auto reg = t.b->register_memory(target.data(), target.size());
      REQUIRE(reg);
      auto payload = mc::test::random_bytes(target.size(), 12);
      REQUIRE(t.rt.block_on(t.a->write(cbytes(payload), reg->describe())).has_value());
      REQUIRE(t.rt.block_on(t.b->fence(t.a->endpoint())).has_value());
      REQUIRE(t.rt.block_on(t.a->fence(t.b->endpoint())).has_value());
      auto empty = t.rt.block_on(t.a->fence(""));
      REQUIRE_FALSE(empty);
      CHECK(mc::is(empty.error(), mc::errc::invalid_params));
      CHECK(t.a->stats().fences == 1);
      CHECK(t.b->stats().fences == 1);
      CHECK(t.a->stats().fenced_queue_pairs == 0);
      std::vector<std::uint8_t> back(target.size());
      REQUIRE(t.rt.block_on(t.a->read(bytes(back), reg->describe())).has_value());
      CHECK(back == payload);
    }
  }
}
