// A serving peer for the rdma tests:
//   rdma_peer_helper SIZE -> registers SIZE random bytes (seed 4242) with a
//   protocol "rdma" engine, prints "READY endpoint address length token" and
//   serves until stdin closes.
#define DOCTEST_CONFIG_DISABLE
#include "mc/runtime/runtime.hpp"
#include "mc/transfer/engine.hpp"
#include "test_support.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  mc::runtime::runtime rt(2);
  rt.start();
  mc::transfer::engine_options o;
  o.bind_host = "127.0.0.1";
  o.protocol = "rdma";
  if (const char* g = std::getenv("RXE_VM_GID_INDEX")) o.gid_index = std::atoi(g);
  try {
    mc::transfer::engine e(rt, o);
    if (!e.start()) return 2;
    auto buf = mc::test::random_bytes(std::stoull(argv[1]), 4242);
    auto reg = e.register_memory(buf.data(), buf.size());
    if (!reg) return 2;
    auto d = reg->describe();
    std::printf("READY %s %llu %llu %llu\n", d.endpoint.c_str(), (unsigned long long)d.address,
                (unsigned long long)d.length, (unsigned long long)d.token);
    std::fflush(stdout);
    char c;
    while (::read(0, &c, 1) > 0) {
    }
    e.stop();
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "rdma_peer_helper: %s\n", ex.what());
    return 2;
  }
  return 0;
}
