// Without a usable RDMA device, protocol "rdma" is a clear startup error.
#include "mc/runtime/runtime.hpp"
#include "mc/transfer/engine.hpp"

#include <doctest/doctest.h>

#include <infiniband/verbs.h>

#include <stdexcept>
#include <string>

using namespace mc::transfer;

TEST_SUITE("rdma_nodevice") {
  TEST_CASE("an unknown device name is a startup error that names it") {
    mc::runtime::runtime rt(1);
    engine_options o;
    o.protocol = "rdma";
    o.device_names = {"no_such_rdma_dev0"};
    std::string msg;
    try {
      engine e(rt, o);
    } catch (const std::invalid_argument& ex) {
      msg = ex.what();
    }
    CHECK(msg.find("rdma") != std::string::npos);
    const bool no_devices = msg.find("no RDMA device found") != std::string::npos;
    const bool named = msg.find("no_such_rdma_dev0") != std::string::npos;
    CHECK((no_devices || named));
  }

  TEST_CASE("with no device at all the error says so") {
    int n = 0;
    ibv_device** l = ibv_get_device_list(&n);
    if (l) ibv_free_device_list(l);
    if (n > 0) return;  // this machine has devices (the VM): covered by the case above
    mc::runtime::runtime rt(1);
    engine_options o;
    o.protocol = "rdma";
    CHECK_THROWS_WITH_AS(engine(rt, o), doctest::Contains("no RDMA device found"), std::invalid_argument);
  }

  TEST_CASE("force=rdma without protocol rdma is rejected") {
    mc::runtime::runtime rt(1);
    engine_options o;
    o.force = transport_kind::rdma;
    CHECK_THROWS_AS(engine(rt, o), std::invalid_argument);
  }
}
