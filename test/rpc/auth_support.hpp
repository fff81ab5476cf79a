#pragma once
// Helpers for tests of the RPC auth frame, shared by the rpc and rdma suites.
#include "echo_call.hpp"
#include "mc/rpc/auth.hpp"
#include "mc/rpc/call_options.hpp"
#include "mc/rpc/client.hpp"
#include "mc/rpc/server.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace mc::rpc::test {

/// Sets the process's auth tokens for one scope; restores "auth off" for the
/// rest of the binary whatever a test did.
struct process_tokens {
  explicit process_tokens(std::vector<std::string> t) { REQUIRE(mc::rpc::set_auth_tokens(std::move(t)).empty()); }
  ~process_tokens() { (void)mc::rpc::set_auth_tokens({}); }
};

/// A call's result and the thread's last error message after it.
struct outcome {
  mc::result<void> r;
  std::string message;
};

/// One echo of `size` bytes over a brand-new connection (the thread's cache
/// is emptied first and after), so each call runs the auth handshake (and,
/// with MC_RPC_PROTOCOL=rdma, the RDMA hello) with the current token.
inline mc::task<outcome> fresh_echo(std::string ep, std::size_t size = 1021, std::uint64_t seed = 77,
                                    mc::duration timeout = mc::rpc::default_call_timeout) {
  mc::rpc::close_thread_connections();
  // (gcc 12 miscompiles a braced aggregate with a std::string around a co_await.)
  auto r = co_await echo_call(ep, size, seed, timeout);
  outcome o;
  o.r = r;
  o.message = mc::rpc::last_error_message();
  mc::rpc::close_thread_connections();
  co_return o;
}

/// Waits (at most `limit`) until the server has counted `n` auth failures:
/// the count is made on a server thread right after it closes the
/// connection. Returns whether it got there.
inline bool wait_auth_failures(mc::rpc::server& s, std::uint64_t n,
                               std::chrono::steady_clock::duration limit = std::chrono::seconds(5)) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (s.stats().auth_failures < n) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace mc::rpc::test
