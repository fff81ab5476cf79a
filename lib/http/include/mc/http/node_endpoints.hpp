#pragma once
/// The node endpoints: /metrics, /health and admin JSON on the master;
/// /metrics, /health, /stats and /kv/<key> on a client. See lib/http/README.md.
#include "mc/http/server.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

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

/// Paths of the master's status page. The page itself holds no data, so the
/// master serves them without a token even with auth on (add them to
/// server_options::public_paths); the JSON the page polls (/status.json)
/// keeps needing the token, which the page asks for on a 401.
inline constexpr std::array<std::string_view, 2> status_page_paths{"/", "/status"};

/// Registers the status page (status_page_paths: one self-contained HTML
/// page, inline CSS and JS) and /status.json, which the page polls: per node
/// its registration, health, capacity, used and keys from the master, plus
/// counters from the node's /stats (hits, misses, transfer bytes and ops,
/// tier usage), fetched by the master from the registered HTTP endpoint with
/// `node_token` as bearer token ("" = none), at most 64 nodes, 1.5 s each,
/// 64 KiB each, all at once. A snapshot is shared by requests within 0.5 s;
/// at most two are built at once (others get the last one, or 503
/// OVERLOADED). A node whose /stats fails is listed with "stats":null and
/// "stats_error". `m` must outlive `s`. Call before s.start().
void add_status_page(server& s, mc::master::master_server& m, std::string node_token = {});

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
