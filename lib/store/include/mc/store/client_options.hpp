#pragma once
/// Configuration of one P2P client (mooncake_client and embedders): Mooncake's
/// flag names, a TOML file, MOONCAKE_DM_LOCK_SHARD_COUNT and MC_RPC_PROTOCOL.
#include "mc/config/options.hpp"
#include "mc/master/etcd.hpp"
#include "mc/tiered/tier_config.hpp"
#include "mc/transfer/types.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mc::store {

/// Server-side limits of the ClientRpcService (what one requester may make
/// this node do). Past any of them an item fails with OVERLOADED.
struct service_limits {
  /// A requester's deadline (timeoutMs) is clamped to this.
  std::chrono::milliseconds max_request_timeout = std::chrono::seconds(30);
  /// A remote write larger than this is refused before allocation.
  std::uint64_t max_remote_write_bytes = std::uint64_t{256} << 20;
  /// Items (keys) and their bytes in flight on one RPC connection.
  std::uint64_t max_inflight_keys_per_connection = 1024;
  std::uint64_t max_inflight_bytes_per_connection = std::uint64_t{2} << 30;
  /// Items and bytes in flight from one peer IP (all its connections).
  std::uint64_t max_inflight_keys_per_peer = 4096;
  std::uint64_t max_inflight_bytes_per_peer = std::uint64_t{8} << 30;
  /// Largest value this node answers inside an RPC reply (or accepts inside a
  /// write request); larger ones need a transfer descriptor.
  std::uint64_t max_inline_value_bytes = std::uint64_t{1} << 20;
  /// Transfer bytes this node serves (remote reads and writes of all peers)
  /// at once; items past it wait for room within their deadline (then
  /// TIMEOUT), and one item larger than this runs alone.
  std::uint64_t max_serving_bytes = std::uint64_t{1} << 30;
  /// Inline value bytes in one reply at most (the rest of a batch then goes
  /// through the TransferEngine); well below the RPC message limit (64 MiB).
  std::uint64_t max_inline_reply_bytes = std::uint64_t{16} << 20;
};

