#include "mc/runtime/deadline_queue.hpp"
#include "mc/runtime/runtime.hpp"

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <memory>
#include <vector>

using namespace std::chrono_literals;

namespace {

/// What an entry's expire function records: which entry fired, in order.
struct fire_log {
  std::vector<int> fired;
};
struct tag {
  fire_log* l;
  int id;
};
void record(void* p) noexcept {
  auto* t = static_cast<tag*>(p);
  t->l->fired.push_back(t->id);
}

/// Runs `body(queue, log)` on a one-thread runtime with a fresh queue of
/// that thread; returns what fired, in order.
using queue_ptr = std::shared_ptr<mc::deadline_queue>;
template <class Body>
std::vector<int> run_with_queue(Body body) {
  mc::runtime::runtime rt(1);
  rt.start();
  fire_log l;
  auto out = rt.block_on([](Body& body, fire_log& l) -> mc::task<mc::result<std::vector<int>>> {
    auto q = mc::deadline_queue::make(co_await boost::asio::this_coro::executor);
    co_await body(q, l);
    co_return l.fired;
  }(body, l));
  REQUIRE(out.has_value());
  return *out;
}

}  // namespace

TEST_SUITE("deadline_queue") {
  TEST_CASE("entries fire in deadline order, whatever the order they were added in; removed ones never") {
    auto fired = run_with_queue([](queue_ptr& q, fire_log& l) -> mc::task<void> {
      const auto t0 = std::chrono::steady_clock::now();
      std::array<mc::deadline_queue::entry, 5> e;
      std::array<tag, 5> tags{{{&l, 0}, {&l, 1}, {&l, 2}, {&l, 3}, {&l, 4}}};
      // Out of order, and an earlier one after a later one (the timer re-arms earlier).
      q->add(e[0], t0 + 60ms, record, &tags[0]);
      q->add(e[1], t0 + 20ms, record, &tags[1]);
      q->add(e[2], t0 + 40ms, record, &tags[2]);
      q->add(e[3], t0 + 30ms, record, &tags[3]);
      q->add(e[4], t0 + 50ms, record, &tags[4]);
      CHECK(q->size() == 5);
      e[3].remove();  // removed before its time: never fires
      e[3].remove();  // twice: no effect
      CHECK(q->size() == 4);
      (void)co_await mc::sleep_for(150ms);
      CHECK(q->size() == 0);
      for (int i : {0, 1, 2, 4}) CHECK(e[static_cast<std::size_t>(i)].fired());
      CHECK_FALSE(e[3].fired());
    });
    CHECK(fired == std::vector<int>{1, 2, 4, 0});
  }

  TEST_CASE("an entry removed as the earliest leaves the later ones on time; the queue re-arms after firing") {
    auto fired = run_with_queue([](queue_ptr& q, fire_log& l) -> mc::task<void> {
      const auto t0 = std::chrono::steady_clock::now();
      tag a{&l, 1}, b{&l, 2}, c{&l, 3};
      mc::deadline_queue::entry ea, eb, ec;
      q->add(ea, t0 + 10ms, record, &a);
      q->add(eb, t0 + 30ms, record, &b);
      ea.remove();  // the timer still ends at 10 ms, finds nothing due, re-arms for 30 ms
      (void)co_await mc::sleep_for(60ms);
      CHECK(eb.fired());
      // After everything fired: a new entry arms the timer again.
      q->add(ec, std::chrono::steady_clock::now() + 10ms, record, &c);
      (void)co_await mc::sleep_for(60ms);
      CHECK(ec.fired());
    });
    CHECK(fired == std::vector<int>{2, 3});
  }

  TEST_CASE("a deadline already passed fires at the timer's next run, not inside add; equal deadlines all fire") {
    auto fired = run_with_queue([](queue_ptr& q, fire_log& l) -> mc::task<void> {
      const auto when = std::chrono::steady_clock::now() - 1ms;
      std::array<tag, 3> tags{{{&l, 7}, {&l, 8}, {&l, 9}}};
      std::array<mc::deadline_queue::entry, 3> e;
      for (std::size_t i = 0; i < 3; ++i) q->add(e[i], when, record, &tags[i]);
      CHECK(l.fired.empty());
      (void)co_await mc::sleep_for(20ms);
    });
    CHECK(fired == std::vector<int>{7, 8, 9});  // equal deadlines: in the order added
  }

  TEST_CASE("re-adding an entry moves it; entries destroyed early leave; a queue destroyed first detaches them") {
    auto fired = run_with_queue([](queue_ptr& q, fire_log& l) -> mc::task<void> {
      const auto t0 = std::chrono::steady_clock::now();
      tag a{&l, 1}, b{&l, 2};
      mc::deadline_queue::entry ea;
      q->add(ea, t0 + 10ms, record, &a);
      q->add(ea, t0 + 40ms, record, &a);  // moved later: not due at 10 ms
      CHECK(q->size() == 1);
      {
        mc::deadline_queue::entry eb;
        q->add(eb, t0 + 5ms, record, &b);
        CHECK(q->size() == 2);
      }  // destroyed: out of the queue
      CHECK(q->size() == 1);
      (void)co_await mc::sleep_for(20ms);
      CHECK(l.fired.empty());
      (void)co_await mc::sleep_for(50ms);
      CHECK(ea.fired());
      // Destroying the queue with an entry still in it: the entry is detached
      // (its own destruction later is harmless) and the timer never calls it.
      mc::deadline_queue::entry late;
      q->add(late, std::chrono::steady_clock::now() + 10ms, record, &b);
      q.reset();
      (void)co_await mc::sleep_for(40ms);
      CHECK_FALSE(late.fired());
    });
    CHECK(fired == std::vector<int>{1});
  }
}
