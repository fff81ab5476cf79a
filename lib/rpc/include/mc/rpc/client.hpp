#pragma once
/// Client-side settings and per-thread RPC state management. KJ-free.
///
/// Every runtime thread that serves or calls RPC owns one KJ event loop hosted
/// on its io_context (created on first use) and one bounded connection cache.
/// Before runtime::stop(), stop every rpc::server, then call
/// `mc::rpc::shutdown(rt)` (blocking, from a non-runtime thread) or
/// `co_await mc::rpc::shutdown_this_thread()` on each thread: it closes the
/// cached connections and destroys the thread's KJ state inside the loop.
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/task.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace mc::runtime {
class runtime;
}

namespace mc::rpc {

/// Bounds of the per-thread client connection cache (Mooncake issue 2930:
/// never unbounded).
struct client_options {
  /// Connections cached per runtime thread; the least recently used one is
  /// closed when a new peer needs a slot (one no call waits on, if any).
  std::size_t max_connections = 64;
  /// A cached connection unused (no connect(), no bytes, no call of this
  /// thread still waiting on it) for this long is closed.
  mc::duration idle_timeout = std::chrono::seconds(60);
  /// Bound on TCP connect + service lookup.
  mc::duration connect_timeout = std::chrono::seconds(3);
  /// Largest message accepted from a server (capnp traversal limit = this / 8 words).
  std::size_t max_message_bytes = std::size_t{64} << 20;
};

/// Sets the options for caches created afterwards (call at startup, before any
/// RPC; thread-safe). Existing caches keep theirs.
void set_client_options(const client_options& opts);
client_options get_client_options();

/// Counters of the calling thread's connection cache (zeros if none exists).
struct client_stats {
  std::size_t cached = 0;         ///< connections in the cache now
  std::uint64_t opened = 0;       ///< TCP connections established
  std::uint64_t evicted = 0;      ///< closed to respect max_connections
  std::uint64_t idle_closed = 0;  ///< closed by idle_timeout
  std::uint64_t broken = 0;       ///< dropped after a disconnect
  std::uint64_t failed = 0;       ///< connect attempts that failed
};
client_stats thread_client_stats();

/// Process-wide RPC connections by transport since start (for /metrics).
struct connection_counters {
  std::uint64_t client_tcp = 0;       ///< opened over TCP (incl. fallbacks)
  std::uint64_t client_rdma = 0;      ///< opened over RDMA
  std::uint64_t client_fallback = 0;  ///< wanted RDMA, the server answered "TCP only"
  std::uint64_t server_tcp = 0;       ///< accepted and served over TCP
  std::uint64_t server_rdma = 0;      ///< accepted and served over RDMA
};
connection_counters connection_counts() noexcept;

/// Closes every cached client connection of the calling thread (in-flight calls
/// on them fail with errc::rpc_fail). Must run on a runtime thread.
void close_thread_connections();

/// Destroys the calling runtime thread's RPC state: the connection cache, the
/// calls still awaited (their coroutines resume with errc::shutting_down) and
/// the KJ event loop. Servers using the thread must be stopped first. Safe to
/// call when the thread never used RPC. The state is recreated on next use.
mc::task<void> shutdown_this_thread();

/// Runs shutdown_this_thread() on every thread of `rt` and waits. Call from a
/// non-runtime thread while `rt` is running, before rt.stop().
void shutdown(mc::runtime::runtime& rt);

/// Text of the last failed call/connect on this thread (diagnostics only; the
/// code is in the returned mc::result).
const std::string& last_error_message();

}  // namespace mc::rpc
