#pragma once
/// ClientRpcService: serves the spec's ReadRemoteData / WriteRemoteData (and
/// batch forms, query, remove) to peers, forwarding to the DataManager.
/// KJ-free: registration on an rpc::server happens in the .cpp.
///
/// Every request is untrusted:
/// - Where bytes go: an item naming a client id is transferred only to the
///   transfer endpoint the master has registered for that id (the item's
///   descriptor must name exactly it, else ACCESS_DENIED; unknown id:
///   ACCESS_DENIED); an item without an id (an unregistered requester such as
///   the CLI) goes to this RPC connection's own peer IP with the descriptor's
///   port. Never to an arbitrary host:port.
/// - How much: the requester's deadline is clamped to max_request_timeout; a
///   remote write above max_remote_write_bytes is refused before anything is
///   allocated (nothing is evicted); keys and bytes in flight are bounded per
///   connection and per peer IP (each item of a batch counts). Past a limit
///   the item fails with OVERLOADED.
#include "mc/master/master_client.hpp"
#include "mc/runtime/deadline.hpp"
#include "mc/store/client_options.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace mc::rpc {
class server;
}

namespace mc::transfer {
class engine;
}

namespace mc::store {

class data_manager;

/// Name of the service on the client's RPC port.
inline constexpr const char* client_service_name = "client";

/// Longest per-request timeout a requester ever asks for (the owner clamps
/// further to service_limits::max_request_timeout).
inline constexpr unsigned max_request_timeout_ms = 60'000;
/// Most items in one batch RPC.
inline constexpr unsigned max_batch_items = 4096;

struct client_service_options {
  /// The master to ask where a named requester's transfer endpoint is;
  /// "" = no master: items naming a client id are refused (ACCESS_DENIED).
  std::string master_address;
  std::string cluster_id = "mooncake_cluster";           ///< etcd:// master addresses: the cluster
  mc::master::etcd_security_options etcd_security = {};  ///< etcd:// master addresses: TLS, credentials
  mc::duration master_timeout = std::chrono::seconds(10);
  /// The master client to ask, when set: a copy shares the node's
  /// connections, cached leader and etcd login (master_address,
  /// cluster_id, etcd_security and master_timeout are then not used for
  /// it). Unset: the service makes its own from those options.
  std::optional<mc::master::master_client> master;
  /// The master's answers are cached this long, at most this many.
  mc::duration registration_ttl = std::chrono::seconds(2);
  std::size_t registration_cache_max = 4096;
  service_limits limits;
};

/// The service options of a client node (its master, rpc_timeout, limits).
client_service_options service_options_of(const client_options& o);

/// Request items the service refused, by reason. Every field only grows.
struct client_service_stats {
  std::uint64_t overloaded = 0;     ///< OVERLOADED: over max_remote_write_bytes or an in-flight limit
  std::uint64_t access_denied = 0;  ///< ACCESS_DENIED: unknown requester or a foreign transfer endpoint
};

/// The live counters of one added service (shared with its connections).
struct client_service_counters {
  std::atomic<std::uint64_t> overloaded{0}, access_denied{0};
  /// Returns a snapshot (relaxed loads). Thread-safe.
  client_service_stats snapshot() const noexcept {
    return {overloaded.load(std::memory_order_relaxed), access_denied.load(std::memory_order_relaxed)};
  }
};

/// Adds the ClientRpcService to `server` (before server.start()). `dm` must
/// outlive the server. With `calls` (the node's engine, which must outlive
/// the server too) and RPC authentication off, small-value reads also arrive
/// as TransferEngine calls on it (engine::set_call_handler; one round trip,
/// no Cap'n Proto; the same admission limits and counters). Returns the
/// service's refusal counters (never null). Not thread-safe: call once per
/// node while setting it up.
std::shared_ptr<const client_service_counters> add_client_service(mc::rpc::server& server, data_manager& dm,
                                                                  client_service_options opts,
                                                                  mc::transfer::engine* calls = nullptr);
/// Without a master: named requesters are refused; default limits.
inline std::shared_ptr<const client_service_counters> add_client_service(mc::rpc::server& server, data_manager& dm) {
  return add_client_service(server, dm, client_service_options{});
}

}  // namespace mc::store
