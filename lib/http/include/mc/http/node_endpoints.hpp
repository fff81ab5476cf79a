#pragma once
/// The node endpoints: /metrics, /health and admin JSON on the master;
/// /metrics, /health, /stats and /kv/<key> on a client. See lib/http/README.md.
#include "mc/http/server.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace mc::master {
class master_server;
}
namespace mc::store {
class client;
}

namespace mc::http {

/// Lifecycle of a node as /health reports it. Written by the app's main
/// thread, read by handlers (relaxed atomics).
enum class node_state : std::uint8_t { starting, serving, draining };

/// Shared between the app and the handlers; must outlive the http::server.
struct node_status {
  std::atomic<node_state> state{node_state::starting};
};

/// Default and bounds of a client's /kv value size.
inline constexpr std::size_t default_max_value_bytes = std::size_t{64} << 20;

/// Registers /metrics, /health, /clients, /keys, /key/ and /prometheus/targets
/// (Prometheus HTTP service discovery) for a master. `m` and `status` must
/// outlive `s`. /health is 200 only in serving. `self_metrics_endpoint`
/// ("host:port" of this master's /metrics, "" = not listed) is the master's
/// own target in /prometheus/targets.
void add_master_endpoints(server& s, mc::master::master_server& m, node_status& status,
                          std::string self_metrics_endpoint = {});

/// The client's HTTP port when --http_port is not given, derived from its
/// client RPC port so that nodes on one host never clash: 9080 + (rpc_port -
/// 12345), wrapped into 1024..65535 (the spec's default 12345 gets 9080, 12346
/// gets 9081, ...). Distinct RPC ports in 1024..65535 get distinct HTTP ports.
/// rpc_port 0 (ephemeral) yields 0: bind an ephemeral HTTP port too.
constexpr std::uint16_t derived_http_port(std::uint16_t rpc_port) noexcept {
  if (rpc_port == 0) return 0;
  constexpr long first = 1024, span = 65536 - 1024, offset = 9080 - 12345;
  long v = (static_cast<long>(rpc_port) + offset - first) % span;
  if (v < 0) v += span;
  return static_cast<std::uint16_t>(first + v);
}

/// A client published to the handlers once it has started (null before).
struct client_slot {
  std::atomic<mc::store::client*> client{nullptr};
};

/// Registers /metrics, /health, /stats and /kv/ for a client. `slot` and
/// `status` must outlive `s`; clear the slot only after `s` has stopped.
/// /health is 200 only when serving and registered with the master.
void add_client_endpoints(server& s, client_slot& slot, node_status& status,
                          std::size_t max_value_bytes = default_max_value_bytes);

/// Adds process metrics (uptime, resident memory, start time), the RPC
/// per-method metrics and this HTTP server's counters. Thread-safe.
class exposition;
void append_common_metrics(exposition& e, const server& s);

}  // namespace mc::http
