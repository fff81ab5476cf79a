#pragma once
// The two-process transfer tests' shared pieces: the serving side of a peer
// process, the parent reading its READY line, and a read cut short by killing
// the peer. Used by test/transfer and test/rdma.
#include "child_process.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/transfer/engine.hpp"
#include "test_support.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace mc::transfer::test {

/// The transfer_peer_helper binary: $TRANSFER_HELPER (set by meson), else
/// ./transfer_peer_helper.
inline std::string helper_path() {
  const char* p = std::getenv("TRANSFER_HELPER");
  return p ? p : "./transfer_peer_helper";
}

/// The command line of a helper that serves `size` random bytes on `bind`
/// (see serve_peer); prefix it (setpriv, unshare, ...) as a test needs.
inline std::vector<std::string> serve_command(std::size_t size, const std::string& bind = "127.0.0.1") {
  return {helper_path(), "serve", bind, std::to_string(size)};
}

/// Prints the line read_ready() parses, "READY endpoint address length
/// token", for `d` on stdout and flushes it.
inline void print_ready(const remote_buffer& d) {
  std::printf("READY %s %llu %llu %llu\n", d.endpoint.c_str(), (unsigned long long)d.address,
              (unsigned long long)d.length, (unsigned long long)d.token);
  std::fflush(stdout);
}

/// Serving side of a peer process: an engine with `o` on a `threads`-thread runtime
/// registers `size` random bytes (seed 4242), prints "READY endpoint address
/// length token" and serves until stdin closes. Returns the exit code: 0, or
/// 2 when the engine cannot start or register (reason on stderr after `who`).
inline int serve_peer(const engine_options& o, std::size_t size, const char* who, std::size_t threads = 2) {
  mc::runtime::runtime rt(threads);
  rt.start();
  try {
    engine e(rt, o);
    if (auto r = e.start(); !r) {
      std::fprintf(stderr, "%s: start failed: %s\n", who, r.error().message().c_str());
      return 2;
    }
    auto buf = mc::test::random_bytes(size, 4242);
    auto reg = e.register_memory(buf.data(), buf.size());
    if (!reg) return 2;
    print_ready(reg->describe());
    char c;
    while (::read(0, &c, 1) > 0) {}
    e.stop();
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "%s: %s\n", who, ex.what());
    return 2;
  }
  return 0;
}

/// The peer's buffer from its "READY ..." line (other lines are skipped);
/// nullopt when none arrives within `timeout` or the peer exits first.
inline std::optional<remote_buffer> read_ready(child_process& peer, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    auto line = peer.read_line(left);
    if (!line) return std::nullopt;  // EOF or timeout
    if (!line->starts_with("READY ")) continue;
    std::istringstream is(*line);
    std::string ready;
    remote_buffer d;
    is >> ready >> d.endpoint >> d.address >> d.length >> d.token;
    if (!is) return std::nullopt;
    return d;
  }
}

/// How a read ended that was running when its peer was SIGKILLed.
struct killed_read {
  mc::result<void> result;
  std::chrono::steady_clock::duration took;  ///< from the kill to the end of the read
};

/// Starts a READ of all of `buf` from `d` (60 s deadline) on another thread,
/// SIGKILLs `peer` while it runs, reaps it and reports the read's outcome.
inline killed_read read_while_killing(mc::runtime::runtime& rt, engine& a, std::vector<std::uint8_t>& buf,
                                      const remote_buffer& d, child_process& peer) {
  killed_read out{mc::result<void>{}, {}};
  std::thread t(
      [&] { out.result = rt.block_on(a.read(std::as_writable_bytes(std::span(buf)), d, std::chrono::seconds(60))); });
  peer.kill(SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  t.join();
  peer.wait();
  out.took = std::chrono::steady_clock::now() - killed_at;
  return out;
}

}  // namespace mc::transfer::test
