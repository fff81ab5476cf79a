// mooncake_client: one P2P client node, e.g. (the spec's launch command)
//   ./mooncake_client --master_server_address 127.0.0.1:50051 --port 50052 --client_rpc_port 12345
//     --deployment_mode P2P
//     --tiered_backend_config '{"tiers":[{"type":"DRAM","capacity":536870912,"priority":100}]}'
#include "mc/http/node_endpoints.hpp"
#include "mc/rpc/client.hpp"
#include "mc/rpc/protocol.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/store/attach.hpp"
#include "mc/store/client.hpp"
#include "mc/store/client_options.hpp"
#include "auth_setup.hpp"
#include "malloc_tuning.hpp"
#include "signals.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

int main(int argc, char** argv) {
  mc::apps::block_stop_signals();
  mc::apps::tune_malloc();  // before any thread starts (malloc_tuning.hpp)
  mc::store::client_options opts;
  auto options = mc::store::make_option_set(opts);
  mc::config::auth_options auth;  // --auth_token, --auth_token_file (TOML keys and env too)
  mc::config::add_auth_options(options, auth);
  auto parsed = options.parse(argc, argv);
  if (parsed.what == mc::config::outcome::kind::version) {
    std::cout << parsed.message << "\n";
    return 0;
  }
  if (parsed.what == mc::config::outcome::kind::help) {
    std::cout
        << parsed.message
        << "\nenvironment:\n"
           "  MOONCAKE_DM_LOCK_SHARD_COUNT  DataManager lock shards (default 1024)\n"
           "  MC_AUTH_TOKEN, MC_AUTH_TOKEN_FILE  as --auth_token, --auth_token_file\n"
           "  MC_RPC_PROTOCOL               RPC transport: tcp (default) or rdma (Cap'n Proto over RDMA SEND/RECV;\n"
           "                                needs an RDMA device, see --device_names)\n"
           "\nconfig file: the same keys, plus [[tiers]] tables (type, capacity, priority,\n"
           "allocator_type, path) instead of --tiered_backend_config. See conf/client.toml.\n"
           "\nHTTP (--http_port; 0 switches it off; not given: 9080 + (client_rpc_port - 12345), wrapped\n"
           "into 1024..65535, so nodes on one host never clash): GET /metrics, GET /health, GET /stats,\n"
           "GET|PUT|DELETE /kv/<key>. The port is registered with the master. See lib/http/README.md.\n"
           "\nattach (--attach, on by default): standalone processes on this host (Mooncake's setup_dummy,\n"
           "mc::store::attached_client) use the store through this node via 127.0.0.1:--attach_port\n"
           "(not given: client_rpc_port + 1000, wrapped into 1024..65535). See lib/store/README.md.\n"
           "\nlogs: stderr, one line per event, each starting with \"mooncake_client\". --version prints\n"
           "\"mooncake_client <version> (<git revision>)\".\n";
    return 0;
  }
  if (parsed.what == mc::config::outcome::kind::error) {
    std::cerr << parsed.message << "\n";
    return 2;
  }
  if (auto err = mc::store::resolve(opts, options); !err.empty()) {
    std::cerr << "mooncake_client: " << err << "\n";
    return 2;
  }
  std::vector<std::string> tokens;  // accepted by RPC and HTTP; empty = auth off
  if (auto err = mc::apps::apply_auth(auth, "mooncake_client", &tokens); !err.empty()) {
    std::cerr << "mooncake_client: " << err << "\n";
    return 2;
  }
  // MC_RPC_PROTOCOL: tcp, or rdma (opens the RDMA device now: a clear error when there is none).
  if (auto err = mc::rpc::use_protocol_from_env(opts.device_list); !err.empty()) {
    std::cerr << "mooncake_client: " << err << "\n";
    return 2;
  }

  // RPC threads serve peers; two more run the application side (heartbeats,
  // transfers initiated for local callers) so serving never starves them.
  mc::runtime::runtime rt(std::max<std::size_t>(opts.rpc_thread_num, 1));
  rt.start();
  // HTTP first, so /health answers 503 (starting) while the client starts.
  mc::http::node_status status;
  mc::http::client_slot slot;
  std::unique_ptr<mc::http::server> http;
  // Not given: derived from the client RPC port (distinct nodes, distinct ports).
  const bool http_derived = !options.was_set("http_port");
  if (http_derived || opts.http_port != 0) {
    mc::http::server_options ho;
    ho.host = opts.http_host;
    ho.port = http_derived ? mc::http::derived_http_port(opts.client_rpc_port) : opts.http_port;
    ho.auth_tokens = tokens;
    ho.max_connections = opts.http_max_connections;
    ho.header_timeout = opts.http_read_timeout;
    ho.body_timeout = std::max<mc::duration>(opts.http_read_timeout * 6, std::chrono::seconds(30));
    http = std::make_unique<mc::http::server>(rt, ho);
    mc::http::add_client_endpoints(*http, slot, status, opts.http_max_value_bytes);
    // Not fatal: the node keeps serving data when its HTTP port is taken
    // (several nodes started with default flags on one host).
    if (auto r = http->start(); !r) {
      std::cerr << "mooncake_client: warning: HTTP off: " << http->message() << "\n";
      http.reset();
    } else {
      opts.http_registered_port = http->port();  // registered with the master
      std::fprintf(stderr, "mooncake_client: HTTP on %s:%u (%s)\n", opts.http_host.c_str(), http->port(),
                   http_derived ? "derived from client_rpc_port" : "--http_port");
    }
  }
  std::string why;
  auto c = mc::store::client::start(rt, opts, &why);
  if (!c) {
    std::cerr << "mooncake_client: cannot start: " << why << "\n";
    if (http) http->stop();
    mc::rpc::shutdown(rt);
    rt.stop();
    return 1;
  }
  // Attach service (standalone mode): not fatal when its port is taken.
  std::unique_ptr<mc::store::attach_server> attach;
  if (opts.attach) {
    mc::store::attach_server_options ao;
    ao.port = opts.attach_port;
    ao.max_request_timeout = opts.limits.max_request_timeout;
    std::string attach_why;
    if (auto a = mc::store::attach_server::start(rt, **c, ao, &attach_why); a) {
      attach = std::move(*a);
      std::fprintf(stderr, "mooncake_client: attach on %s\n", attach->endpoint().c_str());
    } else {
      std::cerr << "mooncake_client: warning: attach off: " << attach_why << "\n";
    }
  }
  slot.client.store(c->get(), std::memory_order_release);
  status.state = mc::http::node_state::serving;
  std::fprintf(stderr,
               "mooncake_client %s: P2P mode, RPC %s, transfer %s, master %s, %zu tier(s), %zu lock shards, http %s, "
               "auth %s%s\n",
               (*c)->id().c_str(), (*c)->rpc_endpoint().c_str(), (*c)->transfer_endpoint().c_str(),
               opts.master_server_address.c_str(), opts.tiers.size(), static_cast<std::size_t>(opts.lock_shard_count),
               http ? (opts.http_host + ":" + std::to_string(http->port())).c_str() : "off",
               tokens.empty() ? "off" : "on", (*c)->stats().registered ? "" : " (not registered yet)");
  int sig = mc::apps::wait_for_stop_signal();
  std::fprintf(stderr, "mooncake_client: signal %d, shutting down\n", sig);
  status.state = mc::http::node_state::draining;
  if (opts.drain_grace.count() > 0) mc::apps::wait_for_stop_signal_for(static_cast<long>(opts.drain_grace.count()));
  mc::apps::shutdown_watchdog watchdog("mooncake_client", mc::apps::shutdown_limit(opts.rpc_timeout));
  if (http) http->stop();  // handlers use the client: stop them first
  slot.client.store(nullptr, std::memory_order_release);
  if (attach) attach->stop();  // it uses the client: stop it first
  (*c)->stop();
  c->reset();
  mc::rpc::shutdown(rt);
  rt.stop();
  return 0;
}
