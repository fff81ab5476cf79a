#pragma once
/// mooncake_master's configuration (flags, TOML file, environment).
#include "mc/config/auth.hpp"
#include "mc/config/options.hpp"
#include "mc/master/etcd.hpp"

#include <chrono>
#include <cstdint>
#include <string>

namespace mc::master {

struct master_options {
  std::string deployment_mode = "P2P";
  std::string rpc_address = "0.0.0.0";
  std::uint16_t rpc_port = 50051;
  std::uint64_t rpc_thread_num = 2;
  std::chrono::milliseconds client_ttl = std::chrono::seconds(10);
  std::chrono::milliseconds client_drop_ttl = std::chrono::seconds(60);
  std::uint64_t max_key_bytes = 4096;
  std::string http_host = "0.0.0.0";         ///< bind host of the metrics/admin HTTP server
  std::uint16_t metrics_port = 9003;         ///< HTTP port: /metrics, /health, admin JSON (0 = off)
  std::chrono::milliseconds drain_grace{0};  ///< on SIGTERM: /health answers 503 this long before stopping
  /// Publishes as TransferEngine calls (mc/master/publish_call.hpp) on a
  /// TCP port of rpc_address, told to clients at registration: one round
  /// trip without Cap'n Proto. Off while RPC authentication is on (calls
  /// carry no credentials).
  bool publish_calls = true;
  std::uint16_t publish_call_port = 0;  ///< that port; 0 = any free port
  mc::config::auth_options auth = {};   ///< --auth_token / --auth_token_file (off when both empty)
  /// High availability (mc/master/ha.hpp): "" = off (one master), "etcd".
  std::string ha_backend;
  std::string etcd_endpoints;  ///< "h1:2379,h2:2379" (also etcd://...)
  std::string cluster_id = "mooncake_cluster";
  std::chrono::milliseconds ha_lease_ttl = std::chrono::seconds(2);
  /// The RPC address clients dial, written to etcd when elected; default
  /// rpc_address:rpc_port (which then must not be a wildcard address).
  std::string ha_advertise_address;
  /// TLS and credentials towards etcd (add_etcd_security_options).
  etcd_security_options etcd_security = {};
};

/// The etcd security options shared by mooncake_master and mooncake_client:
/// etcd_username, etcd_password_file, etcd_ca_file, etcd_cert_file,
/// etcd_key_file, etcd_tls (environment MC_ETCD_USERNAME,
/// MC_ETCD_PASSWORD_FILE, MC_ETCD_CA_FILE, MC_ETCD_CERT_FILE,
/// MC_ETCD_KEY_FILE).
void add_etcd_security_options(mc::config::option_set& s, etcd_security_options& o);

/// Binds `o` to a fresh option set (for parse() and --help).
mc::config::option_set make_option_set(master_options& o);
/// The address an HA master advertises (ha_advertise_address, else
/// rpc_address:rpc_port).
std::string ha_advertise(const master_options& o);
/// Cross-field validation after parsing; an error message or empty.
std::string validate(const master_options& o);

}  // namespace mc::master
