// mooncake_master: the P2P metadata service.
//   ./mooncake_master --deployment_mode P2P --rpc_port 50051
#include "mc/http/node_endpoints.hpp"
#include "mc/master/master_server.hpp"
#include "mc/master/metadata.hpp"
#include "mc/master/options.hpp"
#include "mc/rpc/client.hpp"
#include "mc/rpc/protocol.hpp"
#include "mc/runtime/runtime.hpp"

#include "auth_setup.hpp"
#include "malloc_tuning.hpp"
#include "signals.hpp"

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <unistd.h>

namespace {

// This master's /metrics as Prometheus should scrape it (its own target in
// /prometheus/targets): --http_host, else --rpc_address, else the host name.
std::string self_metrics_endpoint(const mc::master::master_options& o) {
  auto any = [](const std::string& h) { return h.empty() || h == "0.0.0.0" || h == "::" || h == "[::]"; };
  std::string host = !any(o.http_host) ? o.http_host : !any(o.rpc_address) ? o.rpc_address : std::string();
  if (host.empty()) {
    char name[256] = {};
    if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return {};
    host = name;
  }
  return mc::master::http_endpoint_of({}, host, o.metrics_port);  // `host` is never a wildcard here
}

}  // namespace

int main(int argc, char** argv) {
  mc::apps::block_stop_signals();  // before any thread starts: sigwait receives them
  mc::apps::tune_malloc();         // before any thread starts (malloc_tuning.hpp)

  mc::master::master_options opts;
  auto options = mc::master::make_option_set(opts);
  auto parsed = options.parse(argc, argv);
  if (parsed.what == mc::config::outcome::kind::version) {
    std::cout << parsed.message << "\n";
    return 0;
  }
  if (parsed.what == mc::config::outcome::kind::help) {
    std::cout << parsed.message << "\nlogs: stderr, one line per event, each starting with \"mooncake_master:\".\n"
              << "\nenvironment:\n  MC_AUTH_TOKEN, MC_AUTH_TOKEN_FILE  as --auth_token, --auth_token_file\n  "
                 "MC_RPC_PROTOCOL           RPC transport: tcp (default) or rdma (Cap'n Proto over RDMA SEND/RECV;\n   "
                 "                         needs an RDMA device; TCP clients are still served)\n";
    return 0;
  }
  if (parsed.what == mc::config::outcome::kind::error) {
    std::cerr << parsed.message << "\n";
    return 2;
  }
  if (auto err = mc::master::validate(opts); !err.empty()) {
    std::cerr << "mooncake_master: " << err << "\n";
    return 2;
  }
  std::vector<std::string> tokens;  // accepted by RPC and HTTP; empty = auth off
  if (auto err = mc::apps::apply_auth(opts.auth, "mooncake_master", &tokens); !err.empty()) {
    std::cerr << "mooncake_master: " << err << "\n";
    return 2;
  }
  // MC_RPC_PROTOCOL: tcp, or rdma (opens the RDMA device now: a clear error when there is none).
  if (auto err = mc::rpc::use_protocol_from_env({}); !err.empty()) {
    std::cerr << "mooncake_master: " << err << "\n";
    return 2;
  }

  mc::runtime::runtime rt(opts.rpc_thread_num);
  rt.start();
  int rc = 0;
  std::optional<mc::apps::shutdown_watchdog> watchdog;  // armed at the stop signal
  {
    mc::master::master_server server(rt, opts);
    mc::http::node_status status;
    std::unique_ptr<mc::http::server> http;
    if (opts.metrics_port != 0) {
      mc::http::server_options ho;
      ho.host = opts.http_host;
      ho.port = opts.metrics_port;
      ho.auth_tokens = tokens;
      ho.public_paths.insert(ho.public_paths.end(), mc::http::status_page_paths.begin(),
                             mc::http::status_page_paths.end());  // the page holds no data
      http = std::make_unique<mc::http::server>(rt, ho);
      mc::http::add_master_endpoints(*http, server, status, self_metrics_endpoint(opts));
      mc::http::add_status_page(*http, server, tokens.empty() ? std::string() : tokens.front());
      // Not fatal: a node keeps serving data when its metrics port is taken
      // (several nodes started with default flags on one host).
      if (auto r = http->start(); !r) {
        std::cerr << "mooncake_master: warning: HTTP off: " << http->message() << "\n";
        http.reset();
      }
    }
    if (auto r = server.start(); !r) {
      std::cerr << "mooncake_master: cannot serve on " << opts.rpc_address << ":" << opts.rpc_port << ": "
                << server.message() << "\n";
      rc = 1;
    } else {
      status.state = mc::http::node_state::serving;
      const auto pport = server.publish_call_port();
      std::fprintf(
          stderr, "mooncake_master: P2P mode, serving on %s:%u (%zu threads), publish calls %s, http %s, auth %s\n",
          opts.rpc_address.c_str(), server.port(), static_cast<std::size_t>(opts.rpc_thread_num),
          pport ? ("on port " + std::to_string(pport)).c_str() : "off",
          http ? (opts.http_host + ":" + std::to_string(http->port())).c_str() : "off", tokens.empty() ? "off" : "on");
      int sig = mc::apps::wait_for_stop_signal();
      std::fprintf(stderr, "mooncake_master: signal %d, shutting down\n", sig);
      status.state = mc::http::node_state::draining;
      if (opts.drain_grace.count() > 0) mc::apps::wait_for_stop_signal_for(static_cast<long>(opts.drain_grace.count()));
      watchdog.emplace("mooncake_master", mc::apps::shutdown_limit(std::chrono::seconds(2)));
      server.stop();
      if (http) http->stop();
    }
  }
  mc::rpc::shutdown(rt);
  rt.stop();
  watchdog.reset();
  return rc;
}
