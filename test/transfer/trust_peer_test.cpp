// Same-host trust with real processes: engines in other pid namespaces, a
// non-root engine the kernel refuses to attach to, and a same-host peer
// frozen (SIGSTOP) while it holds a grant on our memory.
#include "child_process.hpp"
#include "peer_process.hpp"
#include "transfer_fixture.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "mc/runtime/when_all.hpp"

#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

using namespace std::chrono_literals;
using namespace mc::transfer;
using mc::transfer::test::bytes;
using mc::transfer::test::cbytes;
using mc::transfer::test::child_process;
using mc::transfer::test::helper_path;
using mc::transfer::test::loopback_options;
using mc::transfer::test::read_ready;
using mc::transfer::test::serve_command;

namespace {

/// True when `args` runs and exits 0 (used to probe what the kernel allows).
bool runs(const std::vector<std::string>& args) {
  child_process p(args);
  return p.started() && p.wait() == 0;
}

/// `prefix` followed by `args`: a command run under a wrapper (unshare, setpriv).
std::vector<std::string> prefixed(std::vector<std::string> prefix, const std::vector<std::string>& args) {
  prefix.insert(prefix.end(), args.begin(), args.end());
  return prefix;
}

std::vector<std::string> in_new_pid_ns(const std::vector<std::string>& args) {
  return prefixed({"unshare", "--pid", "--fork", "--kill-child"}, args);
}

std::vector<std::string> as_nobody(const std::vector<std::string>& args) {
  return prefixed({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}, args);
}

std::vector<std::string> client_args(const std::string& force, const std::vector<remote_buffer>& ds) {
  std::vector<std::string> v{helper_path(), "clients", force};
  for (const auto& d : ds) {
    v.push_back(d.endpoint);
    v.push_back(std::to_string(d.address));
    v.push_back(std::to_string(d.length));
    v.push_back(std::to_string(d.token));
  }
  return v;
}

/// Runs a clients helper and returns its "VIA i kind" lines (exit code in rc).
std::vector<std::string> run_clients(const std::vector<std::string>& args, int& rc) {
  child_process c(args);
  REQUIRE(c.started());
  std::vector<std::string> lines;
  while (auto l = c.read_line(60s)) {
    if (l->starts_with("VIA ")) lines.push_back(*l);
    if (l->starts_with("FALLBACKS")) break;
  }
  rc = c.wait();
  return lines;
}

}  // namespace

