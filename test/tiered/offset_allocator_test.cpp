#include "mc/tiered/offset_allocator.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <stdexcept>
#include <vector>

using mc::tiered::allocation;
using mc::tiered::offset_allocator;

namespace {

/// Reference model: the set of allocated ranges. Gaps between them are free.
struct model {
  std::uint64_t capacity;
  std::map<std::uint64_t, std::uint64_t> allocated;  // offset -> rounded size

  std::uint64_t largest_gap() const {
    std::uint64_t best = 0, pos = 0;
    for (auto [o, s] : allocated) {
      best = std::max(best, o - pos);
      pos = o + s;
    }
    return std::max(best, capacity - pos);
  }
  std::uint64_t gaps() const {
    std::uint64_t n = 0, pos = 0;
    for (auto [o, s] : allocated) {
      n += o > pos;
      pos = o + s;
    }
    return n + (capacity > pos);
  }
  bool overlaps(std::uint64_t off, std::uint64_t len) const {
    auto it = allocated.upper_bound(off);
    if (it != allocated.end() && it->first < off + len) return true;
    if (it != allocated.begin()) {
      --it;
      if (it->first + it->second > off) return true;
    }
    return false;
  }
};

void run_property(std::uint64_t ops, std::uint64_t seed) {
  const std::uint64_t capacity = 64ull << 20, align = 64;
  offset_allocator a(capacity, align);
  model m{capacity, {}};
  std::mt19937_64 g(seed);
  std::vector<allocation> live;
  std::uint64_t used = 0, failures = 0, missed = 0;
  for (std::uint64_t i = 0; i < ops; ++i) {
    bool do_alloc = live.empty() || (g() % 100) < (live.size() < 3000 ? 55u : 40u);
    if (do_alloc) {
      // Mostly small, sometimes large, sometimes odd sizes.
      std::uint64_t size;
      switch (g() % 4) {
        case 0:
          size = 1 + g() % 256;
          break;
        case 1:
          size = 1 + g() % 16384;
          break;
        case 2:
          size = 1 + g() % (256 << 10);
          break;
        default:
          size = 1 + g() % (4 << 20);
          break;
      }
      auto need = a.rounded(size);
      REQUIRE(need % align == 0);
      REQUIRE(need >= size);
      auto got = a.allocate(size);
      if (!got) {
        ++failures;
        // Good fit misses only blocks of the request's own bin (sizes within
        // 1/8 of it), and only when its probe did not reach them.
        REQUIRE(m.largest_gap() < need + need / 8 + align);
        missed += m.largest_gap() >= need;
        continue;
      }
      REQUIRE(got->size == need);
      REQUIRE(got->offset % align == 0);
      REQUIRE(got->offset + need <= capacity);
      REQUIRE_FALSE(m.overlaps(got->offset, need));
      m.allocated.emplace(got->offset, need);
      live.push_back(*got);
      used += need;
    } else {
      auto k = g() % live.size();
      auto got = live[k];
      live[k] = live.back();
      live.pop_back();
      a.free(got);
      used -= m.allocated.at(got.offset);
      m.allocated.erase(got.offset);
    }
    REQUIRE(a.used() == used);
    if (i % 4096 == 0) {
      auto s = a.get_stats();
      REQUIRE(s.largest_free == m.largest_gap());
      REQUIRE(s.free_blocks == m.gaps());  // coalescing: free blocks are maximal
      REQUIRE(s.allocations == live.size());
    }
  }
  for (auto& got : live) a.free(got);
  auto s = a.get_stats();
  CHECK(s.used == 0);
  CHECK(s.free_blocks == 1);
  CHECK(s.largest_free == capacity);
  CHECK(s.fragmentation == 0.0);
  MESSAGE(ops << " ops, " << failures << " failed allocations, " << missed << " of them with a big enough gap");
}

}  // namespace

