// Test server process for the two-process rpc tests:
//   rpc_test_server [port]      (0 or absent = ephemeral)
// Prints "PORT <n>" on stdout once listening; exits cleanly on SIGTERM/SIGINT.
#include "mc/rpc/client.hpp"
#include "mc/rpc/protocol.hpp"
#include "mc/rpc/server.hpp"
#include "mc/runtime/runtime.hpp"
#include "test_service.hpp"

#include <boost/asio/signal_set.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <future>

int main(int argc, char** argv) {
  auto port = static_cast<std::uint16_t>(argc > 1 ? std::atoi(argv[1]) : 0);
  // MC_RPC_PROTOCOL=rdma serves RPC over RDMA (the rdma suite).
  if (auto err = mc::rpc::use_protocol_from_env({}); !err.empty()) {
    std::fprintf(stderr, "rpc_test_server: %s\n", err.c_str());
    return 2;
  }
  mc::runtime::runtime rt(2);
  rt.start();
  mc::rpc::server_options o;
  o.host = "127.0.0.1";
  o.port = port;
  o.threads = 2;
  mc::rpc::server srv(rt, o);
  mc::rpc::test::add_test_services(srv);
  if (auto r = srv.start(); !r) {
    std::fprintf(stderr, "rpc_test_server: %s\n", srv.message().c_str());
    return 2;
  }
  std::promise<int> stop;
  boost::asio::signal_set signals(rt.context(0), SIGTERM, SIGINT);
  signals.async_wait([&](boost::system::error_code ec, int sig) { stop.set_value(ec ? 0 : sig); });
  std::printf("PORT %u\n", static_cast<unsigned>(srv.port()));
  std::fflush(stdout);
  stop.get_future().wait();
  srv.stop();
  mc::rpc::shutdown(rt);
  rt.stop();
  return 0;
}
