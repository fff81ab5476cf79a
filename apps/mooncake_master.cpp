// mooncake_master: the P2P metadata service.
//   ./mooncake_master --deployment_mode P2P --rpc_port 50051
#include "mc/master/master_server.hpp"
#include "mc/master/options.hpp"
#include "mc/rpc/client.hpp"
#include "mc/rpc/protocol.hpp"
#include "mc/runtime/runtime.hpp"

#include "signals.hpp"

#include <cstdio>
#include <iostream>

int main(int argc, char** argv) {
  mc::apps::block_stop_signals();  // before any thread starts: sigwait receives them

  mc::master::master_options opts;
  auto options = mc::master::make_option_set(opts);
  auto parsed = options.parse(argc, argv);
  if (parsed.what == mc::config::outcome::kind::help) {
    std::cout << parsed.message << "\nenvironment:\n  MC_RPC_PROTOCOL           RPC transport: tcp (default); rdma is not built\n";
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
  if (auto p = mc::rpc::protocol_from_env(); !p) {
    const char* v = std::getenv("MC_RPC_PROTOCOL");
    std::cerr << "mooncake_master: " << mc::rpc::protocol_error_message(v ? v : "") << "\n";
    return 2;
  }

  mc::runtime::runtime rt(opts.rpc_thread_num);
  rt.start();
  int rc = 0;
  {
    mc::master::master_server server(rt, opts);
    if (auto r = server.start(); !r) {
      std::cerr << "mooncake_master: cannot serve on " << opts.rpc_address << ":" << opts.rpc_port << ": "
                << server.message() << "\n";
      rc = 1;
    } else {
      std::fprintf(stderr, "mooncake_master: P2P mode, serving on %s:%u (%zu threads)\n", opts.rpc_address.c_str(),
                   server.port(), static_cast<std::size_t>(opts.rpc_thread_num));
      int sig = mc::apps::wait_for_stop_signal();
      std::fprintf(stderr, "mooncake_master: signal %d, shutting down\n", sig);
      server.stop();
    }
  }
  mc::rpc::shutdown(rt);
  rt.stop();
  return rc;
}
