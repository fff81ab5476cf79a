// Remote-get throughput with the per-method RPC metrics on vs off, in one
// process: a master, client A holding the values, client B reading them
// remotely over the TCP transport. Prints the project's table + JSON lines.
//   http_bench [--seconds S] [--size BYTES] [--runs N]   (--help)
#include "bench_options.hpp"
#include "bench_util.hpp"

#include "mc/master/master_server.hpp"
#include "mc/rpc/client.hpp"
#include "mc/rpc/method_stats.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/store/client.hpp"

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace {

struct node {
  std::unique_ptr<mc::runtime::runtime> rt;
  std::unique_ptr<mc::store::client> client;
};

node start_node(const std::string& id, const std::string& master) {
  mc::store::client_options o;
  o.client_id = id;
  o.master_server_address = master;
  o.host = "127.0.0.1";
  o.local_hostname = "127.0.0.1";
  o.port = 0;
  o.client_rpc_port = 0;
  o.transfer_transport = "tcp";
  o.tiers.push_back(mc::tiered::tier_config{mc::tiered::tier_type::dram, 256ull << 20, 100, "OFFSET", {}, false});
  node n;
  n.rt = std::make_unique<mc::runtime::runtime>(2);
  n.rt->start();
  std::string why;
  auto c = mc::store::client::start(*n.rt, o, &why);
  if (!c) {
    std::cerr << "http_bench: cannot start " << id << ": " << why << "\n";
    std::exit(1);
  }
  n.client = std::move(*c);
  return n;
}

mc::task<double> read_loop(mc::store::client& c, std::size_t keys, std::size_t size, double seconds) {
  std::vector<std::byte> buf(size);
  auto t0 = std::chrono::steady_clock::now();
  std::size_t ops = 0;
  while (mc::bench::seconds_since(t0) < seconds) {
    auto r = co_await c.get("bench/" + std::to_string(ops % keys), buf);
    if (!r) throw std::runtime_error("get failed: " + r.error().message());
    ++ops;
  }
  co_return static_cast<double>(ops) / mc::bench::seconds_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  std::size_t size = 64 << 10;
  std::uint64_t runs = 3;
  mc::config::option_set set("http_bench", "Remote-get throughput with RPC method metrics on vs off.");
  set.add("seconds", &seconds, "duration of one run", 0, 3600)
      .add_size("size", &size, "value size")
      .add("runs", &runs, "repetitions, alternating off/on", 1, 1000);
  mc::bench::parse_options(set, argc, argv);
  if (size == 0 || size > (1u << 30)) mc::bench::option_error("http_bench", "--size must be in 1..1GiB");

  mc::runtime::runtime master_rt(2);
  master_rt.start();
  mc::master::master_options mo;
  mo.rpc_address = "127.0.0.1";
  mo.rpc_port = 0;
  auto master = std::make_unique<mc::master::master_server>(master_rt, mo);
  if (!master->start()) return 1;
  auto addr = "127.0.0.1:" + std::to_string(master->port());
  auto a = start_node("bench-a", addr);
  auto b = start_node("bench-b", addr);

  constexpr std::size_t keys = 64;
  std::vector<std::byte> value(size, std::byte{0x5a});
  for (std::size_t k = 0; k < keys; ++k) {
    auto r = a.rt->block_on(
        [](mc::store::client& c, std::string key, std::span<const std::byte> v) -> mc::task<mc::result<void>> {
          co_return co_await c.put(std::move(key), v);
        }(*a.client, "bench/" + std::to_string(k), value));
    if (!r) return 1;
  }
  b.rt->block_on(read_loop(*b.client, keys, size, 0.5));  // warm up connections and routes

  mc::bench::row on{
      "http", "remote_get_" + std::to_string(size) + "B_metrics_on", "throughput", "ops/s", {}, "metrics_off", {}};
  for (std::uint64_t r = 0; r < runs; ++r) {
    mc::rpc::set_method_stats_enabled(false);
    on.baseline_runs.push_back(b.rt->block_on(read_loop(*b.client, keys, size, seconds)));
    mc::rpc::set_method_stats_enabled(true);
    on.runs.push_back(b.rt->block_on(read_loop(*b.client, keys, size, seconds)));
  }
  mc::bench::report(on);

  for (auto* n : {&b, &a}) {
    n->client->stop();
    n->client.reset();
    mc::rpc::shutdown(*n->rt);
    n->rt->stop();
  }
  master->stop();
  mc::rpc::shutdown(master_rt);
  master_rt.stop();
  return 0;
}
