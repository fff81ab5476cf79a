#pragma once
// In-process RPC test environment: a 4-thread runtime, a server on threads
// 0..1 (127.0.0.1, ephemeral port) with the test services; clients usually run
// on threads 2..3.
#include "mc/rpc/capnp.hpp"
#include "mc/rpc/client.hpp"
#include "mc/rpc/server.hpp"
#include "mc/runtime/runtime.hpp"
#include "test_service.hpp"

#include <doctest/doctest.h>

#include <memory>
#include <string>

namespace mc::rpc::test {

inline mc::rpc::server_options local_options() {
  mc::rpc::server_options o;
  o.host = "127.0.0.1";
  o.threads = 2;
  return o;
}

struct rpc_fixture {
  explicit rpc_fixture(mc::rpc::server_options o = local_options(), std::size_t threads = 4) : rt(threads) {
    rt.start();
    srv = std::make_unique<mc::rpc::server>(rt, o);
    add_test_services(*srv);
    auto r = srv->start();
    REQUIRE_MESSAGE(r, srv->message());
  }
  ~rpc_fixture() {
    if (srv) srv->stop();
    srv.reset();
    mc::rpc::shutdown(rt);
    rt.stop();
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(srv->port()); }

  mc::runtime::runtime rt;
  std::unique_ptr<mc::rpc::server> srv;
};

}  // namespace mc::rpc::test
