// A serving peer for the rdma tests:
//   rdma_peer_helper SIZE -> registers SIZE random bytes (seed 4242) with a
//   protocol "rdma" engine, prints "READY endpoint address length token" and
//   serves until stdin closes.
#define DOCTEST_CONFIG_DISABLE
#include "mc/runtime/runtime.hpp"
#include "mc/transfer/engine.hpp"
#include "peer_process.hpp"

#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  mc::transfer::engine_options o;
  o.bind_host = "127.0.0.1";
  o.protocol = "rdma";
  if (const char* g = std::getenv("RXE_VM_GID_INDEX")) o.gid_index = std::atoi(g);
  return mc::transfer::test::serve_peer(o, std::stoull(argv[1]), "rdma_peer_helper");
}
