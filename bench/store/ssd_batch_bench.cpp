// ssd_batch_bench: a batch get of values resident in an owner's SSD tier
// against the same batch from an owner's DRAM tier, measured in the same run
// (issue 14: SSD reads overlap the sends — double-buffered staging — instead
// of read-then-send alternation). One process: a master, a DRAM owner, an
// SSD-only owner and the reader, transfers forced over TCP (loopback), so
// the owner's sends are real network work the SSD reads can overlap with.
//   ssd_batch_bench [--runs N] [--keys N] [--value-kib N] [--dir PATH]   (--help)
#include "bench_options.hpp"
#include "bench_util.hpp"
#include "mc/master/master_server.hpp"
#include "mc/rpc/client.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/store/client.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

struct settings {
  std::uint64_t runs = 5;
  std::size_t keys = 32;
  std::size_t value_kib = 1024;
  std::string dir = "/var/tmp";
};

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "ssd_batch_bench: FAILED: %s\n", why.c_str());
  std::exit(1);
}

std::unique_ptr<mc::store::client> start_client(mc::runtime::runtime& rt, const std::string& id,
                                                const std::string& master, const std::string& tiers) {
  mc::store::client_options o;
  o.client_id = id;
  o.master_server_address = master;
  o.host = "127.0.0.1";
  o.port = 0;
  o.client_rpc_port = 0;
  o.http_port = 0;
  o.transfer_transport = "tcp";
  o.tiered_backend_config = tiers;
  mc::config::option_set none("ssd_batch_bench", "");
  if (auto err = mc::store::resolve(o, none); !err.empty()) fail(err);
  std::string why;
  auto c = mc::store::client::start(rt, o, &why);
  if (!c) fail(id + ": " + why);
  return std::move(*c);
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  mc::config::option_set set("ssd_batch_bench",
                             "A batch get of values in an owner's SSD tier vs the same batch from an owner's\n"
                             "DRAM tier, in one process (master, two owners, the reader; transfers over TCP).");
  set.add("runs", &s.runs, "repetitions (interleaved SSD / DRAM)", 1, 1000)
      .add("keys", &s.keys, "values per batch", 1, 4096)
      .add("value-kib", &s.value_kib, "value size in KiB (plus 17 bytes)", 1, 1 << 20)
      .add("dir", &s.dir, "directory for the SSD tier");
  mc::bench::parse_options(set, argc, argv);
  const std::size_t value = s.value_kib * 1024 + 17;  // not a multiple of any block or chunk size
  auto ssd_dir = std::filesystem::path(s.dir) / ("mc-ssd-batch-bench." + std::to_string(::getpid()));
  std::filesystem::create_directories(ssd_dir);
  const auto total_mib = std::to_string(2 * s.keys * value / (1 << 20) + 64) + "MiB";

  mc::runtime::runtime rt(2);
  rt.start();
  mc::master::master_options mo;
  mo.rpc_address = "127.0.0.1";
  mo.rpc_port = 0;
  mc::master::master_server master(rt, mo);
  if (!master.start()) fail("master did not start");
  const std::string maddr = "127.0.0.1:" + std::to_string(master.port());
  auto dram = start_client(rt, "dram-owner", maddr,
                           R"({"tiers":[{"type":"DRAM","capacity":")" + total_mib + R"(","priority":100}]})");
  auto ssd = start_client(rt, "ssd-owner", maddr,
                          R"({"tiers":[{"type":"SSD","capacity":")" + total_mib + R"(","priority":10,"path":")" +
                              ssd_dir.string() + R"("}]})");
  auto reader = start_client(rt, "reader", maddr, R"({"tiers":[{"type":"DRAM","capacity":"16MiB","priority":100}]})");

  std::vector<std::uint8_t> src(s.keys * value);
  std::mt19937_64 rng(7);
  for (auto& b : src) b = static_cast<std::uint8_t>(rng());
  std::vector<std::uint8_t> dst(src.size());
  auto reg = reader->register_buffer({reinterpret_cast<std::byte*>(dst.data()), dst.size()});
  if (!reg) fail("register_buffer");
  auto keys_of = [&](const std::string& prefix) {
    std::vector<std::string> k;
    for (std::size_t i = 0; i < s.keys; ++i) k.push_back(prefix + std::to_string(i));
    return k;
  };
  auto dram_keys = keys_of("dram/"), ssd_keys = keys_of("ssd/");
  auto put_all = [&](mc::store::client& owner, const std::vector<std::string>& keys) {
    std::vector<std::span<const std::byte>> vs;
    for (std::size_t i = 0; i < s.keys; ++i)
      vs.emplace_back(reinterpret_cast<const std::byte*>(src.data()) + i * value, value);
    for (auto& r : rt.block_on(owner.batch_put(keys, vs)))
      if (!r) fail("put: " + r.error().message());
  };
  put_all(*dram, dram_keys);
  put_all(*ssd, ssd_keys);
  auto get_all = [&](const std::vector<std::string>& keys) {
    std::vector<std::span<std::byte>> bufs;
    for (std::size_t i = 0; i < s.keys; ++i)
      bufs.emplace_back(reinterpret_cast<std::byte*>(dst.data()) + i * value, value);
    auto t0 = std::chrono::steady_clock::now();
    auto rs = rt.block_on(reader->batch_get(keys, bufs));
    auto secs = mc::bench::seconds_since(t0);
    for (auto& r : rs)
      if (!r || *r != value) fail("get: " + (r ? std::string("wrong size") : r.error().message()));
    return secs;
  };
  // Warm-up + verification of both sets.
  for (auto* keys : {&dram_keys, &ssd_keys}) {
    std::fill(dst.begin(), dst.end(), 0);
    get_all(*keys);
    if (dst != src) fail("wrong bytes read back for " + keys->front());
  }
  mc::bench::row r{"store",
                   "ssd_batch_get_" + std::to_string(s.keys) + "x" + std::to_string(s.value_kib) + "KiB",
                   "throughput",
                   "MiB/s",
                   {},
                   "dram_batch_get",
                   {}};
  const double mib = static_cast<double>(s.keys * value) / (1 << 20);
  for (std::uint64_t i = 0; i < s.runs; ++i) {  // interleaved: both see the same machine state
    r.baseline_runs.push_back(mib / get_all(dram_keys));
    r.runs.push_back(mib / get_all(ssd_keys));
  }
  mc::bench::report(r);

  reader->stop();
  ssd->stop();
  dram->stop();
  master.stop();
  mc::rpc::shutdown(rt);
  rt.stop();
  std::filesystem::remove_all(ssd_dir);
  return 0;
}
