// python_bench's C++ side: the same inference cases as python_bench.py, through
// the C++ API (mc::store::client) with the same node options, in the same run.
//
//   cpp_driver --case NAME --keys N --value BYTES --pieces N -- <mooncake_client flags>
//
// Puts (replace semantics, the Python side's batch_upsert_*) go to the master's
// write route (the owner); gets read them back into another buffer. Driven over
// stdin / stdout, like the Python driver, so that python_bench.py can keep both
// alive and alternate them one iteration at a time: prints "ready" once set up,
// then per line "run" on stdin one iteration and the line "T <put seconds> <get
// seconds>"; ends at EOF. Exit 1 on any error or a checksum mismatch (checked
// outside the timed region).
#include "bench_options.hpp"
#include "bench_util.hpp"
#include "mc/rpc/client.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/store/client.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;

int fail(const std::string& m) {
  std::fprintf(stderr, "cpp_driver: %s\n", m.c_str());
  return 1;
}

/// Paged like a KV cache: piece l of key k at l * keys * piece + k * piece.
template <class Span, class Byte>
std::vector<std::vector<Span>> layout(Byte* base, std::size_t keys, std::size_t value, std::size_t pieces) {
  std::vector<std::vector<Span>> out(keys);
  std::size_t piece = value / pieces;
  for (std::size_t k = 0; k < keys; ++k)
    for (std::size_t l = 0; l < pieces; ++l) out[k].emplace_back(base + l * keys * piece + k * piece, piece);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string name = "case";
  std::uint64_t keys = 1, value = 1 << 20, pieces = 1;
  mc::config::option_set cli("cpp_driver",
                             "python_bench's C++ side: puts and gets KEYS values of VALUE bytes in PIECES pieces\n"
                             "through mc::store::client; the flags after -- configure the node (mooncake_client's).");
  cli.add("case", &name, "case name (the key prefix)")
      .add("keys", &keys, "values per batch", 1, 4096)
      .add_size("value", &value, "value size in bytes (a multiple of --pieces)")
      .add("pieces", &pieces, "pieces per value", 1, 4096)
      .accept_rest("CLIENT-FLAGS");
  mc::bench::parse_options(cli, argc, argv);
  if (value == 0 || value > (1u << 30) || value % pieces != 0)
    mc::bench::option_error("cpp_driver", "--value must be in 1..1GiB and a multiple of --pieces");
  mc::store::client_options o;
  auto set = mc::store::make_option_set(o);
  if (auto r = set.parse(cli.rest()); r.what != mc::config::outcome::kind::run) return fail(r.message);
  if (auto m = mc::store::resolve(o, set); !m.empty()) return fail(m);

  // Like a KV pool (and the Python driver's buffers): 2 MiB-aligned, advised
  // for transparent huge pages.
  mc::bench::page_buffer src(keys * value, true), dst(keys * value, true);
  std::memset(dst.data(), 0, dst.size());
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (std::size_t i = 0; i + 8 <= src.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(src.data() + i, &x, 8);
  }
  std::vector<std::string> names;
  for (std::size_t k = 0; k < keys; ++k) names.push_back(name + "/" + std::to_string(k));

  mc::runtime::runtime rt(std::max<std::uint64_t>(2, o.rpc_thread_num));
  rt.start();
  std::string why;
  auto c = mc::store::client::start(rt, o, &why);
  if (!c) return fail("start: " + why);
  auto& cl = **c;
  // Long-lived registrations, as the Python side's register_buffer.
  auto r1 = cl.register_buffer(src);
  auto r2 = cl.register_buffer(dst);
  if (!r1 || !r2) return fail("register_buffer");
  mc::store::put_options remote;
  remote.where = mc::store::placement::remote;
  std::printf("ready\n");
  std::fflush(stdout);
  int rc = 0;
  for (std::string cmd; rc == 0 && std::getline(std::cin, cmd);) {
    if (cmd != "run") {
      rc = fail("unknown command '" + cmd + "' (expected run)");
      break;
    }
    auto vs = layout<std::span<const std::byte>>(static_cast<const std::byte*>(src.data()), keys, value, pieces);
    auto ds = layout<std::span<std::byte>>(dst.data(), keys, value, pieces);
    auto t0 = clk::now();
    auto pr = rt.block_on(cl.batch_put_parts(names, std::move(vs), remote));
    auto t1 = clk::now();
    auto gr = rt.block_on(cl.batch_get_parts(names, std::move(ds)));
    auto t2 = clk::now();
    for (auto& r : pr)
      if (!r) rc = fail("put: " + r.error().message());
    for (auto& r : gr)
      if (!r || *r != value) rc = fail("get: " + (r ? std::string("wrong size") : r.error().message()));
    if (rc == 0 && std::memcmp(src.data(), dst.data(), src.size()) != 0) rc = fail("checksum mismatch");
    std::memset(dst.data(), 0, dst.size());
    if (rc == 0) {
      std::printf("T %.9f %.9f\n", std::chrono::duration<double>(t1 - t0).count(),
                  std::chrono::duration<double>(t2 - t1).count());
      std::fflush(stdout);
    }
  }
  r1->reset();
  r2->reset();
  cl.stop();
  c->reset();
  mc::rpc::shutdown(rt);
  rt.stop();
  return rc;
}
