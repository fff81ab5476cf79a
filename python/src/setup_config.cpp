// parse_setup(): Mooncake's setup arguments and mooncake_client flags -> client_options.
#include "session.hpp"

#include "mc/config/options.hpp"
#include "mc/runtime/endpoint.hpp"

#include <algorithm>
#include <cctype>

namespace mc::python {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

/// Python's str(True) is "True": the flag parser wants true/false.
std::string flag_value(const std::string& v) {
  auto l = lower(v);
  if (l == "true" || l == "false") return l;
  return v;
}

/// Mooncake's boolean strings ("1", "true", "True", "yes").
bool truthy(const std::string& v) {
  auto l = lower(v);
  return l == "1" || l == "true" || l == "yes" || l == "on";
}

/// Mooncake P2P configuration names that differ from mooncake_client's flags.
std::string flag_name(const std::string& key) {
  if (key == "lock_shard_count") return "dm_lock_shard_count";
  if (key == "master_server_addr") return "master_server_address";
  if (key == "rdma_devices") return "device_names";
  return key;
}

}  // namespace

std::optional<setup_config> parse_setup(const std::vector<std::pair<std::string, std::string>>& kv, std::string* why) {
  auto err = [&](std::string m) -> std::optional<setup_config> {
    if (why) *why = std::move(m);
    return std::nullopt;
  };
  setup_config cfg;
  // Embedded nodes share the host with other processes: ephemeral ports and
  // no HTTP unless the configuration names them.
  std::vector<std::string> args = {"--client_rpc_port", "0", "--port", "0", "--http_port", "0"};
  std::uint64_t segment = 16ull << 20;  // Mooncake's default global_segment_size
  bool have_tiers = false, have_master = false, have_hostname = false;
  std::string protocol = "tcp";
  for (auto& [key, value] : kv) {
    if (key == "local_hostname") {
      // "host" or "host:port" (the port is the TransferEngine's, as in Mooncake).
      have_hostname = true;
      cfg.hostname = value;
      // A missing port keeps the default; a bare IPv6 address is a host (see mc::endpoint).
      if (value.empty()) {  // derived, as --local_hostname ""
        args.insert(args.end(), {"--local_hostname", ""});
        continue;
      }
      std::string_view bad;
      auto with_port = mc::endpoint::parse(value);
      auto ep = with_port ? with_port : mc::endpoint::parse_with_default_port(value, 1, &bad);
      if (!ep) {
        std::string m = "local_hostname: not host or host:port (IPv6 in brackets): '";
        m += value;
        m += "': ";
        m += bad;
        return err(std::move(m));
      }
      args.insert(args.end(), {"--local_hostname", ep->host()});
      if (with_port) args.insert(args.end(), {"--port", std::to_string(ep->port())});
    } else if (key == "metadata_server") {
      // P2PHANDSHAKE, an HTTP or etcd metadata URL: this store keeps no
      // separate metadata service (the master and the peers' handshakes do).
    } else if (key == "global_segment_size") {
      auto v = mc::config::parse_size(value);
      if (!v) return err("global_segment_size: not a byte size: '" + value + "'");
      segment = *v;
    } else if (key == "local_buffer_size") {
      auto v = mc::config::parse_size(value);
      if (!v) return err("local_buffer_size: not a byte size: '" + value + "'");
      cfg.local_buffer_size = *v;
    } else if (key == "protocol") {
      protocol = value;
      args.insert(args.end(), {"--protocol", value});
    } else if (key == "engine") {
      if (value != "None") return err("engine: an external TransferEngine is not supported (pass None)");
    } else if (key == "enable_ssd_offload") {
      if (truthy(value))
        return err(
            "enable_ssd_offload: give the SSD tier in tiered_backend_config "
            "(setup_p2p_real_client / setup(config))");
    } else if (key == "ssd_offload_path" || key == "tenant_id" || key == "ipc_socket_path") {
      // Accepted for Mooncake's signature; documented as not used.
    } else if (key == "enable_client_http_server") {
      if (truthy(value))
        return err(
            "enable_client_http_server: an embedded node serves no HTTP; run mooncake_client for "
            "/metrics");
    } else if (key == "client_http_port") {
      // Only meaningful with enable_client_http_server.
    } else {
      auto name = flag_name(key);
      if (name == "master_server_address") have_master = true;
      if (name == "tiered_backend_config") have_tiers = true;
      args.insert(args.end(), {"--" + name, flag_value(value)});
    }
  }
  if (!have_hostname) return err("local_hostname is required");
  if (!have_master) return err("master_server_addr is required");
  cfg.global_segment_size = have_tiers ? std::max<std::uint64_t>(segment, 1) : segment;
  if (!have_tiers) {
    // global_segment_size of DRAM; 0 = a pure client: a small DRAM tier (the
    // tiers need one) and puts placed on peers.
    std::uint64_t dram = segment == 0 ? (4ull << 20) : segment;
    args.insert(args.end(), {"--tiered_backend_config", "{\"tiers\":[{\"type\":\"DRAM\",\"capacity\":" +
                                                            std::to_string(dram) + ",\"priority\":100}]}"});
  }
  if (protocol == "rdma" && cfg.local_buffer_size > 0)
    args.insert(args.end(), {"--rdma_bounce_bytes", std::to_string(cfg.local_buffer_size)});
  auto set = mc::store::make_option_set(cfg.opts);
  auto parsed = set.parse(args);
  if (parsed.what != mc::config::outcome::kind::run) return err(parsed.message);
  if (auto m = mc::store::resolve(cfg.opts, set); !m.empty()) return err(m);
  return cfg;
}

}  // namespace mc::python