struct client_options {
  std::string deployment_mode = "P2P";
  std::string client_id;                                  ///< "" = derived from host and ports
  std::string master_server_address = "127.0.0.1:50051";  ///< host:port, or etcd://h1:2379,... (HA)
  std::string cluster_id = "mooncake_cluster";            ///< etcd:// addresses: the cluster to follow
  std::string host = "0.0.0.0";                           ///< bind host of the RPC server and the TransferEngine
  std::string local_hostname;             ///< advertised address ("" = derived: 127.0.0.1 when the master
                                          ///< is on loopback, else from `host` or the interfaces)
  std::uint16_t port = 50052;             ///< TransferEngine port (0 = ephemeral)
  std::uint16_t client_rpc_port = 12345;  ///< ClientRpcService port (0 = ephemeral)
  std::uint64_t rpc_thread_num = 2;
  std::string protocol = "tcp";            ///< transfer protocol
  std::string device_names;                ///< RDMA devices, comma-separated ("" = every device)
  std::vector<std::string> device_list;    ///< device_names split (after resolve())
  std::string tiered_backend_config;       ///< the spec's JSON, inline or a path
  std::vector<tiered::tier_config> tiers;  ///< resolved tiers (after resolve())
  std::uint64_t lock_shard_count = 1024;   ///< MOONCAKE_DM_LOCK_SHARD_COUNT
  std::chrono::milliseconds rpc_timeout = std::chrono::seconds(10);
  std::chrono::milliseconds heartbeat_interval = std::chrono::seconds(1);
  /// etcd:// addresses: the lease of this node's own membership record in
  /// etcd (whole seconds, >= 2 s and >= 3 heartbeat_interval, <= 1 h): how
  /// long a new master leader waits for this node to re-publish after it died.
  std::chrono::milliseconds ha_membership_ttl = std::chrono::seconds(6);
  /// etcd:// masters: TLS and credentials towards etcd (etcd_username,
  /// etcd_password_file, etcd_ca_file, etcd_cert_file, etcd_key_file, etcd_tls).
  mc::master::etcd_security_options etcd_security = {};
  /// Bound of the queue of eviction notices for the master; past it the queue
  /// is dropped and the next heartbeat re-publishes the whole key set (0: every
  /// eviction does). Not a flag: set it in code (tests use a small bound).
  std::uint64_t eviction_notice_queue = 65536;
  /// Eviction notices are sent every this long, or at once when 1024 are queued.
  std::chrono::milliseconds eviction_notice_interval{50};
  std::string transfer_transport = "auto";  ///< auto | tcp | same_host (force one)
  /// TransferEngine spread_bytes: a same-host or in-process transfer batch
  /// to one peer of at least twice this many bytes is moved by several
  /// runtime threads at once (0 = one thread; else at least 64 KiB).
  std::uint64_t transfer_spread_bytes = std::uint64_t{4} << 20;
  std::uint64_t rpc_max_connections = 64;  ///< per-thread client connection cache bound
  std::string http_host = "0.0.0.0";       ///< bind host of the HTTP server
  /// /metrics, /health, /stats, /kv (0 = off; master uses 9003). Not given:
  /// mooncake_client derives it from client_rpc_port (mc::http::derived_http_port).
  std::uint16_t http_port = 9080;
  /// The port the application's HTTP server listens on, registered with the
  /// master as ClientInfo.httpEndpoint (0 = none). Not a flag: set in code.
  std::uint16_t http_registered_port = 0;
  std::uint64_t http_max_value_bytes = std::uint64_t{64} << 20;            ///< largest value through /kv
  std::chrono::milliseconds http_read_timeout = std::chrono::seconds(10);  ///< a request header must arrive within
  std::uint64_t http_max_connections = 0;    ///< HTTP connections served at once (0 = from the fd limit); more get 503
  std::chrono::milliseconds drain_grace{0};  ///< on SIGTERM: /health answers 503 this long before stopping
  service_limits limits;                     ///< what peers may make this node do (max_* flags)
  /// Values up to this size travel inside the RPC (remote gets and remote
  /// puts): one round trip, no registration, no transfer connection. 0 = off.
  /// At most limits.max_inline_value_bytes.
  std::uint64_t inline_threshold = 64 << 10;
  /// Bytes this client's remote gets and puts move through the TransferEngine
  /// at once (a batch waits for room; one value larger than this runs alone).
  std::uint64_t max_inflight_bytes = std::uint64_t{256} << 20;
  /// Protocol "rdma": a bounce arena of this many bytes (1 MiB slots) is
  /// registered once; gets and puts of caller memory that is not inside a
  /// registration (register_buffer) go through it instead of an ibv_reg_mr
  /// per call. 0 = off (a registration per call).
  std::uint64_t rdma_bounce_bytes = std::uint64_t{64} << 20;
  /// Remote puts without a target reuse the master's write route for this
  /// long (a route lease: no master round trip per put), while the leased
  /// bytes last and the master's leader is the one that granted it; a put
  /// through a lease that fails at the owner drops the lease and retries once
  /// on a fresh route. 0 = ask the master for every put.
  std::chrono::milliseconds write_route_lease = std::chrono::seconds(1);
  /// Bytes one route lease covers: the lease asks the master for a node with
  /// this much free room (the batch's own size when none has it).
  std::uint64_t write_route_lease_bytes = std::uint64_t{64} << 20;
  /// Most keys one batch call accepts (invalid_params for every key beyond).
  std::uint64_t max_batch_keys = 65536;
  /// mooncake_client: serve the attach service (standalone mode, mc/store/attach.hpp)
  /// on 127.0.0.1:attach_port.
  bool attach = true;
  /// 0 = derived from client_rpc_port (derived_attach_port: client_rpc_port + 1000, wrapped).
  std::uint16_t attach_port = 0;
};

/// Binds `o` to an option set (flags, file keys, environment variables).
mc::config::option_set make_option_set(client_options& o);

/// After parse(): validates cross-field rules and fills `o.tiers` from
/// --tiered_backend_config (JSON) or the file's [[tiers]] (TOML) or the
/// default (one 512 MiB DRAM tier). Returns an error message or "".
std::string resolve(client_options& o, const mc::config::option_set& parsed);

/// Whether host:port names a loopback host (a 127.x.y.z address, localhost,
/// [::1]); false when it is not an endpoint mc::endpoint::parse accepts.
/// Thread-safe.
bool is_loopback_endpoint(std::string_view endpoint);

/// The forced transport for transfer_transport, or nullopt for "auto".
std::optional<mc::transfer::transport_kind> forced_transport(const client_options& o);

}  // namespace mc::store
