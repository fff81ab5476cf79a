#include "mc/tiered/offset_allocator.hpp"

#include <doctest/doctest.h>

#include <map>
#include <random>
#include <stdexcept>
#include <vector>

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
  std::vector<std::pair<std::uint64_t, std::uint64_t>> live;  // (offset, requested size)
  std::uint64_t used = 0, failures = 0;
  for (std::uint64_t i = 0; i < ops; ++i) {
    bool do_alloc = live.empty() || (g() % 100) < (live.size() < 3000 ? 55u : 40u);
    if (do_alloc) {
      // Mostly small, sometimes large, sometimes odd sizes.
      std::uint64_t size;
      switch (g() % 4) {
        case 0: size = 1 + g() % 256; break;
        case 1: size = 1 + g() % 16384; break;
        case 2: size = 1 + g() % (256 << 10); break;
        default: size = 1 + g() % (4 << 20); break;
      }
      auto need = a.rounded(size);
      REQUIRE(need % align == 0);
      REQUIRE(need >= size);
      auto off = a.allocate(size);
      if (!off) {
        ++failures;
        // Bounded time means best fit must have found any gap that fits.
        REQUIRE(m.largest_gap() < need);
        continue;
      }
      REQUIRE(*off % align == 0);
      REQUIRE(*off + need <= capacity);
      REQUIRE_FALSE(m.overlaps(*off, need));
      m.allocated.emplace(*off, need);
      live.emplace_back(*off, size);
      used += need;
    } else {
      auto k = g() % live.size();
      auto [off, size] = live[k];
      live[k] = live.back();
      live.pop_back();
      a.free(off, size);
      used -= m.allocated.at(off);
      m.allocated.erase(off);
    }
    REQUIRE(a.used() == used);
    if (i % 4096 == 0) {
      auto s = a.get_stats();
      REQUIRE(s.largest_free == m.largest_gap());
      REQUIRE(s.free_blocks == m.gaps());  // coalescing: free blocks are maximal
      REQUIRE(s.allocations == live.size());
    }
  }
  for (auto [off, size] : live) a.free(off, size);
  auto s = a.get_stats();
  CHECK(s.used == 0);
  CHECK(s.free_blocks == 1);
  CHECK(s.largest_free == capacity);
  CHECK(s.fragmentation == 0.0);
  MESSAGE(ops << " ops, " << failures << " failed allocations");
}

}  // namespace

TEST_SUITE("offset_allocator") {
  TEST_CASE("allocations are aligned, never overlap and coalesce back to one block") {
    offset_allocator a(1 << 20, 4096);
    auto x = a.allocate(1);
    auto y = a.allocate(4097);
    auto z = a.allocate(4096);
    REQUIRE((x && y && z));
    CHECK(*x == 0);
    CHECK(*y == 4096);
    CHECK(*z == 3 * 4096);
    a.free(*y, 4097);
    auto s = a.get_stats();
    CHECK(s.free_blocks == 2);
    CHECK(s.fragmentation > 0.0);
    a.free(*x, 1);
    a.free(*z, 4096);
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
    a.free(*x, 8192);
    CHECK(a.allocate(8192));
  }

  TEST_CASE("double free and foreign ranges are detected") {
    offset_allocator a(1 << 16, 64);
    auto x = a.allocate(100);
    REQUIRE(x);
    a.free(*x, 100);
    CHECK_THROWS_AS(a.free(*x, 100), std::logic_error);
    CHECK_THROWS_AS(a.free(1 << 20, 64), std::logic_error);
    CHECK_THROWS_AS(offset_allocator(1024, 3), std::invalid_argument);
  }

  TEST_CASE("randomised operations agree with a reference model") { run_property(1'000'000, 42); }
}

TEST_SUITE("offset_allocator_slow") {
  TEST_CASE("randomised operations agree with a reference model (long run)") {
    for (std::uint64_t seed : {1, 2, 3}) run_property(5'000'000, seed);
  }
}
