#include "mc/runtime/async_mutex.hpp"
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/runtime/when_all.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <vector>

using namespace std::chrono_literals;

using mc::test::yield_once;

TEST_SUITE("async_mutex") {
  TEST_CASE("try_lock respects exclusive and shared ownership") {
    mc::async_shared_mutex m;
    {
      auto w = m.try_lock();
      CHECK(w.owns_lock());
      CHECK_FALSE(m.try_lock_shared().owns_lock());
      CHECK_FALSE(m.try_lock().owns_lock());
    }
    auto r1 = m.try_lock_shared();
    auto r2 = m.try_lock_shared();
    CHECK(r1.owns_lock());
    CHECK(r2.owns_lock());
    CHECK_FALSE(m.try_lock().owns_lock());
    CHECK(m.snapshot().readers == 2);
    r1.unlock();
    r1.unlock();  // idempotent
    CHECK(m.snapshot().readers == 1);
  }

  TEST_CASE("a waiting writer is granted when the readers leave, and blocks new readers") {
    mc::runtime::runtime rt(1);
    rt.start();
    mc::async_shared_mutex m;
    std::vector<int> order;
    rt.block_on([&]() -> mc::task<void> {
      auto ex = co_await boost::asio::this_coro::executor;
      auto reader = m.try_lock_shared();
      REQUIRE(reader.owns_lock());
      bool writer_done = false, late_reader_done = false;
      // Coroutine lambdas take state as parameters: a capture would dangle
      // once the closure temporary dies after co_spawn returns.
      boost::asio::co_spawn(
          ex,
          [](mc::async_shared_mutex& m, std::vector<int>& order, bool& done) -> mc::task<void> {
            auto g = co_await m.lock();
            REQUIRE(g.has_value());
            order.push_back(1);
            co_await yield_once();
            done = true;
          }(m, order, writer_done),
          boost::asio::detached);
      co_await yield_once();
      CHECK(m.snapshot().waiters == 1);
      // A writer waits, so this reader must queue behind it (no writer starvation).
      CHECK_FALSE(m.try_lock_shared().owns_lock());
      boost::asio::co_spawn(
          ex,
          [](mc::async_shared_mutex& m, std::vector<int>& order, bool& done) -> mc::task<void> {
            auto g = co_await m.lock_shared();
            REQUIRE(g.has_value());
            order.push_back(2);
            done = true;
          }(m, order, late_reader_done),
          boost::asio::detached);
      co_await yield_once();
      reader.unlock();
      for (int i = 0; i < 20 && !(writer_done && late_reader_done); ++i) co_await yield_once();
      CHECK(writer_done);
      CHECK(late_reader_done);
    }());
    CHECK(order == std::vector<int>{1, 2});
  }

  TEST_CASE("a lock wait can be cancelled by a deadline and the mutex stays usable") {
    mc::runtime::runtime rt(1);
    rt.start();
    mc::async_shared_mutex m;
    rt.block_on([&]() -> mc::task<void> {
      auto held = m.try_lock();
      auto r = co_await mc::with_deadline(
          [&]() -> mc::task<mc::result<int>> {
            auto g = co_await m.lock();
            if (!g) co_return g.error();
            co_return 1;
          }(),
          20ms);
      CHECK(mc::is(r.error(), mc::errc::timeout));
      CHECK(m.snapshot().waiters == 0);
      auto rs = co_await mc::with_deadline(
          [&]() -> mc::task<mc::result<int>> {
            auto g = co_await m.lock_shared();
            if (!g) co_return g.error();
            co_return 1;
          }(),
          20ms);
      CHECK(mc::is(rs.error(), mc::errc::timeout));
      held.unlock();
      auto g = co_await m.lock();
      CHECK(g.has_value());
    }());
  }

  TEST_CASE("cancelling a queued writer releases the readers queued behind it") {
    mc::runtime::runtime rt(1);
    rt.start();
    mc::async_shared_mutex m;
    rt.block_on([&]() -> mc::task<void> {
      auto ex = co_await boost::asio::this_coro::executor;
      auto reader = m.try_lock_shared();
      bool second_reader = false;
      boost::asio::co_spawn(ex,
                            mc::with_deadline(
                                [](mc::async_shared_mutex& m) -> mc::task<mc::result<int>> {
                                  auto g = co_await m.lock();
                                  if (!g) co_return g.error();
                                  co_return 1;
                                }(m),
                                30ms),
                            boost::asio::detached);
      co_await yield_once();
      boost::asio::co_spawn(
          ex,
          [](mc::async_shared_mutex& m, bool& out) -> mc::task<void> {
            auto g = co_await m.lock_shared();
            out = g.has_value();
          }(m, second_reader),
          boost::asio::detached);
      co_await mc::sleep_for(100ms);
      CHECK(second_reader);  // granted although the first reader still holds its lock
      CHECK(m.snapshot().readers == 1);
    }());
  }

  TEST_CASE("waiters on other threads are resumed on their own thread") {
    mc::runtime::runtime rt(2);
    rt.start();
    mc::async_mutex m;
    auto held = m.try_lock();
    std::atomic<int> resumed_on{-2};
    std::promise<void> done;
    boost::asio::co_spawn(
        rt.executor(1),
        [](mc::async_mutex& m, std::atomic<int>& on, std::promise<void>& done) -> mc::task<void> {
          {
            auto g = co_await m.lock();
            on = mc::runtime::runtime::current_index();
          }
          // After the unlock: once told, the test may destroy `m` (ASan saw
          // the guard's unlock run on a destroyed mutex).
          done.set_value();
        }(m, resumed_on, done),
        boost::asio::detached);
    // Release from thread 0.
    rt.block_on(
        [&]() -> mc::task<void> {
          co_await mc::sleep_for(10ms);
          held.unlock();
        }(),
        0);
    done.get_future().wait();
    CHECK(resumed_on.load() == 1);
  }
}

