#include "mc/runtime/deadline.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/runtime/when_all.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>
#include <vector>

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

  TEST_CASE("one task is awaited in place: its value, its error, its cancellation, its exception") {
    mc::runtime::runtime rt(1);
    rt.start();
    int cancelled = 0;
    auto one = [&](int i) -> mc::task<std::vector<mc::result<int>>> {
      std::vector<mc::task<mc::result<int>>> v;
      v.push_back(item(i, &cancelled));
      co_return co_await mc::when_all(std::move(v));
    };
    auto ok = rt.block_on(one(3));
    REQUIRE(ok.size() == 1);
    REQUIRE(ok[0].has_value());
    CHECK(*ok[0] == 30);
    auto err = rt.block_on(one(4));
    REQUIRE(err.size() == 1);
    CHECK(mc::is(err[0].error(), mc::errc::object_not_found));
    // The caller cancelled (its deadline) while the one child sleeps: the
    // child returns cancelled through its error path, no exception, and the
    // caller's own later awaits behave as before (they throw only if the
    // caller had asked for that: the setting is restored).
    bool after_ran = false;
    auto r = rt.block_on(mc::with_deadline(
        [&]() -> mc::task<mc::result<int>> {
          auto out = co_await one(2);  // sleeps ~70 s unless cancelled
          REQUIRE(out.size() == 1);
          CHECK(mc::is(out[0].error(), mc::errc::cancelled));
          // throw_if_cancelled is off here (with_deadline's child) and must
          // still be: this await returns instead of throwing.
          (void)co_await mc::sleep_for(1ms);
          after_ran = true;
          co_return 1;
        }(),
        50ms));
    CHECK(mc::is(r.error(), mc::errc::timeout));
    CHECK(cancelled == 1);
    CHECK(after_ran);
    // A cancelled caller before the start: cancelled, the task never runs.
    auto pre = rt.block_on(mc::with_deadline(
        [&]() -> mc::task<mc::result<int>> {
          (void)co_await mc::sleep_for(std::chrono::hours(1));  // cut by the deadline
          auto out = co_await one(3);
          REQUIRE(out.size() == 1);
          CHECK(mc::is(out[0].error(), mc::errc::cancelled));
          co_return 2;
        }(),
        20ms));
    CHECK(mc::is(pre.error(), mc::errc::timeout));
    // An exception thrown by the one task propagates.
    auto thrower = []() -> mc::task<mc::result<int>> {
      throw std::runtime_error("boom");
      co_return 0;
    };
    CHECK_THROWS_AS(rt.block_on([&]() -> mc::task<int> {
      std::vector<mc::task<mc::result<int>>> v;
      v.push_back(thrower());
      auto out = co_await mc::when_all(std::move(v));
      co_return static_cast<int>(out.size());
    }()),
                    std::runtime_error);
  }
}
