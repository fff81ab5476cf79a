#include "mc/master/options.hpp"

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
      .add("drain_grace", &o.drain_grace,
           "on SIGTERM, /health answers 503 (draining) this long before the server stops; a second signal "
           "skips the wait");
  mc::config::add_auth_options(s, o.auth);
  return s;
}

std::string validate(const master_options& o) {
  if (o.deployment_mode != "P2P" && o.deployment_mode != "p2p")
    return "deployment_mode '" + o.deployment_mode + "' is not supported: this master implements only P2P";
  if (o.client_drop_ttl <= o.client_ttl) return "client_drop_ttl must be longer than client_ttl";
  if (o.client_ttl.count() == 0) return "client_ttl must be positive";
  return {};
}

}  // namespace mc::master
