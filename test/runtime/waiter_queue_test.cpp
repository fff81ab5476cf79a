#include "mc/runtime/deadline.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/runtime/waiter_queue.hpp"
#include "test_support.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <future>
#include <optional>
#include <vector>

using namespace std::chrono_literals;

using mc::test::yield_once;

namespace {

/// Yields until `pred` holds (bounded: fails the test instead of hanging).
template <class P>
mc::task<bool> yield_until(P pred) {
  for (int i = 0; i < 100000; ++i) {
    if (pred()) co_return true;
    co_await yield_once();
  }
  co_return pred();
}

std::size_t queued(const mc::waiter_queue& q) {
  auto lk = q.lock();
  return q.size();
}

struct hook_count {
  int calls = 0;
  static void hook(void* self, mc::waiter_queue::wakeups&) noexcept { ++static_cast<hook_count*>(self)->calls; }
};

mc::task<void> wait_and_record(mc::waiter_queue& q, std::uint64_t tag, std::vector<std::uint64_t>& got) {
  auto r = co_await q.wait(q.lock(), tag);
  REQUIRE(r.has_value());
  got.push_back(*r);
}

enum class how { plain, timed, uncancellable };

/// Takes the lock only when it runs (a task from wait() holds the lock from
/// its creation, so it must be awaited at once, never spawned).
mc::task<mc::result<std::uint64_t>> waiting(mc::waiter_queue& q, std::uint64_t tag, how h) {
  if (h == how::timed) co_return co_await q.wait_for(q.lock(), tag, std::chrono::hours(1));
  if (h == how::uncancellable) co_return co_await q.wait_uncancellable(q.lock(), tag);
  co_return co_await q.wait(q.lock(), tag);
}

/// Spawns `t` on `ex` with its cancellation slot bound to `sig`; `out` receives its result.
void spawn_cancellable(mc::executor ex, mc::task<mc::result<std::uint64_t>> t, boost::asio::cancellation_signal& sig,
                       std::optional<mc::result<std::uint64_t>>& out) {
  boost::asio::co_spawn(
      ex, std::move(t),
      boost::asio::bind_cancellation_slot(sig.slot(), [&out](std::exception_ptr e, mc::result<std::uint64_t> r) {
        REQUIRE_FALSE(e);
        out = std::move(r);
      }));
}

}  // namespace