TEST_SUITE("offset_allocator") {
  TEST_CASE("allocations are aligned, never overlap and coalesce back to one block") {
    offset_allocator a(1 << 20, 4096);
    auto x = a.allocate(1);
    auto y = a.allocate(4097);
    auto z = a.allocate(4096);
    REQUIRE((x && y && z));
    CHECK(x->offset == 0);
    CHECK(y->offset == 4096);
    CHECK(y->size == 8192);
    CHECK(z->offset == 3 * 4096);
    a.free(*y);
    auto s = a.get_stats();
    CHECK(s.free_blocks == 2);
    CHECK(s.fragmentation > 0.0);
    a.free(*x);
    a.free(*z);
    s = a.get_stats();
    CHECK(s.free_blocks == 1);
    CHECK(s.used == 0);
  }

  TEST_CASE("a request larger than the free space fails without side effects") {
    offset_allocator a(8192, 4096);
    CHECK_FALSE(a.allocate(8193));
    auto x = a.allocate(8192);
    REQUIRE(x);
    CHECK_FALSE(a.allocate(1));
    a.free(*x);
    CHECK(a.allocate(8192));
  }

  TEST_CASE("double free and foreign ranges are detected") {
    offset_allocator a(1 << 16, 64);
    auto x = a.allocate(100);
    REQUIRE(x);
    auto y = a.allocate(64);
    REQUIRE(y);
    a.free(*x);
    CHECK_THROWS_AS(a.free(*x), std::logic_error);                              // double free
    CHECK_THROWS_AS(a.free(allocation{1 << 20, 64, 12345}), std::logic_error);  // foreign node
    auto altered = *y;
    altered.offset += 64;
    CHECK_THROWS_AS(a.free(altered), std::logic_error);
    altered = *y;
    altered.size *= 2;
    CHECK_THROWS_AS(a.free(altered), std::logic_error);
    CHECK(a.used() == 64);  // the refused frees changed nothing
    a.free(*y);
    CHECK(a.get_stats().free_blocks == 1);
    CHECK_THROWS_AS(offset_allocator(1024, 3), std::invalid_argument);
  }

  TEST_CASE("a block exactly the size of the request is found (the probe below the good-fit bin)") {
    for (std::uint64_t units : {19u, 23u, 100u, 1000u, 4097u}) {
      offset_allocator a(units, 1);
      auto x = a.allocate(units);
      REQUIRE(x);
      CHECK(x->size == units);
      a.free(*x);
      // A hole of exactly `units - 1` between two allocations is reused.
      offset_allocator b(3 * units, 1);
      auto p = b.allocate(units), q = b.allocate(units - 1), r = b.allocate(units + 1);
      REQUIRE((p && q && r));
      b.free(*q);
      auto again = b.allocate(units - 1);
      REQUIRE(again);
      CHECK(again->offset == q->offset);
    }
  }

  TEST_CASE("a million small allocations are all served and coalesce back to one block") {
    offset_allocator a(std::uint64_t{1} << 30, 64);
    std::vector<allocation> v;
    v.reserve(1'000'000);
    std::mt19937_64 g(7);
    for (int i = 0; i < 1'000'000; ++i) {
      auto x = a.allocate(1 + g() % 1000);
      REQUIRE(x);
      v.push_back(*x);
    }
    CHECK(a.get_stats().allocations == v.size());
    std::shuffle(v.begin(), v.end(), g);
    for (auto& x : v) a.free(x);
    auto s = a.get_stats();
    CHECK(s.used == 0);
    CHECK(s.free_blocks == 1);
    CHECK(s.largest_free == a.capacity());
  }

  TEST_CASE("randomised operations agree with a reference model") { run_property(1'000'000, 42); }
}

TEST_SUITE("offset_allocator_slow") {
  TEST_CASE("randomised operations agree with a reference model (long run)") {
    for (std::uint64_t seed : {1, 2, 3}) run_property(5'000'000, seed);
  }
}
