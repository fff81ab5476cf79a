#pragma once
/// Attach service (standalone mode, Mooncake's `setup_dummy`): a process on
/// the same host that runs no node of its own (mc::store::attached_client,
/// mc/store/attached_client.hpp) asks a running mooncake_client node to put /
/// get / check / remove keys on its behalf. The node does the work with its
/// own mc::store::client (its tiers, its master registration, its peers) and
/// moves the value bytes between its memory and the attacher's registered
/// memory with its TransferEngine: same-host process_vm_readv/writev when the
/// engine allows it (same network namespace, same uid, same pid namespace,
/// ptrace permitted), TCP over loopback otherwise, exactly as
/// `transfer_transport=auto` chooses for any peer.
///
/// Control transport: Cap'n Proto (lib/rpc) on a listener bound to
/// 127.0.0.1 only, on a port derived from the node's client_rpc_port
/// (derived_attach_port). Why not Mooncake's abstract unix socket: lib/rpc
/// (auth frame, deadlines, drain, connection cache, bounds) serves TCP only;
/// a loopback listener gives the same reach (same host, same network
/// namespace: what an abstract socket reaches too) with all of that reused.
///
/// Trust: only a peer on loopback whose socket belongs to the node's uid (or
/// root) is served, both read from the kernel (the connection's peer
/// address; the uid of the peer's socket through NETLINK_SOCK_DIAG, the TCP
/// counterpart of SO_PEERCRED, once per connection); any other gets
/// ACCESS_DENIED on every call (counted), also when the kernel cannot tell
/// the uid. The process-wide RPC auth token applies like on every listener
/// (mc/rpc/auth.hpp). The node writes and reads value bytes only at the
/// attacher's TransferEngine on this connection's own IP (loopback) and the
/// port it announces, and only through registered memory (token, range and
/// access checked by the attacher's engine); the same-host transport's own
/// uid / namespace checks decide between process_vm_* and TCP.
///
/// Bounds (attach_server_options): connections; keys and pieces per call
/// (larger calls fail as a whole with INVALID_PARAMS); keys and transferred
/// bytes in flight over all attachers, and node memory staging values read
/// from other nodes: a call past them waits (within its deadline, then
/// TIMEOUT) instead of failing. Every count, size and descriptor of a request
/// is checked before use; an attacher that disconnects mid-call cancels its
/// calls, and every unit, staging buffer and pinned value is released.
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/error.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace mc::runtime {
class runtime;
}

namespace mc::store {

class client;

/// Name of the service on the attach listener.
inline constexpr const char* attach_service_name = "attach";
/// Version of the attach protocol (hello()).
inline constexpr std::uint32_t attach_protocol_version = 1;
/// Most pieces (AttachBuffer descriptors) in one call, all items together.
inline constexpr std::uint32_t max_attach_pieces_per_call = 65536;

/// The attach port of a node whose client RPC port is `client_rpc_port`:
/// client_rpc_port + 1000, wrapped into 1024..65535 (12345 -> 13345). 0 for 0.
constexpr std::uint16_t derived_attach_port(std::uint16_t client_rpc_port) noexcept {
  if (client_rpc_port == 0) return 0;
  constexpr long first = 1024, span = 65536 - 1024, offset = 1000;
  long v = (static_cast<long>(client_rpc_port) + offset - first) % span;
  if (v < 0) v += span;
  return static_cast<std::uint16_t>(first + v);
}

/// The client RPC port of "host:port" / "[v6]:port" (mc::endpoint::parse).
/// Errors: invalid_params (no port, not a number, 0, > 65535, empty or
/// malformed host, an IPv6 host without brackets).
result<std::uint16_t> server_port_of(std::string_view server_address);

struct attach_server_options {
  /// Listening port on 127.0.0.1; 0 = derived_attach_port(node's RPC port).
  /// (Tests that want an ephemeral port pass ephemeral = true.)
  std::uint16_t port = 0;
  bool ephemeral = false;
  /// Runtime threads 0..threads-1 serve attachers.
  std::size_t threads = 1;
  /// Attacher connections at once (more are closed at accept).
  std::size_t max_connections = 64;
  /// Keys in one call at most (more: the call fails with INVALID_PARAMS).
  std::uint32_t max_keys_per_call = 4096;
  /// Keys being served at once over all attachers (calls wait for room).
  std::uint64_t max_inflight_keys = 65536;
  /// Value bytes being transferred at once over all attachers (calls wait).
  std::uint64_t max_inflight_bytes = std::uint64_t{1} << 30;
  /// Node memory staging values that live on other nodes (read by the node,
  /// then written to the attacher); calls wait for room. A single get stages
  /// min(its buffer's size, this), or for buffers above 4 MiB about the
  /// value's size (asked first); a larger value fails with TOO_LARGE.
  std::uint64_t max_staging_bytes = std::uint64_t{256} << 20;
  /// An attacher's timeoutMs is clamped to this.
  std::chrono::milliseconds max_request_timeout = std::chrono::seconds(60);
};

/// Counters and gauges of one attach server (relaxed snapshots).
struct attach_server_stats {
  std::uint64_t connections = 0;             ///< attacher connections accepted (ever)
  std::uint64_t refused = 0;                 ///< calls refused with ACCESS_DENIED (not loopback, or another uid)
  std::uint64_t calls = 0;                   ///< calls served (any outcome)
  std::uint64_t calls_in_flight = 0;         ///< gauge: calls running now
  std::uint64_t inflight_keys = 0;           ///< gauge: keys admitted now
  std::uint64_t inflight_bytes = 0;          ///< gauge: transfer bytes admitted now
  std::uint64_t staging_bytes = 0;           ///< gauge: node memory staging remote values now
  std::uint64_t put_keys = 0, get_keys = 0;  ///< items served
  std::uint64_t staged_gets = 0;             ///< gets served from another node through staging
};

/// The node side: serves the attach protocol for one started client.
/// Thread-safety: start / stop / destruction from one controlling
/// (non-runtime) thread; port(), endpoint() and stats() from any thread.
class attach_server {
 public:
  /// Starts listening on 127.0.0.1 (threads 0..threads-1 of `rt` serve).
  /// `node` must stay started until stop() returns. Call from a non-runtime
  /// thread. Errors: invalid_params (bad options), rpc_fail (bind failed,
  /// e.g. port in use); `why` (if given) names the cause.
  static result<std::unique_ptr<attach_server>> start(mc::runtime::runtime& rt, client& node,
                                                      attach_server_options opts, std::string* why = nullptr);
  /// Calls stop().
  ~attach_server();
  attach_server(const attach_server&) = delete;
  attach_server& operator=(const attach_server&) = delete;

  /// Stops accepting, drains calls in flight (then cancels the rest) and
  /// closes every connection. Blocking; call from a non-runtime thread,
  /// before node.stop(). Idempotent.
  void stop();

  std::uint16_t port() const noexcept;
  /// "127.0.0.1:<port>".
  std::string endpoint() const;
  attach_server_stats stats() const;

  struct impl;

 private:
  explicit attach_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace mc::store