namespace {
struct shared_state {
  mc::async_shared_mutex m;
  std::atomic<int> readers{0}, writers{0}, violations{0}, completed{0};
  long long counter = 0;  // protected by m's exclusive side
};

mc::task<mc::result<int>> stress_one(shared_state& st, bool writer) {
  if (writer) {
    auto g = co_await st.m.lock();
    if (st.writers.fetch_add(1) != 0 || st.readers.load() != 0) ++st.violations;
    ++st.counter;
    co_await yield_once();
    st.writers.fetch_sub(1);
  } else {
    auto g = co_await st.m.lock_shared();
    st.readers.fetch_add(1);
    if (st.writers.load() != 0) ++st.violations;
    co_await yield_once();
    st.readers.fetch_sub(1);
  }
  ++st.completed;
  co_return 0;
}
}  // namespace

TEST_SUITE("async_mutex stress") {
  TEST_CASE("thousands of coroutines on several threads keep the reader/writer invariant") {
    constexpr int threads = 4;
    constexpr int per_thread = 1500;
    mc::runtime::runtime rt(threads);
    rt.start();
    shared_state st;
    std::vector<std::future<void>> futs;
    for (int t = 0; t < threads; ++t) {
      auto p = std::make_shared<std::promise<void>>();
      futs.push_back(p->get_future());
      boost::asio::co_spawn(
          rt.executor(t),
          [](shared_state& st, int t) -> mc::task<void> {
            std::vector<mc::task<mc::result<int>>> v;
            for (int i = 0; i < per_thread; ++i) v.push_back(stress_one(st, (i + t) % 4 == 0));
            co_await mc::when_all(std::move(v));
          }(st, t),
          [p](std::exception_ptr e) {
            if (e)
              p->set_exception(e);
            else
              p->set_value();
          });
    }
    for (auto& f : futs) {
      REQUIRE(f.wait_for(120s) == std::future_status::ready);  // no lost wake-up
      f.get();
    }
    CHECK(st.violations.load() == 0);
    CHECK(st.completed.load() == threads * per_thread);
    CHECK(st.counter == threads * per_thread / 4);
    auto s = st.m.snapshot();
    CHECK(s.readers == 0);
    CHECK_FALSE(s.writer);
    CHECK(s.waiters == 0);
  }
}
