// A peer process for the transfer integration tests and the netns test.
//   transfer_peer_helper serve  BIND_HOST SIZE            -> prints "READY endpoint address length token"
//                                                           and serves until stdin closes
//   transfer_peer_helper client ENDPOINT ADDRESS LENGTH TOKEN FORCE(tcp|same_host|auto)
//                                                        -> write / read-back checks; exit 0 when all good
//   transfer_peer_helper clients FORCE (ENDPOINT ADDRESS LENGTH TOKEN)...
//                                                        -> the same per descriptor; "VIA i kind" lines
//   transfer_peer_helper hammer ENDPOINT ADDRESS LENGTH TOKEN SIZE
//                                                        -> serves SIZE bytes (READY) and same-host-writes
//                                                           into the descriptor until stdin closes
//   MC_TEST_NONDUMPABLE=1: prctl(PR_SET_DUMPABLE, 0) first (EPERM for peers)
// test_support.hpp pulls doctest; this program has its own main.
#define DOCTEST_CONFIG_DISABLE
#include "mc/runtime/runtime.hpp"
#include "mc/transfer/engine.hpp"
#include "peer_process.hpp"
#include "test_support.hpp"

#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <thread>

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
  // MC_TEST_HELPER_THREADS=1: one io_uring ring (unprivileged users have a
  // small locked-memory budget for rings).
  const char* t = std::getenv("MC_TEST_HELPER_THREADS");
  return serve_peer(o, size, "helper", t && *t == '1' ? 1 : 2);
}

/// Write + read-back checks against every descriptor; prints "VIA i kind"
/// per descriptor (the transport that carried its writes).
int clients(const std::vector<remote_buffer>& ds, const std::string& force) {
  mc::runtime::runtime rt(1);
  rt.start();
  engine_options o;
  o.bind_host = "0.0.0.0";
  if (force == "tcp") o.force = transport_kind::tcp;
  if (force == "same_host") o.force = transport_kind::same_host;
  engine e(rt, o);
  if (!e.start()) return 2;
  int bad = 0;
  std::uint64_t seed = 7;
  for (std::size_t i = 0; i < ds.size(); ++i) {
    const auto& d = ds[i];
    const auto before = e.stats();
    std::size_t sizes[] = {1, 4095, (1u << 20) - 1, (1u << 20) + 1, 5u << 20, d.length};
    for (auto n : sizes) {
      if (n > d.length) continue;
      auto src = mc::test::random_bytes(n, seed++);
      remote_buffer part = d;
      part.length = n;
      auto w = rt.block_on(e.write(std::as_bytes(std::span(src)), part));
      std::vector<std::uint8_t> back(n);
      auto r = rt.block_on(e.read(std::as_writable_bytes(std::span(back)), part));
      if (!w || !r || mc::test::checksum(back.data(), n) != mc::test::checksum(src.data(), n)) {
        std::fprintf(stderr, "helper client: size %zu failed (%s / %s)\n", n, w ? "ok" : w.error().message().c_str(),
                     r ? "ok" : r.error().message().c_str());
        ++bad;
      }
    }
    auto bad_token = d;
    bad_token.token ^= 1;
    std::vector<std::uint8_t> one(16);
    auto w = rt.block_on(e.write(std::as_bytes(std::span(one)), bad_token));
    if (!w.has_error() || !mc::is(w.error(), mc::errc::access_denied)) ++bad;
    const auto after = e.stats();
    for (std::size_t k = 0; k < transport_kind_count; ++k)
      if (after.initiated[k].write_ops > before.initiated[k].write_ops)
        std::printf("VIA %zu %s\n", i, std::string(to_string(transport_kind(k))).c_str());
  }
  std::printf("FALLBACKS %llu\n", static_cast<unsigned long long>(e.stats().same_host_fallbacks));
  std::fflush(stdout);
  e.stop();
  return bad == 0 ? 0 : 1;
}

/// Serves `size` bytes (READY line) and meanwhile writes random bytes into
/// `d` over the same-host transport in a loop until stdin closes; prints
/// "WRITING" after the first successful write.
int hammer(const remote_buffer& d, std::size_t size) {
  mc::runtime::runtime rt(2);
  rt.start();
  engine_options o;
  o.bind_host = "127.0.0.1";
  o.force = transport_kind::same_host;
  engine e(rt, o);
  if (!e.start()) return 2;
  auto buf = mc::test::random_bytes(size, 4242);
  auto reg = e.register_memory(buf.data(), buf.size());
  if (!reg) return 2;
  mc::transfer::test::print_ready(reg->describe());
  std::atomic<bool> done{false};
  std::thread t([&] {
    auto src = mc::test::random_bytes(d.length, 5);
    bool told = false;
    while (!done) {
      auto w = rt.block_on(e.write(std::as_bytes(std::span(src)), d, std::chrono::seconds(30)));
      if (w && !told) {
        std::printf("WRITING\n");
        std::fflush(stdout);
        told = true;
      }
      if (!w) {
        std::printf("FAILED %s\n", w.error().message().c_str());
        std::fflush(stdout);
        break;
      }
    }
  });
  char c;
  while (::read(0, &c, 1) > 0) {}
  done = true;
  t.join();
  e.stop();
  return 0;
}

}  // namespace

remote_buffer descriptor(char** a) {
  return remote_buffer{a[0], std::strtoull(a[1], nullptr, 10), std::strtoull(a[2], nullptr, 10),
                       std::strtoull(a[3], nullptr, 10)};
}

int main(int argc, char** argv) {
  // Test hook: a process that the kernel will not let same-uid peers attach
  // to (process_vm_* -> EPERM for a non-root initiator).
  if (const char* v = std::getenv("MC_TEST_NONDUMPABLE"); v && *v == '1') ::prctl(PR_SET_DUMPABLE, 0);
  if (argc == 4 && std::strcmp(argv[1], "serve") == 0) return serve(argv[2], std::strtoull(argv[3], nullptr, 10));
  if (argc == 7 && std::strcmp(argv[1], "client") == 0) return clients({descriptor(argv + 2)}, argv[6]);
  if (argc >= 7 && (argc - 3) % 4 == 0 && std::strcmp(argv[1], "clients") == 0) {
    std::vector<remote_buffer> ds;
    for (int i = 3; i < argc; i += 4) ds.push_back(descriptor(argv + i));
    return clients(ds, argv[2]);
  }
  if (argc == 7 && std::strcmp(argv[1], "hammer") == 0)
    return hammer(descriptor(argv + 2), std::strtoull(argv[6], nullptr, 10));
  std::fprintf(stderr,
               "usage: %s serve BIND SIZE | client ENDPOINT ADDRESS LENGTH TOKEN FORCE |\n"
               "       clients FORCE (ENDPOINT ADDRESS LENGTH TOKEN)... | hammer ENDPOINT ADDRESS LENGTH TOKEN SIZE\n",
               argv[0]);
  return 2;
}