TEST_SUITE("waiter_queue") {
  TEST_CASE("destruction with nobody waiting (never used, and after every waiter was granted)") {
    { mc::waiter_queue q; }
    mc::runtime::runtime rt(1);
    rt.start();
    std::vector<std::uint64_t> got;
    rt.block_on([&]() -> mc::task<void> {
      mc::waiter_queue q;
      auto ex = co_await boost::asio::this_coro::executor;
      boost::asio::co_spawn(ex, wait_and_record(q, 1, got), boost::asio::detached);
      CHECK(co_await yield_until([&] { return queued(q) != 0; }));
      {
        mc::waiter_queue::wakeups w;
        auto lk = q.lock();
        q.grant_all(w, 5);
        CHECK(q.empty());
      }
      CHECK(co_await yield_until([&] { return got.size() == 1; }));
    }());
    REQUIRE(got.size() == 1);
    CHECK(got[0] == 5);
    rt.stop();
  }

  TEST_CASE("waiters are granted in FIFO order, each with its own value; tags are read at the front") {
    mc::runtime::runtime rt(1);
    rt.start();
    mc::waiter_queue q;
    std::vector<std::uint64_t> got;
    rt.block_on([&]() -> mc::task<void> {
      auto ex = co_await boost::asio::this_coro::executor;
      for (std::uint64_t tag = 1; tag <= 3; ++tag) {
        boost::asio::co_spawn(ex, wait_and_record(q, tag * 100, got), boost::asio::detached);
        CHECK(co_await yield_until([&] { return queued(q) == tag; }));
      }
      mc::waiter_queue::wakeups w;
      {
        auto lk = q.lock();
        CHECK(q.front_tag() == 100);
        q.grant_front(w, 7);
        CHECK(q.front_tag() == 200);
        q.grant_front(w, 8);
        CHECK(q.front_tag() == 300);
        q.grant_front(w, 9);
        CHECK(q.empty());
      }
      CHECK(got.empty());  // nothing resumes before the wakeups are flushed
      w.flush();
      CHECK(co_await yield_until([&] { return got.size() == 3; }));
    }());
    REQUIRE(got.size() == 3);
    CHECK(got[0] == 7);
    CHECK(got[1] == 8);
    CHECK(got[2] == 9);
    rt.stop();
  }

  TEST_CASE("a waiter cancelled while waiting returns cancelled, leaves the queue and runs the leave hook") {
    mc::runtime::runtime rt(1);
    rt.start();
    hook_count hc;
    mc::waiter_queue q(&hook_count::hook, &hc);
    std::vector<std::uint64_t> got;
    rt.block_on([&]() -> mc::task<void> {
      auto ex = co_await boost::asio::this_coro::executor;
      boost::asio::cancellation_signal sig;
      std::optional<mc::result<std::uint64_t>> first;
      spawn_cancellable(ex, waiting(q, 1, how::plain), sig, first);
      boost::asio::co_spawn(ex, wait_and_record(q, 2, got), boost::asio::detached);
      CHECK(co_await yield_until([&] { return queued(q) == 2; }));
      sig.emit(boost::asio::cancellation_type::terminal);
      CHECK(co_await yield_until([&] { return first.has_value(); }));
      REQUIRE(first.has_value());
      REQUIRE_FALSE(first->has_value());
      CHECK(mc::is(first->error(), mc::errc::cancelled));
      CHECK(hc.calls == 1);
      {
        mc::waiter_queue::wakeups w;
        auto lk = q.lock();
        REQUIRE(q.size() == 1);
        CHECK(q.front_tag() == 2);  // the one behind moved up
        q.grant_front(w, 42);
      }
      CHECK(co_await yield_until([&] { return got.size() == 1; }));
      sig.emit(boost::asio::cancellation_type::terminal);  // late: nothing happens
    }());
    REQUIRE(got.size() == 1);
    CHECK(got[0] == 42);
    CHECK(hc.calls == 1);
    rt.stop();
  }

  TEST_CASE("wait_for returns timeout when not granted in time, and the value when granted first") {
    mc::runtime::runtime rt(1);
    rt.start();
    hook_count hc;
    mc::waiter_queue q(&hook_count::hook, &hc);
    rt.block_on([&]() -> mc::task<void> {
      auto r = co_await q.wait_for(q.lock(), 1, 1ms);
      REQUIRE_FALSE(r.has_value());
      CHECK(mc::is(r.error(), mc::errc::timeout));
      CHECK(queued(q) == 0);
      CHECK(hc.calls == 1);

      auto ex = co_await boost::asio::this_coro::executor;
      boost::asio::cancellation_signal sig;
      std::optional<mc::result<std::uint64_t>> out;
      spawn_cancellable(ex, waiting(q, 2, how::timed), sig, out);
      CHECK(co_await yield_until([&] { return queued(q) != 0; }));
      {
        mc::waiter_queue::wakeups w;
        auto lk = q.lock();
        q.grant_front(w, 11);
      }
      CHECK(co_await yield_until([&] { return out.has_value(); }));
      REQUIRE(out.has_value());
      REQUIRE(out->has_value());
      CHECK(**out == 11);
    }());
    CHECK(hc.calls == 1);
    rt.stop();
  }

  TEST_CASE("a coroutine cancelled before waiting is not queued; wait_uncancellable ignores cancellation") {
    mc::runtime::runtime rt(1);
    rt.start();
    mc::waiter_queue q;
    rt.block_on([&]() -> mc::task<void> {
      // with_deadline cancels the waiter at the deadline: it unwinds as cancelled.
      auto r = co_await mc::with_deadline(q.wait(q.lock(), 1), 1ms);
      REQUIRE_FALSE(r.has_value());
      CHECK(mc::is(r.error(), mc::errc::timeout));
      CHECK(queued(q) == 0);

      auto ex = co_await boost::asio::this_coro::executor;
      boost::asio::cancellation_signal sig;
      std::optional<mc::result<std::uint64_t>> out;
      spawn_cancellable(ex, waiting(q, 3, how::uncancellable), sig, out);
      CHECK(co_await yield_until([&] { return queued(q) != 0; }));
      sig.emit(boost::asio::cancellation_type::terminal);
      for (int i = 0; i < 10; ++i) co_await yield_once();
      CHECK_FALSE(out.has_value());
      CHECK(queued(q) == 1);
      {
        mc::waiter_queue::wakeups w;
        auto lk = q.lock();
        q.grant_all(w, 4);
      }
      CHECK(co_await yield_until([&] { return out.has_value(); }));
      REQUIRE(out.has_value());
      REQUIRE(out->has_value());
      CHECK(**out == 4);
    }());
    rt.stop();
  }

  TEST_CASE("stress: a grant from another thread racing a cancel: exactly one wins, nothing is lost") {
    mc::runtime::runtime rt(2);
    rt.start();
    mc::waiter_queue q;
    int granted = 0, cancelled = 0;
    for (int round = 0; round < 2000; ++round) {
      boost::asio::cancellation_signal sig;
      std::optional<mc::result<std::uint64_t>> out;
      rt.block_on([&]() -> mc::task<void> {
        spawn_cancellable(co_await boost::asio::this_coro::executor, waiting(q, 0, how::plain), sig, out);
        REQUIRE(co_await yield_until([&] { return queued(q) == 1; }));
      }());
      // Thread 1 grants while thread 0 (the waiter's own thread) cancels.
      std::promise<bool> did_grant;
      boost::asio::post(rt.executor(1), [&] {
        mc::waiter_queue::wakeups w;
        auto lk = q.lock();
        bool any = !q.empty();
        if (any) q.grant_front(w, static_cast<std::uint64_t>(round));
        did_grant.set_value(any);
      });
      rt.block_on([&]() -> mc::task<void> {
        sig.emit(boost::asio::cancellation_type::terminal);
        co_await yield_until([&] { return out.has_value(); });
      }());
      bool g = did_grant.get_future().get();
      REQUIRE(out.has_value());
      if (g) {
        REQUIRE(out->has_value());  // a grant always reaches its waiter
        CHECK(**out == static_cast<std::uint64_t>(round));
        ++granted;
      } else {
        REQUIRE_FALSE(out->has_value());
        CHECK(mc::is(out->error(), mc::errc::cancelled));
        ++cancelled;
      }
      REQUIRE(queued(q) == 0);
    }
    CHECK(granted + cancelled == 2000);
    rt.stop();
  }
}