TEST_SUITE("transfer_trust_peer") {
  TEST_CASE("engines in other pid namespaces on one network namespace fall back to TCP in both directions") {
    if (!runs(in_new_pid_ns({"true"}))) {
      MESSAGE("SKIPPED: the kernel does not let this test create a pid namespace (unshare --pid)");
      return;
    }
    child_process peer(in_new_pid_ns(serve_command(6u << 20)));
    auto d = read_ready(peer, 10s);
    REQUIRE_MESSAGE(d.has_value(), "the peer in its own pid namespace did not report READY");
    mc::runtime::runtime rt(2);
    rt.start();
    auto o = loopback_options(std::nullopt);
    o.enable_in_process = false;
    engine a(rt, o);
    REQUIRE(a.start());
    // Parent namespace -> child namespace: the peer's abstract socket is
    // visible (shared network namespace), its pid namespace is not ours.
    for (std::size_t n : {std::size_t(1), std::size_t(65537), std::size_t(3u << 20) + 5}) {
      auto src = mc::test::random_bytes(n, n);
      auto part = *d;
      part.length = n;
      REQUIRE(rt.block_on(a.write(cbytes(src), part)).has_value());
      std::vector<std::uint8_t> back(n);
      REQUIRE(rt.block_on(a.read(bytes(back), part)).has_value());
      CHECK(mc::test::checksum(back.data(), n) == mc::test::checksum(src.data(), n));
    }
    auto s = a.stats();
    CHECK(s.initiated[std::size_t(transport_kind::same_host)].write_ops == 0);
    CHECK(s.initiated[std::size_t(transport_kind::same_host)].errors == 0);
    CHECK(s.initiated[std::size_t(transport_kind::tcp)].write_ops == 3);
    CHECK(s.same_host_fallbacks >= 1);
    // Child namespace -> parent namespace (our pid is invisible there), and
    // sibling -> sibling, automatic and forced same-host: TCP, all intact.
    std::vector<std::uint8_t> mine(2u << 20);
    auto reg = a.register_memory(mine.data(), mine.size());
    REQUIRE(reg);
    for (const char* force : {"auto", "same_host"}) {
      CAPTURE(force);
      int rc = -1;
      auto via = run_clients(in_new_pid_ns(client_args(force, {reg->describe(), *d})), rc);
      CHECK(rc == 0);
      CHECK(via == std::vector<std::string>{"VIA 0 tcp", "VIA 1 tcp"});
    }
    a.stop();
  }

  TEST_CASE("a peer the kernel refuses to attach to (EPERM) is reached over TCP while another uses same-host") {
    // The client runs without CAP_SYS_PTRACE; the first peer is not dumpable,
    // so process_vm_* against it fails with EPERM; the second one is fine.
    const std::vector<std::string> no_ptrace{"setpriv", "--bounding-set", "-sys_ptrace", "--inh-caps", "-sys_ptrace"};
    auto without_ptrace = [&](const std::vector<std::string>& args) { return prefixed(no_ptrace, args); };
    if (!runs(without_ptrace({"true"}))) {
      MESSAGE("SKIPPED: setpriv cannot drop CAP_SYS_PTRACE here");
      return;
    }
    ::setenv("MC_TEST_NONDUMPABLE", "1", 1);
    child_process locked(without_ptrace(serve_command(4u << 20)));
    ::unsetenv("MC_TEST_NONDUMPABLE");
    // Same capabilities as the client (the kernel also wants the target's
    // capabilities to be a subset of the caller's).
    child_process open_peer(without_ptrace(serve_command(4u << 20)));
    auto d_locked = read_ready(locked, 10s);
    auto d_open = read_ready(open_peer, 10s);
    REQUIRE(d_locked.has_value());
    REQUIRE(d_open.has_value());
    for (const char* force : {"auto", "same_host"}) {
      CAPTURE(force);
      int rc = -1;
      auto via = run_clients(without_ptrace(client_args(force, {*d_locked, *d_open})), rc);
      std::string seen;
      for (const auto& v : via) seen += v + "; ";
      CAPTURE(seen);
      CHECK(rc == 0);  // every transfer succeeded, with checksums
      CHECK(via == std::vector<std::string>{"VIA 0 tcp", "VIA 1 same_host"});
    }
  }

  TEST_CASE("a same-host peer running as another user is reached over TCP") {
    if (!runs(as_nobody({"true"}))) {
      MESSAGE("SKIPPED: setpriv cannot switch to uid 65534 here");
      return;
    }
    // The unprivileged user's io_uring rings share a small locked-memory
    // budget: one runtime thread.
    ::setenv("MC_TEST_HELPER_THREADS", "1", 1);
    child_process nobody(as_nobody(serve_command(1u << 20)));
    ::unsetenv("MC_TEST_HELPER_THREADS");
    auto d = read_ready(nobody, 10s);
    REQUIRE(d.has_value());
    mc::runtime::runtime rt(1);
    rt.start();
    auto o = loopback_options(std::nullopt);
    o.enable_in_process = false;
    engine a(rt, o);
    REQUIRE(a.start());
    auto src = mc::test::random_bytes(100001, 3);
    auto part = *d;
    part.length = src.size();
    REQUIRE(rt.block_on(a.write(cbytes(src), part)).has_value());
    std::vector<std::uint8_t> back(src.size());
    REQUIRE(rt.block_on(a.read(bytes(back), part)).has_value());
    CHECK(back == src);
    auto s = a.stats();
    CHECK(s.initiated[std::size_t(transport_kind::tcp)].write_ops == 1);
    CHECK(s.initiated[std::size_t(transport_kind::same_host)].write_ops == 0);
    CHECK(s.same_host_fallbacks >= 1);
    a.stop();
  }

  TEST_CASE(
      "a same-host peer frozen while holding a grant stalls nothing: unregister returns at once, timers fire, "
      "a transfer to it fails at its deadline") {
    mc::runtime::runtime rt(1);
    rt.start();
    auto o = loopback_options(std::nullopt);
    o.enable_in_process = false;
    engine a(rt, o);
    REQUIRE(a.start());
    std::vector<std::uint8_t> target(64u << 20);
    auto reg = a.register_memory(target.data(), target.size(), region_access::remote_write);
    REQUIRE(reg);
    auto d = reg->describe();
    child_process peer({helper_path(), "hammer", d.endpoint, std::to_string(d.address), std::to_string(d.length),
                        std::to_string(d.token), std::to_string(1u << 20)});
    auto theirs = read_ready(peer, 10s);
    REQUIRE(theirs.has_value());
    auto line = peer.read_line(30s);
    REQUIRE_MESSAGE((line && *line == "WRITING"), "the peer never wrote into our region");
    // Freeze the peer; until it is frozen while holding a grant on `target`,
    // let it run on (the stop must not land between two of its writes).
    bool frozen_in_grant = false;
    for (int attempt = 0; attempt < 50 && !frozen_in_grant; ++attempt) {
      peer.kill(SIGSTOP);
      int st = 0;
      REQUIRE(::waitpid(peer.pid(), &st, WUNTRACED) == peer.pid());  // the event: every thread is stopped
      REQUIRE(WIFSTOPPED(st));
      frozen_in_grant =
          a.stats().same_host_grants_held >= 1;  // one per chunk it is moving (up to 4: 2 threads x 2 claimers)
      if (!frozen_in_grant) {
        const auto seen = a.stats().served_write_ops;
        peer.kill(SIGCONT);
        const auto until = std::chrono::steady_clock::now() + 10s;
        while (a.stats().served_write_ops == seen && std::chrono::steady_clock::now() < until)
          std::this_thread::yield();
      }
    }
    REQUIRE_MESSAGE(frozen_in_grant, "the peer was never frozen inside a grant");

    struct outcome {
      std::chrono::steady_clock::duration unregister_took{}, read_took{}, max_gap{};
      int ticks = 0;
      mc::result<void> read;
    } out;
    std::atomic<bool> done{false};
    auto ticker = [](std::atomic<bool>* done, outcome* out) -> mc::task<int> {
      boost::asio::steady_timer tm(co_await boost::asio::this_coro::executor);
      auto last = std::chrono::steady_clock::now();
      while (!done->load()) {
        tm.expires_after(5ms);
        co_await tm.async_wait(boost::asio::use_awaitable);
        auto now = std::chrono::steady_clock::now();
        out->max_gap = std::max(out->max_gap, now - last);
        last = now;
        ++out->ticks;
      }
      co_return 0;
    };
    auto body = [](engine* a, mc::transfer::region* reg, remote_buffer theirs, std::atomic<bool>* done,
                   outcome* out) -> mc::task<int> {
      auto t0 = std::chrono::steady_clock::now();
      reg->reset();  // on the runtime thread, while the frozen peer holds a grant
      out->unregister_took = std::chrono::steady_clock::now() - t0;
      std::vector<std::uint8_t> buf(theirs.length);
      t0 = std::chrono::steady_clock::now();
      out->read = co_await a->read(std::as_writable_bytes(std::span(buf)), theirs, 500ms);
      out->read_took = std::chrono::steady_clock::now() - t0;
      done->store(true);
      co_return 0;
    };
    std::vector<mc::task<int>> both;
    both.push_back(ticker(&done, &out));
    both.push_back(body(&a, &*reg, *theirs, &done, &out));
    rt.block_on(mc::when_all(std::move(both)), 0);
    using ms = std::chrono::milliseconds;
    MESSAGE("unregister " << std::chrono::duration_cast<std::chrono::microseconds>(out.unregister_took).count()
                          << " us, read " << std::chrono::duration_cast<ms>(out.read_took).count() << " ms, ticks "
                          << out.ticks << ", longest gap " << std::chrono::duration_cast<ms>(out.max_gap).count()
                          << " ms");
    CHECK(out.unregister_took < 50ms);
    CHECK(a.stats().revoked_with_grants == 1);  // the peer really held a grant
    REQUIRE(out.read.has_error());
    CHECK(mc::is(out.read.error(), mc::errc::timeout));
    CHECK(out.read_took >= 450ms);
    CHECK(out.read_took < 1500ms);
    CHECK(out.ticks >= 50);  // 5 ms timer during a >= 500 ms wait
    CHECK(out.max_gap < 100ms);
    peer.kill(SIGKILL);
    peer.wait();
    a.stop();
  }
}
