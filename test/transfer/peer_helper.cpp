// A peer process for the transfer integration tests and the netns test.
//   transfer_peer_helper serve  BIND_HOST SIZE            -> prints "READY endpoint address length token"
//                                                           and serves until stdin closes
//   transfer_peer_helper client ENDPOINT ADDRESS LENGTH TOKEN FORCE(tcp|same_host|auto)
//                                                        -> write / read-back checks; exit 0 when all good
// test_support.hpp pulls doctest; this program has its own main.
#define DOCTEST_CONFIG_DISABLE
#include "mc/runtime/runtime.hpp"
#include "mc/transfer/engine.hpp"
#include "peer_process.hpp"
#include "test_support.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace mc::transfer;
using mc::transfer::test::serve_peer;

namespace {

int serve(const std::string& bind, std::size_t size) {
  engine_options o;
  o.bind_host = bind;
  return serve_peer(o, size, "helper");
}

int client(const remote_buffer& d, const std::string& force) {
  mc::runtime::runtime rt(1);
  rt.start();
  engine_options o;
  o.bind_host = "0.0.0.0";
  if (force == "tcp") o.force = transport_kind::tcp;
  if (force == "same_host") o.force = transport_kind::same_host;
  engine e(rt, o);
  if (!e.start()) return 2;
  int bad = 0;
  std::size_t sizes[] = {1, 4095, (1u << 20) - 1, (1u << 20) + 1, 5u << 20, d.length};
  std::uint64_t seed = 7;
  for (auto n : sizes) {
    if (n > d.length) continue;
    auto src = mc::test::random_bytes(n, seed++);
    remote_buffer part = d;
    part.length = n;
    auto w = rt.block_on(e.write(std::as_bytes(std::span(src)), part));
    std::vector<std::uint8_t> back(n);
    auto r = rt.block_on(e.read(std::as_writable_bytes(std::span(back)), part));
    if (!w || !r || back != src) {
      std::fprintf(stderr, "helper client: size %zu failed (%s / %s)\n", n,
                   w ? "ok" : w.error().message().c_str(), r ? "ok" : r.error().message().c_str());
      ++bad;
    }
  }
  auto bad_token = d;
  bad_token.token ^= 1;
  std::vector<std::uint8_t> one(16);
  auto w = rt.block_on(e.write(std::as_bytes(std::span(one)), bad_token));
  if (!w.has_error() || !mc::is(w.error(), mc::errc::access_denied)) ++bad;
  auto s = e.stats();
  for (std::size_t k = 0; k < transport_kind_count; ++k)
    if (s.initiated[k].write_ops) std::printf("VIA %s\n", std::string(to_string(transport_kind(k))).c_str());
  e.stop();
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "serve") == 0) return serve(argv[2], std::strtoull(argv[3], nullptr, 10));
  if (argc == 7 && std::strcmp(argv[1], "client") == 0) {
    remote_buffer d{argv[2], std::strtoull(argv[3], nullptr, 10), std::strtoull(argv[4], nullptr, 10),
                    std::strtoull(argv[5], nullptr, 10)};
    return client(d, argv[6]);
  }
  std::fprintf(stderr, "usage: %s serve BIND SIZE | client ENDPOINT ADDRESS LENGTH TOKEN FORCE\n", argv[0]);
  return 2;
}
