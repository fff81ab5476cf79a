#include "mc/master/options.hpp"

#include "mc/master/etcd.hpp"
#include "mc/master/ha.hpp"
#include "mc/runtime/endpoint.hpp"

namespace mc::master {

mc::config::option_set make_option_set(master_options& o) {
  mc::config::option_set s("mooncake_master", "The P2P metadata service: knows which client holds which key.");
  s.add("deployment_mode", &o.deployment_mode, "deployment mode; only P2P is supported")
      .add("rpc_address", &o.rpc_address, "bind host of the RPC server")
      .add("rpc_port", &o.rpc_port, "RPC port", 1)
      .add("rpc_thread_num", &o.rpc_thread_num, "RPC server threads", 1, 64)
      .add("client_ttl", &o.client_ttl, "a client silent this long receives no more routes")
      .add("client_drop_ttl", &o.client_drop_ttl, "a client silent this long is dropped with its replicas")
      .add("max_key_bytes", &o.max_key_bytes, "longest accepted key", 1, 1 << 20)
      .add("http_host", &o.http_host, "bind host of the HTTP server (/metrics, /health, /clients, /keys, /key/)")
      .add("metrics_port", &o.metrics_port, "HTTP port of /metrics, /health and the admin JSON; 0 = HTTP off")
      .add("publish_calls", &o.publish_calls,
           "take publishes as TransferEngine calls on a port of rpc_address (told to clients at registration; "
           "off while RPC authentication is on)")
      .add("publish_call_port", &o.publish_call_port, "TCP port of the publish calls; 0 = any free port")
      .add("drain_grace", &o.drain_grace,
           "on SIGTERM, /health answers 503 (draining) this long before the server stops; a second signal "
           "skips the wait");
  s.add("ha_backend", &o.ha_backend,
        "high availability: '' = one master; 'etcd' = masters elect a leader in etcd (standbys take over)")
      .add("etcd_endpoints", &o.etcd_endpoints, "etcd client endpoints host:port[,host:port...] (ha_backend etcd)")
      .add("cluster_id", &o.cluster_id, "cluster name: the etcd keys live under mooncake-store/<cluster_id>/")
      .add("ha_lease_ttl", &o.ha_lease_ttl,
           "the leader's etcd lease (whole seconds): a dead leader is replaced after about this long")
      .add("ha_advertise_address", &o.ha_advertise_address,
           "host:port clients dial for this master when it leads (default rpc_address:rpc_port)");
  s.env("MC_HA_BACKEND", "ha_backend")
      .env("MC_ETCD_ENDPOINTS", "etcd_endpoints")
      .env("MC_STORE_CLUSTER_ID", "cluster_id");
  add_etcd_security_options(s, o.etcd_security);
  mc::config::add_auth_options(s, o.auth);
  return s;
}

void add_etcd_security_options(mc::config::option_set& s, etcd_security_options& o) {
  s.add("etcd_username", &o.username, "etcd user to authenticate as (etcd auth enabled; needs etcd_password_file)")
      .add("etcd_password_file", &o.password_file, "file holding the etcd user's password (whitespace trimmed)")
      .add("etcd_ca_file", &o.ca_file,
           "PEM CA certificate(s) etcd's server certificate must chain to; implies TLS (\"\" with TLS = the "
           "system's CAs)")
      .add("etcd_cert_file", &o.cert_file, "PEM client certificate for etcd (--client-cert-auth); implies TLS")
      .add("etcd_key_file", &o.key_file, "PEM private key of etcd_cert_file")
      .add("etcd_tls", &o.tls, "talk TLS to etcd (also implied by https:// endpoints and the files above)")
      .env("MC_ETCD_USERNAME", "etcd_username")
      .env("MC_ETCD_PASSWORD_FILE", "etcd_password_file")
      .env("MC_ETCD_CA_FILE", "etcd_ca_file")
      .env("MC_ETCD_CERT_FILE", "etcd_cert_file")
      .env("MC_ETCD_KEY_FILE", "etcd_key_file");
}

std::string ha_advertise(const master_options& o) {
  if (!o.ha_advertise_address.empty()) return o.ha_advertise_address;
  auto host = o.rpc_address.find(':') != std::string::npos ? "[" + o.rpc_address + "]" : o.rpc_address;
  return host + ":" + std::to_string(o.rpc_port);
}

std::string validate(const master_options& o) {
  if (o.deployment_mode != "P2P" && o.deployment_mode != "p2p")
    return "deployment_mode '" + o.deployment_mode + "' is not supported: this master implements only P2P";
  if (o.client_drop_ttl <= o.client_ttl) return "client_drop_ttl must be longer than client_ttl";
  if (o.client_ttl.count() == 0) return "client_ttl must be positive";
  if (o.ha_backend.empty()) return {};
  if (o.ha_backend != "etcd") return "ha_backend '" + o.ha_backend + "' is not supported: '' or 'etcd'";
  std::string why;
  bool tls = false;
  if (!parse_etcd_endpoints(o.etcd_endpoints, &why, &tls)) return "etcd_endpoints: " + why;
  if (!etcd_security::load(o.etcd_security, tls, &why)) return why;
  if (!check_cluster_id(o.cluster_id)) return "cluster_id must be 1-128 characters of A-Z a-z 0-9 . _ -";
  if (o.ha_lease_ttl < std::chrono::seconds(1) || o.ha_lease_ttl > std::chrono::seconds(60))
    return "ha_lease_ttl must be between 1 s and 60 s";
  auto adv = ha_advertise(o);
  std::string_view w;
  if (!mc::endpoint::parse(adv, &w)) return "ha_advertise_address '" + adv + "': " + std::string(w);
  if (adv.starts_with("0.0.0.0:") || adv.starts_with("[::]:"))
    return "ha_backend etcd needs the address clients dial: set ha_advertise_address (rpc_address is a wildcard)";
  return {};
}

}  // namespace mc::master
