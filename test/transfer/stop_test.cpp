// engine::stop() completes whatever its peers do: alive with idle connections
// into us, dead (SIGKILL), frozen (SIGSTOP), or in the middle of a transfer.
// A hang fails the test (the stop runs on its own thread, bounded by a
// deadline) instead of hanging the suite.
#include "child_process.hpp"
#include "peer_process.hpp"
#include "transfer_fixture.hpp"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

using namespace std::chrono_literals;
using namespace mc::transfer;
using mc::transfer::test::bytes;
using mc::transfer::test::child_process;
using mc::transfer::test::loopback_options;
using mc::transfer::test::serve_command;

namespace {

/// The loose bound of the tests: stop must never take longer than this.
constexpr auto stop_bound = 10s;

/// Stops `e` on another thread; returns how long it took. A stop still
/// running after stop_bound fails the test and ends the process (a hung
/// stop cannot be unwound).
std::chrono::steady_clock::duration timed_stop(engine& e) {
  auto t0 = std::chrono::steady_clock::now();
  auto done = std::async(std::launch::async, [&] { e.stop(); });
  if (done.wait_for(stop_bound) != std::future_status::ready) {
    std::fprintf(stderr, "engine::stop() still running after %lld s: hung\n",
                 static_cast<long long>(stop_bound.count()));
    std::fflush(stderr);
    std::_Exit(1);
  }
  done.get();
  return std::chrono::steady_clock::now() - t0;
}

/// A helper process serving `size` random bytes.
struct served_peer {
  explicit served_peer(std::size_t size) : proc(serve_command(size)) {
    REQUIRE(proc.started());
    auto d = mc::transfer::test::read_ready(proc, 10000ms);
    REQUIRE_MESSAGE(d.has_value(), "helper did not report READY");
    desc = *d;
  }
  child_process proc;
  remote_buffer desc;
};

}  // namespace

TEST_SUITE("transfer_stop") {
  TEST_CASE("stop completes while a live peer keeps idle TCP and same-host connections into us") {
    // The engine under test serves; the peer (its own runtime, still running)
    // read from it and keeps its pooled connections open and idle. This is
    // the store_bench hang: stop waited for served connections forever.
    mc::runtime::runtime rt_a(2), rt_b(2);
    rt_a.start();
    rt_b.start();
    engine a(rt_a, loopback_options(std::nullopt));
    engine b_tcp(rt_b, loopback_options(transport_kind::tcp));
    engine b_shm(rt_b, loopback_options(transport_kind::same_host));
    REQUIRE(a.start());
    REQUIRE(b_tcp.start());
    REQUIRE(b_shm.start());
    auto mem = mc::test::random_bytes((4u << 20) + 13, 5);
    auto reg = a.register_memory(mem.data(), mem.size());
    REQUIRE(reg);
    for (auto* b : {&b_tcp, &b_shm}) {
      std::vector<std::uint8_t> back(mem.size());
      std::vector<request> reqs;
      for (int i = 0; i < 8; ++i)  // several connections per peer
        reqs.push_back(request::make_read(bytes(back), reg->describe()));
      for (auto& r : rt_b.block_on(b->batch(std::move(reqs), 10s))) REQUIRE(r.has_value());
      CHECK(back == mem);
    }
    CHECK(timed_stop(a) < stop_bound);
    // The peers notice: their next transfer to the stopped engine fails.
    std::vector<std::uint8_t> back(16);
    CHECK_FALSE(rt_b.block_on(b_tcp.read(bytes(back), reg->describe(0, 16), 2s)).has_value());
    b_tcp.stop();
    b_shm.stop();
  }

  TEST_CASE("stop completes after the peer was killed (SIGKILL) or frozen (SIGSTOP)") {
    for (int sig : {SIGKILL, SIGSTOP}) {
      CAPTURE(sig);
      served_peer peer(1u << 20);
      mc::runtime::runtime rt(2);
      rt.start();
      engine e(rt, loopback_options(transport_kind::tcp));
      REQUIRE(e.start());
      std::vector<std::uint8_t> buf(1u << 20);
      REQUIRE(rt.block_on(e.read(bytes(buf), peer.desc, 10s)).has_value());
      peer.proc.kill(sig);
      CHECK(timed_stop(e) < stop_bound);
      if (sig == SIGSTOP) peer.proc.kill(SIGKILL);
      peer.proc.wait();
    }
  }

  TEST_CASE("stop completes in the middle of a transfer to a frozen or a live peer, the transfer fails") {
    for (int sig : {SIGSTOP, 0}) {
      CAPTURE(sig);
      served_peer peer(64u << 20);
      mc::runtime::runtime rt(2);
      rt.start();
      auto o = loopback_options(transport_kind::tcp);
      o.slice_size = 256 * 1024;
      engine e(rt, o);
      REQUIRE(e.start());
      std::vector<std::uint8_t> buf(64u << 20);
      std::promise<void> started;
      auto reads = std::async(std::launch::async, [&] {
        mc::result<void> last;
        bool told = false;
        // Back-to-back 64 MiB reads with a long deadline: one is in flight
        // when stop() begins.
        for (int i = 0; i < 10000; ++i) {
          last = rt.block_on(e.read(bytes(buf), peer.desc, 60s));
          if (!told) {
            started.set_value();
            told = true;
          }
          if (!last) break;
        }
        return last;
      });
      started.get_future().wait();
      if (sig) peer.proc.kill(sig);
      CHECK(timed_stop(e) < stop_bound);
      REQUIRE(reads.wait_for(stop_bound) == std::future_status::ready);
      auto last = reads.get();
      REQUIRE(last.has_error());
      CHECK((mc::is(last.error(), mc::errc::shutting_down) || mc::is(last.error(), mc::errc::cancelled) ||
             mc::is(last.error(), mc::errc::transfer_fail)));
      peer.proc.kill(SIGKILL);
      peer.proc.wait();
    }
  }
}
