#pragma once
/// RPC server: listens on host:port, spreads accepted connections over runtime
/// threads, serves named services, drains on stop. KJ-free; services are
/// registered with a `service_factory` from "mc/rpc/capnp.hpp".
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mc::runtime {
class runtime;
}

namespace mc::rpc {

class service_factory;  // defined in mc/rpc/capnp.hpp

/// The connection a served call arrived on (what the kernel says about it,
/// never what the peer says). Given to per-connection service factories
/// (service_factory::per_connection in mc/rpc/capnp.hpp).
struct connection_info {
  std::string remote_address;  ///< the peer's IP ("10.0.0.7", "::1"; IPv4-mapped IPv6 as IPv4); "" = unknown
  std::uint16_t remote_port = 0;
};

struct server_options {
  /// Address to bind ("0.0.0.0", "127.0.0.1", "::"...).
  std::string host = "0.0.0.0";
  /// 0 = ephemeral (read it back with server::port()).
  std::uint16_t port = 0;
  /// Runtime threads 0..threads-1 serve connections (Mooncake's rpc_thread_num).
  std::size_t threads = 2;
  /// stop(): how long in-flight calls may still run before connections close.
  mc::duration drain_timeout = std::chrono::seconds(5);
  /// Connections beyond this are closed right after accept.
  std::size_t max_connections = 4096;
  /// Largest incoming message (capnp traversal limit = this / 8 words); a
  /// bigger one drops the connection that sent it.
  std::size_t max_message_bytes = std::size_t{64} << 20;
  /// A connection with no traffic for this long is closed (even while one of
  /// its calls is still being served: bound handlers by a shorter deadline).
  mc::duration idle_timeout = std::chrono::seconds(300);
  /// A connection whose unsent replies exceed this (peer not reading) is closed.
  std::size_t max_outgoing_bytes = std::size_t{256} << 20;
  /// With the RDMA control plane (MC_RPC_PROTOCOL=rdma, mc/rpc/protocol.hpp):
  /// accept clients' RDMA handshakes. false: every client is served over TCP.
  bool accept_rdma = true;
  /// A new connection must present its auth frame, say TCP or RDMA (and
  /// finish the RDMA handshake) within this (and within idle_timeout), else it
  /// is closed.
  mc::duration handshake_timeout = std::chrono::seconds(10);
  /// Tokens this server accepts (mc/rpc/auth.hpp); at most max_auth_tokens,
  /// each checked by check_auth_token() in start(). Unset: the process-wide
  /// setting (set_auth_tokens()) as it is when each connection is accepted.
  /// Empty: auth off for this server.
  std::optional<std::vector<std::string>> auth_tokens = std::nullopt;
};

/// Counters (approximate while running).
struct server_stats {
  std::size_t connections = 0;         ///< open now
  std::uint64_t accepted = 0;          ///< ever accepted (including refused)
  std::uint64_t refused = 0;           ///< closed at accept because of max_connections
  std::uint64_t idle_closed = 0;       ///< closed by idle_timeout
  std::uint64_t backlog_closed = 0;    ///< closed by max_outgoing_bytes
  std::uint64_t rdma = 0;              ///< connections served over RDMA
  std::uint64_t handshake_failed = 0;  ///< closed before Cap'n Proto started (peer closed, bad hello); a
                                       ///< silent one counts as idle_closed
  std::uint64_t auth_failures = 0;     ///< closed by auth: no auth frame first, malformed frame, token
                                       ///< missing or not accepted (auth on only)
};

/// Lifetime: create, add_service(), start(), ..., stop(), destroy. The runtime
/// must be running from start() until stop() returns and must outlive the server.
/// Thread-safety: call the member functions from one controlling thread.
class server {
 public:
  server(mc::runtime::runtime& rt, server_options opts);
  /// Calls stop() if needed (so do not destroy it on a runtime thread while running).
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// Registers `name` (before start()). The factory runs once per serving
  /// thread, on that thread, with its executor; the capability it returns
  /// answers every connection of that thread. A per-connection factory
  /// (service_factory::per_connection) runs once per connection that asks for
  /// the service, with that connection's connection_info.
  void add_service(std::string name, service_factory factory);

  /// Binds and starts accepting. Errors: errc::invalid_params (bad host, bad
  /// options or auth tokens, already started), errc::rpc_fail (bind/listen failed, e.g.
  /// address in use; see message()).
  mc::result<void> start();

  /// Bound port (after a successful start()).
  std::uint16_t port() const noexcept;

  /// Graceful shutdown: stop accepting, refuse new calls (errc::shutting_down),
  /// wait up to drain_timeout for in-flight calls, then close every
  /// connection (cancelling what is left). Idempotent. Blocking: call from a
  /// non-runtime thread (std::logic_error from a runtime thread).
  void stop();

  /// Same as stop(), as a coroutine: usable from any runtime thread (including
  /// a serving one).
  mc::task<void> stop_async();

  server_stats stats() const;
  /// Human text of the last start() failure.
  const std::string& message() const noexcept;

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace mc::rpc
