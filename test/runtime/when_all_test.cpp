#include "mc/runtime/deadline.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/runtime/when_all.hpp"

#include <doctest/doctest.h>

#include <chrono>

using namespace std::chrono_literals;

namespace {
mc::task<mc::result<int>> item(int i, int* cancelled) {
  auto r = co_await mc::sleep_for(std::chrono::milliseconds((7 - i % 7) * (i % 3 == 2 ? 10000 : 1)));
  if (!r) {
    ++*cancelled;
    co_return mc::fail(mc::errc::cancelled);
  }
  if (i % 3 == 1) co_return mc::fail(mc::errc::object_not_found);
  co_return i * 10;
}
}  // namespace

TEST_SUITE("when_all") {
  TEST_CASE("results come back in input order with per-item errors") {
    mc::runtime::runtime rt(1);
    rt.start();
    int cancelled = 0;
    auto out = rt.block_on([&]() -> mc::task<std::vector<mc::result<int>>> {
      std::vector<mc::task<mc::result<int>>> v;
      for (int i = 0; i < 60; ++i)
        if (i % 3 != 2) v.push_back(item(i, &cancelled));
      co_return co_await mc::when_all(std::move(v));
    }());
    REQUIRE(out.size() == 40);
    int idx = 0;
    for (int i = 0; i < 60; ++i) {
      if (i % 3 == 2) continue;
      auto& r = out[idx++];
      if (i % 3 == 1) {
        CHECK(mc::is(r.error(), mc::errc::object_not_found));
      } else {
        REQUIRE(r.has_value());
        CHECK(*r == i * 10);
      }
    }
    CHECK(cancelled == 0);
  }

  TEST_CASE("an empty set completes at once") {
    mc::runtime::runtime rt(1);
    rt.start();
    auto out = rt.block_on(mc::when_all(std::vector<mc::task<mc::result<int>>>{}));
    CHECK(out.empty());
  }

  TEST_CASE("cancelling the caller cancels every child") {
    mc::runtime::runtime rt(1);
    rt.start();
    int cancelled = 0;
    auto r = rt.block_on(mc::with_deadline(
        [&]() -> mc::task<mc::result<int>> {
          std::vector<mc::task<mc::result<int>>> v;
          for (int i = 0; i < 9; ++i) v.push_back(item(i, &cancelled));  // 3 of them sleep ~minutes
          auto out = co_await mc::when_all(std::move(v));
          co_return static_cast<int>(out.size());
        }(),
        50ms));
    CHECK(mc::is(r.error(), mc::errc::timeout));
    CHECK(cancelled == 3);
  }
}
