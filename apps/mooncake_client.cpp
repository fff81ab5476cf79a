// mooncake_client: one P2P client node, e.g. (the spec's launch command)
//   ./mooncake_client --master_server_address 127.0.0.1:50051 --port 50052 --client_rpc_port 12345
//     --deployment_mode P2P
//     --tiered_backend_config '{"tiers":[{"type":"DRAM","capacity":536870912,"priority":100}]}'
#include "mc/rpc/client.hpp"
#include "mc/rpc/protocol.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/store/client.hpp"
#include "mc/store/client_options.hpp"
#include "signals.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>

int main(int argc, char** argv) {
  mc::apps::block_stop_signals();
  mc::store::client_options opts;
  auto options = mc::store::make_option_set(opts);
  auto parsed = options.parse(argc, argv);
  if (parsed.what == mc::config::outcome::kind::help) {
    std::cout << parsed.message
              << "\nenvironment:\n"
                 "  MOONCAKE_DM_LOCK_SHARD_COUNT  DataManager lock shards (default 1024)\n"
                 "  MC_RPC_PROTOCOL               RPC transport: tcp (default); rdma is not built\n"
                 "\nconfig file: the same keys, plus [[tiers]] tables (type, capacity, priority,\n"
                 "allocator_type, path) instead of --tiered_backend_config. See conf/client.toml.\n";
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
  if (auto p = mc::rpc::protocol_from_env(); !p) {
    const char* v = std::getenv("MC_RPC_PROTOCOL");
    std::cerr << "mooncake_client: " << mc::rpc::protocol_error_message(v ? v : "") << "\n";
    return 2;
  }

  // RPC threads serve peers; two more run the application side (heartbeats,
  // transfers initiated for local callers) so serving never starves them.
  mc::runtime::runtime rt(std::max<std::size_t>(opts.rpc_thread_num, 1));
  rt.start();
  std::string why;
  auto c = mc::store::client::start(rt, opts, &why);
  if (!c) {
    std::cerr << "mooncake_client: cannot start: " << why << "\n";
    mc::rpc::shutdown(rt);
    rt.stop();
    return 1;
  }
  std::fprintf(stderr,
               "mooncake_client %s: P2P mode, RPC %s, transfer %s, master %s, %zu tier(s), %zu lock shards%s\n",
               (*c)->id().c_str(), (*c)->rpc_endpoint().c_str(), (*c)->transfer_endpoint().c_str(),
               opts.master_server_address.c_str(), opts.tiers.size(), static_cast<std::size_t>(opts.lock_shard_count),
               (*c)->stats().registered ? "" : " (not registered yet)");
  int sig = mc::apps::wait_for_stop_signal();
  std::fprintf(stderr, "mooncake_client: signal %d, shutting down\n", sig);
  (*c)->stop();
  c->reset();
  mc::rpc::shutdown(rt);
  rt.stop();
  return 0;
}
