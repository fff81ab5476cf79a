#include "mc/store/client_options.hpp"

#include "mc/master/etcd.hpp"
#include "mc/master/ha.hpp"
#include "mc/master/master_client.hpp"
#include "mc/master/options.hpp"
#include "mc/runtime/endpoint.hpp"
#include "mc/store/data_manager.hpp"

namespace mc::store {

mc::config::option_set make_option_set(client_options& o) {
  mc::config::option_set s("mooncake_client",
                           "A P2P client node: stores KV blocks in its own tiers, serves them to peers.");
  s.add("deployment_mode", &o.deployment_mode, "deployment mode; only P2P is supported")
      .add("client_id", &o.client_id, "unique client id (\"\" = <advertised host>:<client_rpc_port>)")
      .add("master_server_address", &o.master_server_address,
           "the master: host:port, or etcd://h1:2379[,h2:2379...] to follow the elected leader of cluster_id "
           "(masters started with --ha_backend etcd)")
      .add("cluster_id", &o.cluster_id, "cluster name in etcd (etcd:// master addresses only)")
      .add("host", &o.host, "bind host of the RPC server and the TransferEngine")
      .add("local_hostname", &o.local_hostname, "address advertised to peers (\"\" = derived from host)")
      .add("port", &o.port, "TransferEngine port (data plane; 0 = ephemeral)")
      .add("client_rpc_port", &o.client_rpc_port, "ClientRpcService port (control plane; 0 = ephemeral)")
      .add("rpc_thread_num", &o.rpc_thread_num, "RPC server threads", 1, 64)
      .add("protocol", &o.protocol,
           "transfer protocol: tcp | rdma (RDMA READ/WRITE to peers that have RDMA, TCP to the others; "
           "startup fails when no RDMA device is usable)")
      .add("device_names", &o.device_names,
           "RDMA devices for --protocol rdma and MC_RPC_PROTOCOL=rdma, comma-separated, e.g. mlx5_0,mlx5_1 "
           "(\"\" = every device; the first usable one carries the traffic)")
      .add("tiered_backend_config", &o.tiered_backend_config,
           "tiers as the spec's JSON, inline or a file path (default: one 512MiB DRAM tier)")
      .add("dm_lock_shard_count", &o.lock_shard_count, "DataManager lock shards", 1, max_lock_shard_count)
      .add("rpc_timeout", &o.rpc_timeout, "deadline of every peer and master RPC")
      .add("heartbeat_interval", &o.heartbeat_interval, "heartbeat period towards the master")
      .add("ha_membership_ttl", &o.ha_membership_ttl,
           "etcd:// masters: lease of this node's own membership record in etcd (whole seconds, >= 2s and >= 3 "
           "heartbeat_interval): how long a new master leader waits for this node after it died")
      .add("transfer_transport", &o.transfer_transport,
           "auto | tcp | same_host | rdma: force one transport for transfers this node initiates (auto: "
           "same_host for peers on this host, else rdma when both sides have it, else tcp; a forced one "
           "fails transfers to peers that lack it)")
      .add_size("transfer_spread_bytes", &o.transfer_spread_bytes,
                "a same-host or in-process transfer batch to one peer of at least twice this many bytes is "
                "cut into parts moved by several runtime threads at once (0 = one thread, else at least "
                "64KiB; never over TCP or RDMA)")
      .add("rpc_max_connections", &o.rpc_max_connections, "RPC connections cached per thread", 1, 65536)
      .add("http_host", &o.http_host, "bind host of the HTTP server (/metrics, /health, /stats, /kv/<key>)")
      .add("http_port", &o.http_port,
           "HTTP port (/metrics, /health, /stats, /kv/<key>); 0 = HTTP off; not given: derived from "
           "client_rpc_port as 9080 + (client_rpc_port - 12345), wrapped into 1024..65535 (ephemeral when "
           "client_rpc_port is 0)")
      .add_size("http_max_value_bytes", &o.http_max_value_bytes, "largest value accepted or returned by /kv/<key>")
      .add("http_read_timeout", &o.http_read_timeout,
           "an HTTP request header must arrive within this (slow clients are disconnected); a body gets "
           "6x, at least 30s")
      .add("http_max_connections", &o.http_max_connections,
           "HTTP connections served at once (0 = RLIMIT_NOFILE / 4, within 64..16384); more are answered 503 "
           "with Retry-After",
           0, 65536)
      .add("drain_grace", &o.drain_grace,
           "on SIGTERM, /health answers 503 (draining) this long before the node stops; a second signal "
           "skips the wait")
      .add("max_request_timeout", &o.limits.max_request_timeout,
           "longest deadline a peer's read/write request may hold this node for (a longer one is cut)")
      .add_size("max_remote_write_bytes", &o.limits.max_remote_write_bytes,
                "largest value a peer may remote-write here; a larger one is refused (OVERLOADED) before "
                "anything is allocated or evicted")
      .add("max_inflight_keys_per_connection", &o.limits.max_inflight_keys_per_connection,
           "peer read/write items in flight on one RPC connection (each batch item counts); more fail with "
           "OVERLOADED",
           1, std::uint64_t{1} << 32)
      .add_size("max_inflight_bytes_per_connection", &o.limits.max_inflight_bytes_per_connection,
                "bytes of peer read/write items in flight on one RPC connection; more fail with OVERLOADED")
      .add("max_inflight_keys_per_peer", &o.limits.max_inflight_keys_per_peer,
           "peer read/write items in flight from one peer IP over all its connections; more fail with "
           "OVERLOADED",
           1, std::uint64_t{1} << 32)
      .add_size("max_inflight_bytes_per_peer", &o.limits.max_inflight_bytes_per_peer,
                "bytes of peer read/write items in flight from one peer IP; more fail with OVERLOADED")
      .add_size("max_serving_bytes", &o.limits.max_serving_bytes,
                "transfer bytes this node serves for all peers at once; more wait for room within their deadline")
      .add_size("max_inline_value_bytes", &o.limits.max_inline_value_bytes,
                "largest value this node answers inside an RPC reply or accepts inside a write request")
      .add_size("max_inline_reply_bytes", &o.limits.max_inline_reply_bytes,
                "inline value bytes in one RPC reply at most (the rest of a batch is transferred)")
      .add_size("inline_threshold", &o.inline_threshold,
                "remote gets and puts of values up to this size travel inside the RPC (no registration, no "
                "transfer connection); 0 = off; at most max_inline_value_bytes")
      .add_size("max_inflight_bytes", &o.max_inflight_bytes,
                "bytes this client's remote gets and puts move through the TransferEngine at once (a batch "
                "waits for room; a larger single value runs alone)")
      .add_size("rdma_bounce_bytes", &o.rdma_bounce_bytes,
                "protocol rdma: a bounce arena registered once for unregistered caller memory (0 = register "
                "per call)")
      .add("write_route_lease", &o.write_route_lease,
           "remote puts without a target reuse the master's write route this long (no master round trip per "
           "put) while its bytes last; dropped when the leader changes or the owner fails a put; 0 = ask the "
           "master for every put")
      .add_size("write_route_lease_bytes", &o.write_route_lease_bytes,
                "bytes one write-route lease covers (the master picks a node with that much free room)")
      .add("max_batch_keys", &o.max_batch_keys, "most keys one batch call accepts", 1, std::uint64_t{1} << 24)
      .add("attach", &o.attach,
           "serve the attach service (standalone mode: processes on this host that run no node use the store "
           "through this one) on a loopback-only listener; --attach=false switches it off")
      .add("attach_port", &o.attach_port,
           "attach listener port on 127.0.0.1 (0 = client_rpc_port + 1000, wrapped into 1024..65535)")
      .env("MOONCAKE_DM_LOCK_SHARD_COUNT", "dm_lock_shard_count")
      .allow_file_key("tiers");
  s.env("MC_STORE_CLUSTER_ID", "cluster_id");
  mc::master::add_etcd_security_options(s, o.etcd_security);
  return s;
}

namespace {
/// "<option> '<value>' <rule>: <why>", the message of a refused endpoint option.
std::string refused(std::string_view option, const std::string& value, std::string_view rule, std::string_view why) {
  std::string text(option);
  text += " '";
  text += value;
  text += "' ";
  text += rule;
  text += ": ";
  text += why;
  return text;
}
}  // namespace

std::string resolve(client_options& o, const mc::config::option_set& parsed) {
  if (o.deployment_mode != "P2P" && o.deployment_mode != "p2p")
    return "deployment_mode '" + o.deployment_mode + "' is not supported: this client implements only P2P";
  if (o.protocol != "tcp" && o.protocol != "rdma")
    return "protocol '" + o.protocol + "' is unknown (expected tcp or rdma)";
  o.device_list.clear();
  for (std::size_t pos = 0; pos <= o.device_names.size();) {
    auto comma = o.device_names.find(',', pos);
    if (comma == std::string::npos) comma = o.device_names.size();
    auto name = o.device_names.substr(pos, comma - pos);
    while (!name.empty() && name.front() == ' ') name.erase(0, 1);
    while (!name.empty() && name.back() == ' ') name.pop_back();
    if (!name.empty())
      o.device_list.push_back(name);
    else if (comma < o.device_names.size())
      return "device_names '" + o.device_names + "' has an empty entry";
    pos = comma + 1;
  }
  if (std::string_view why; !o.local_hostname.empty() && !mc::endpoint::make(o.local_hostname, 1, &why))
    return refused("local_hostname", o.local_hostname, "is not a host name or IP address", why);
  if (std::string why; !mc::master::check_master_address(o.master_server_address, &why))
    return refused("master_server_address", o.master_server_address,
                   "must be host:port (IPv6 in brackets) or etcd://host:port[,host:port...]", why);
  if (!mc::master::check_cluster_id(o.cluster_id)) return "cluster_id must be 1-128 characters of A-Z a-z 0-9 . _ -";
  if (o.master_server_address.starts_with("etcd://")) {
    bool tls = false;
    std::string why;
    if (mc::master::parse_etcd_endpoints(o.master_server_address, nullptr, &tls) &&
        !mc::master::etcd_security::load(o.etcd_security, tls, &why))
      return why;
  }
  if (o.transfer_transport != "auto" && o.transfer_transport != "tcp" && o.transfer_transport != "same_host" &&
      o.transfer_transport != "rdma")
    return "transfer_transport '" + o.transfer_transport + "' is unknown (expected auto, tcp, same_host or rdma)";
  if (o.transfer_transport == "rdma" && o.protocol != "rdma") return "transfer_transport 'rdma' needs protocol 'rdma'";
  if (o.transfer_spread_bytes != 0 && o.transfer_spread_bytes < (64u << 10))
    return "transfer_spread_bytes must be 0 or at least 64KiB";
  if (o.rpc_timeout.count() <= 0) return "rpc_timeout must be positive";
  if (o.heartbeat_interval.count() <= 0) return "heartbeat_interval must be positive";
  if (o.ha_membership_ttl < std::chrono::seconds(2) || o.ha_membership_ttl > std::chrono::hours(1) ||
      o.ha_membership_ttl % std::chrono::seconds(1) != std::chrono::milliseconds(0))
    return "ha_membership_ttl must be whole seconds in [2s, 1h]";
  if (o.ha_membership_ttl < 3 * o.heartbeat_interval)
    return "ha_membership_ttl must be at least 3 heartbeat_interval (heartbeats renew its lease)";
  if (o.http_max_value_bytes == 0) return "http_max_value_bytes must be positive";
  if (o.http_read_timeout.count() <= 0) return "http_read_timeout must be positive";
  if (o.limits.max_request_timeout.count() <= 0 || o.limits.max_request_timeout > std::chrono::milliseconds(60'000))
    return "max_request_timeout must be in (0, 60s]";
  if (o.limits.max_remote_write_bytes == 0) return "max_remote_write_bytes must be positive";
  if (o.limits.max_inflight_bytes_per_connection == 0 || o.limits.max_inflight_bytes_per_peer == 0)
    return "max_inflight_bytes_per_connection and max_inflight_bytes_per_peer must be positive";
  if (o.limits.max_inline_value_bytes > (std::uint64_t{32} << 20) ||
      o.limits.max_inline_reply_bytes > (std::uint64_t{32} << 20))
    return "max_inline_value_bytes and max_inline_reply_bytes must be at most 32 MiB (the RPC message limit is 64 MiB)";
  if (o.inline_threshold > o.limits.max_inline_value_bytes)
    return "inline_threshold must be at most max_inline_value_bytes";
  if (o.max_inflight_bytes == 0) return "max_inflight_bytes must be positive";
  if (o.limits.max_serving_bytes == 0) return "max_serving_bytes must be positive";
  if (!o.tiered_backend_config.empty()) {
    auto t = tiered::parse_tiers_json(o.tiered_backend_config);
    if (!t) return "tiered_backend_config: " + t.error().message;
    o.tiers = std::move(*t);
  } else if (parsed.file_has_key("tiers")) {
    auto t = tiered::parse_tiers_toml(parsed.file_text());
    if (!t) return "config file: " + t.error().message;
    o.tiers = std::move(*t);
  }
  // A master reached over loopback means a single-host cluster: advertise
  // loopback too, rather than whichever interface address comes first.
  auto master_host = o.master_server_address;
  if (auto eps = mc::master::parse_etcd_endpoints(master_host); master_host.starts_with("etcd://") && eps)
    master_host = eps->front();  // a loopback etcd: a single-host cluster too
  if (o.local_hostname.empty() && is_loopback_endpoint(master_host)) o.local_hostname = "127.0.0.1";
  if (o.tiers.empty())
    o.tiers.push_back(tiered::tier_config{tiered::tier_type::dram, 512ull << 20, 100, "OFFSET", {}, false});
  return {};
}

bool is_loopback_endpoint(std::string_view endpoint) {
  auto e = mc::endpoint::parse(endpoint);
  return e && e->is_loopback();
}

std::optional<mc::transfer::transport_kind> forced_transport(const client_options& o) {
  if (o.transfer_transport == "tcp") return mc::transfer::transport_kind::tcp;
  if (o.transfer_transport == "same_host") return mc::transfer::transport_kind::same_host;
  if (o.transfer_transport == "rdma") return mc::transfer::transport_kind::rdma;
  return std::nullopt;
}

}  // namespace mc::store
