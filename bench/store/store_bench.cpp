// store_bench: remote get / put throughput and latency between two client
// processes on this host, against Redis (redis-server + redis-benchmark: GET /
// SET, same value sizes and client counts, no pipelining) measured in the
// same run.
//   configuration tcp: transfers forced over TCP        vs Redis over TCP
//   configuration shm: the default same-host transport  vs Redis over a unix socket
// This process is one client (the reader/writer); a spawned mooncake_client
// is the owner; a spawned mooncake_master routes. After each case's timed
// runs, cost runs with counters on give CPU microseconds and system calls
// per operation over every process of each side (area store_cost).
#include "bench_options.hpp"
#include "bench_util.hpp"
#include "floor.hpp"
#include "op_cost.hpp"
#include "procs.hpp"
#include "mc/rpc/client.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/runtime/when_all.hpp"
#include "mc/store/client.hpp"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <fstream>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

struct settings {
  std::vector<std::size_t> sizes{4096, 1 << 20};
  std::vector<int> concurrency{1, 8};
  std::vector<std::string> configs{"tcp", "shm"};
  int runs = 3;
  double seconds = 0.4;
  std::string apps_dir;
  bool redis = true;
  std::vector<std::string> master_flags;  // appended to the mooncake_master command line
  /// --curves: gets at every size of `sizes` with curve_inflight in flight,
  /// and at every count of `concurrency` with 4 KiB values (two sweeps, not
  /// their cross product); each size loaded by one unreported put run first.
  bool curves = false;
  int curve_inflight = 8;
  /// Cost rows (area store_cost): CPU and system calls per operation over
  /// every process of each side (op_cost.hpp), after each case's timed runs.
  bool cost = true;
};

using mc::bench::proc::spawn;
using mc::bench::proc::stop;
using mc::bench::proc::wait_port;

std::string size_name(std::size_t n) {
  if (n >= (1 << 20) && n % (1 << 20) == 0) return std::to_string(n >> 20) + "MiB";
  if (n >= 1024 && n % 1024 == 0) return std::to_string(n >> 10) + "KiB";
  return std::to_string(n) + "B";
}

struct sample {
  double ops_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  long ops = 0;
};

/// What one operation cost the machine (op_cost.hpp): CPU microseconds and
/// system calls summed over every process taking part; syscalls < 0 when
/// they could not be counted.
struct op_cost {
  double cpu_us = 0;
  double syscalls = -1;
};

/// The i-th key of values of `size` bytes (drive() and the curves' load).
std::string bench_key(std::size_t size, int i) { return "bench/" + std::to_string(size) + "/" + std::to_string(i); }

// c workers issue back-to-back ops for `seconds`; keys rotate over `keys`.
sample drive(mc::runtime::runtime& rt, mc::store::client& c, bool get, std::size_t size, int conc, double seconds,
             int keys) {
  std::vector<std::vector<double>> lat(conc);
  std::vector<std::vector<std::byte>> bufs(conc, std::vector<std::byte>(size, std::byte{0x5a}));
  std::atomic<long> ops{0};
  auto deadline =
      clock_type::now() + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::future<void>> done;
  for (int w = 0; w < conc; ++w) {
    auto p = std::make_shared<std::promise<void>>();
    done.push_back(p->get_future());
    boost::asio::co_spawn(
        rt.executor(static_cast<std::size_t>(w) % rt.size()),
        [](mc::store::client& c, bool get, std::vector<std::byte>& buf, std::vector<double>& lat,
           std::atomic<long>& ops, clock_type::time_point deadline, int w, int keys) -> mc::task<void> {
          mc::store::put_options remote;
          remote.where = mc::store::placement::remote;
          for (int i = w; clock_type::now() < deadline; i += 7) {
            std::string key = bench_key(buf.size(), i % keys);
            auto t0 = clock_type::now();
            boost::system::error_code ec;
            if (get) {
              auto r = co_await c.get(key, buf);
              if (!r) ec = r.error();
            } else {
              // Workers share keys (as redis-benchmark's -r keyspace): a put
              // that committed while a concurrent put of the same key
              // published later answers SUPERSEDED. It did its work; only
              // its version lost (README "Consistency model").
              auto r = co_await c.put(key, buf, remote);
              if (!r && !mc::is(r.error(), mc::errc::superseded)) ec = r.error();
            }
            if (ec) throw std::runtime_error("operation failed on " + key + ": " + ec.message());
            lat.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
            ++ops;
          }
        }(c, get, bufs[w], lat[w], ops, deadline, w, keys),
        [p](std::exception_ptr e) {
          if (e)
            p->set_exception(e);
          else
            p->set_value();
        });
  }
  auto t0 = clock_type::now();
  for (auto& f : done) f.get();
  double secs = mc::bench::seconds_since(t0);
  std::vector<double> all;
  for (auto& l : lat) all.insert(all.end(), l.begin(), l.end());
  return {ops.load() / secs, mc::bench::percentile(all, 50), mc::bench::percentile(all, 99), ops.load()};
}

/// One drive() run with the cost counters on: this process (every thread
/// but the caller's, which only waits), the owner and the master.
op_cost ours_cost(mc::runtime::runtime& rt, mc::store::client& c, bool get, std::size_t size, int conc, double seconds,
                  int keys, pid_t owner, pid_t master, std::uint64_t tracepoint) {
  std::string why;
  std::optional<mc::bench::cost::syscall_counters> sys;
  if (tracepoint != 0) {
    sys.emplace(tracepoint);
    const auto self_tid = static_cast<pid_t>(::syscall(SYS_gettid));
    if (!sys->add_process(::getpid(), &why, self_tid) || !sys->add_process(owner, &why) ||
        !sys->add_process(master, &why))
      sys.reset();
  }
  const pid_t procs[] = {::getpid(), owner, master};
  double cpu0 = 0, cpu1 = 0;
  for (auto p : procs) cpu0 += mc::bench::cost::cpu_seconds(p);
  const auto s0 = sys ? sys->read() : 0;
  auto x = drive(rt, c, get, size, conc, seconds, keys);
  const auto s1 = sys ? sys->read() : 0;
  for (auto p : procs) cpu1 += mc::bench::cost::cpu_seconds(p);
  op_cost out;
  if (x.ops > 0) {
    out.cpu_us = (cpu1 - cpu0) * 1e6 / static_cast<double>(x.ops);
    if (sys) out.syscalls = static_cast<double>(s1 - s0) / static_cast<double>(x.ops);
  }
  return out;
}

// redis-benchmark --csv: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
// `keys`: the keyspace (-r), the same number of keys ours rotates over.
// With `cost`: the run's CPU and system calls of redis-server (`server`) and
// redis-benchmark per request go there.
sample redis(const std::vector<std::string>& target, bool get, std::size_t size, int conc, double seconds, int keys,
             op_cost* cost = nullptr, pid_t server = -1, std::uint64_t tracepoint = 0) {
  long n = std::max<long>(200, static_cast<long>(seconds * (size >= (1 << 20) ? 2000 : 30000)));
  if (size >= (16u << 20)) n = std::max<long>(conc, 4);  // ~1-7 GETs/s at 16-64 MiB on this VM
  std::vector<std::string> args{"redis-benchmark"};
  args.insert(args.end(), target.begin(), target.end());
  const std::vector<std::string> rest{"-t", get ? "get" : "set",  "-d",   std::to_string(size),
                                      "-c", std::to_string(conc), "-n",   std::to_string(n),
                                      "-r", std::to_string(keys), "--csv"};
  args.insert(args.end(), rest.begin(), rest.end());
  std::string why, text;
  std::optional<mc::bench::cost::syscall_counters> sys;
  if (cost && tracepoint != 0) {
    sys.emplace(tracepoint);
    if (!sys->add_process(server, &why)) sys.reset();
  }
  const double server0 = cost ? mc::bench::cost::cpu_seconds(server) : 0;
  const auto s0 = sys ? sys->read() : 0;
  const double client_cpu = mc::bench::cost::run_counted(args, text, sys ? &*sys : nullptr, &why);
  const auto s1 = sys ? sys->read() : 0;
  const double server1 = cost ? mc::bench::cost::cpu_seconds(server) : 0;
  sample s;
  if (client_cpu < 0) return s;
  std::istringstream lines(text);
  for (std::string l; std::getline(lines, l);) {
    if (l.rfind("\"GET\"", 0) != 0 && l.rfind("\"SET\"", 0) != 0) continue;
    std::vector<double> v;
    std::stringstream ss(l);
    for (std::string x; std::getline(ss, x, ',');) {
      if (x.size() >= 2 && x.front() == '"') x = x.substr(1, x.size() - 2);
      try {
        v.push_back(std::stod(x));
      } catch (...) {
        v.push_back(0);
      }
    }
    if (v.size() >= 7) s = {v[1], v[4] * 1000, v[6] * 1000, n};
  }
  if (cost && s.ops_per_s > 0) {
    cost->cpu_us = (client_cpu + server1 - server0) * 1e6 / static_cast<double>(n);
    cost->syscalls = sys ? static_cast<double>(s1 - s0) / static_cast<double>(n) : -1;
  }
  return s;
}

/// Rows tcp_floor_get_4KiB_c<conc>: the runtime floor (floor.hpp) against
/// Redis GET of 4 KiB values, interleaved run by run.
void measure_floor(mc::runtime::runtime& rt, const std::vector<std::string>& redis_args, int conc, int port,
                   const std::filesystem::path& tmp, const settings& s) {
  auto self = std::filesystem::read_symlink("/proc/self/exe").string();
  pid_t child = spawn({self, "--floor-server", std::to_string(port), "4096", "2"}, (tmp / "floor.log").string());
  if (child < 0 || !wait_port(port, 10)) {
    stop(child);
    throw std::runtime_error("the floor server did not start (see " + (tmp / "floor.log").string() + ")");
  }
  std::vector<double> ops, p50, p99, base_ops, base_p50, base_p99;
  for (int r = 0; r < s.runs; ++r) {
    auto f = store_floor::drive(rt, static_cast<std::uint16_t>(port), 4096, conc, s.seconds);
    ops.push_back(f.ops_per_s);
    p50.push_back(mc::bench::percentile(f.us, 50));
    p99.push_back(mc::bench::percentile(f.us, 99));
    auto b = redis(redis_args, true, 4096, conc, s.seconds, 64);
    base_ops.push_back(b.ops_per_s);
    base_p50.push_back(b.p50_us);
    base_p99.push_back(b.p99_us);
  }
  stop(child);
  const std::string name = "tcp_floor_get_4KiB_c" + std::to_string(conc);
  mc::bench::report({"store", name, "throughput", "ops/s", ops, "redis_tcp", base_ops});
  mc::bench::report({"store", name, "p50", "us", p50, "redis_tcp", base_p50});
  mc::bench::report({"store", name, "p99", "us", p99, "redis_tcp", base_p99});
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  if (argc == 5 && std::string(argv[1]) == "--floor-server")  // the child of the tcp_floor_get rows
    store_floor::server_main(static_cast<std::uint16_t>(std::stoul(argv[2])), std::stoul(argv[3]), std::stoul(argv[4]));
  settings s;
  s.apps_dir = (std::filesystem::path(argv[0]).parent_path() / ".." / ".." / "apps").string();
  std::vector<std::uint64_t> concurrency{1, 8};
  std::uint64_t runs = 3;
  bool full = false, no_redis = false, curves = false, no_cost = false;
  std::uint64_t curve_inflight = 8;
  std::chrono::milliseconds lease = mc::store::client_options{}.write_route_lease;
  mc::config::option_set set("store_bench",
                             "Remote get/put of this process (a client) against a mooncake_client owner process,\n"
                             "baseline redis-server/redis-benchmark in the same run. Default: 4KiB and 1MiB,\n"
                             "1 and 8 in flight, tcp and shm, 3 runs of 0.4 s (< 1 min). --full: 4KiB, 64KiB,\n"
                             "1MiB, 4MiB x 1, 8, 32 in flight, 1 s per run (options given explicitly win).\n"
                             "--curves: gets only, two sweeps instead of a cross product: every size at\n"
                             "--curve-inflight in flight (default sizes 512B..64MiB) and 4KiB at every\n"
                             "concurrency (default 1..256); 1 s per run.");
  set.add("full", &full, "the full matrix (see above)")
      .add("curves", &curves, "the curves (see above)")
      .add("curve-inflight", &curve_inflight, "--curves: operations in flight of the size sweep", 1, 1024)
      .add_size_list("sizes", &s.sizes, "value sizes (comma list, units allowed)")
      .add_list("concurrency", &concurrency, "operations in flight (comma list)", 1, 1024)
      .add_list("configs", &s.configs, "tcp and/or shm")
      .add("runs", &runs, "repetitions per case", 1, 1000)
      .add("seconds", &s.seconds, "duration of one run", 0, 3600)
      .add("apps", &s.apps_dir, "directory of mooncake_master and mooncake_client")
      .add("no-redis", &no_redis, "skip the Redis baseline")
      .add("no-cost", &no_cost,
           "skip the cost rows (CPU microseconds and system calls per operation over every process of each side, "
           "measured in separate runs of min(seconds, 0.3 s) after each case)")
      .add("write-route-lease", &lease, "the bench client's --write_route_lease (0 = a master write route per put)")
      .add_list("master-flags", &s.master_flags,
                "extra flags for mooncake_master, comma-separated (e.g. --publish_calls=false: publishes over the "
                "RPC)");
  mc::bench::parse_options(set, argc, argv);
  if (full) {
    if (!set.was_set("sizes")) s.sizes = {4096, 65536, 1 << 20, 4 << 20};
    if (!set.was_set("concurrency")) concurrency = {1, 8, 32};
    if (!set.was_set("seconds")) s.seconds = 1.0;
  }
  if (curves) {
    if (full) mc::bench::option_error("store_bench", "--curves and --full exclude each other");
    if (!set.was_set("sizes")) s.sizes = {512, 4096, 65536, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
    if (!set.was_set("concurrency")) concurrency = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    if (!set.was_set("seconds")) s.seconds = 1.0;
    s.curves = true;
    s.curve_inflight = static_cast<int>(curve_inflight);
  }
  mc::bench::check_choices("store_bench", "configs", s.configs, {"tcp", "shm"});
  for (auto size : s.sizes)
    if (size == 0 || size > (1u << 30)) mc::bench::option_error("store_bench", "--sizes items must be in 1..1GiB");
  s.concurrency.assign(concurrency.begin(), concurrency.end());
  s.runs = static_cast<int>(runs);
  s.redis = !no_redis;
  s.cost = !no_cost;
  std::string cost_why;
  const std::uint64_t tracepoint = s.cost ? mc::bench::cost::syscall_tracepoint(&cost_why) : 0;
  if (s.cost && tracepoint == 0)
    std::printf("# store_bench: system calls per operation not counted: %s (CPU per operation still is)\n",
                cost_why.c_str());
  auto tmp = std::filesystem::temp_directory_path() / ("store_bench." + std::to_string(getpid()));
  std::filesystem::create_directories(tmp);
  const int off = mc::bench::proc::pid_port_offset();
  const int master_port = 24151 + off, owner_rpc = 24152 + off, owner_te = 24153 + off, redis_port = 24154 + off,
            floor_port = 24155 + off;
  std::string sock = (tmp / "redis.sock").string();
  pid_t redis_pid = -1;
  if (s.redis) {
    redis_pid = spawn({"/usr/bin/redis-server", "--port", std::to_string(redis_port), "--unixsocket", sock, "--save",
                       "", "--appendonly", "no", "--bind", "127.0.0.1"},
                      (tmp / "redis.log").string());
    if (redis_pid < 0 || !wait_port(redis_port, 10)) {
      std::fprintf(stderr, "store_bench: cannot start redis-server (apt-get install redis-server); use --no-redis\n");
      stop(redis_pid);
      return 1;
    }
  }
  std::printf("%-34s %-12s %12s %-7s  %-14s %12s\n", "case", "metric", "ours", "unit", "baseline", "value");
  int rc = 0;
  for (auto& config : s.configs) {
    std::string transport = config == "tcp" ? "tcp" : "auto";
    std::vector<std::string> master_cmd{s.apps_dir + "/mooncake_master", "--rpc_port", std::to_string(master_port),
                                        "--rpc_address", "127.0.0.1"};
    master_cmd.insert(master_cmd.end(), s.master_flags.begin(), s.master_flags.end());
    pid_t master = spawn(master_cmd, (tmp / "master.log").string());
    wait_port(master_port, 10);
    pid_t owner =
        spawn({s.apps_dir + "/mooncake_client", "--master_server_address", "127.0.0.1:" + std::to_string(master_port),
               "--host", "127.0.0.1", "--port", std::to_string(owner_te), "--client_rpc_port",
               std::to_string(owner_rpc), "--transfer_transport", transport, "--client_id", "owner",
               "--tiered_backend_config", R"({"tiers":[{"type":"DRAM","capacity":"2GiB","priority":100}]})"},
              (tmp / "owner.log").string());
    if (!wait_port(owner_rpc, 20)) {
      std::fprintf(stderr, "store_bench: the owner client did not start (see %s)\n", (tmp / "owner.log").c_str());
      stop(owner);
      stop(master);
      rc = 1;
      break;
    }
    mc::runtime::runtime rt(2);
    rt.start();
    {
      mc::store::client_options o;
      o.client_id = "bench";
      o.master_server_address = "127.0.0.1:" + std::to_string(master_port);
      o.host = "127.0.0.1";
      o.port = 0;
      o.client_rpc_port = 0;
      o.transfer_transport = transport;
      o.tiered_backend_config = R"({"tiers":[{"type":"DRAM","capacity":"64MiB","priority":100}]})";
      mc::config::option_set none("b", "b");
      o.write_route_lease = lease;
      mc::store::resolve(o, none);
      std::string why;
      auto c = mc::store::client::start(rt, o, &why);
      if (!c) {
        std::fprintf(stderr, "store_bench: %s\n", why.c_str());
        rc = 1;
      } else {
        auto keys_of = [](std::size_t size) { return size >= (1 << 20) ? 16 : 64; };
        const std::vector<std::string> redis_args =
            config == "tcp" ? std::vector<std::string>{"-h", "127.0.0.1", "-p", std::to_string(redis_port)}
                            : std::vector<std::string>{"-s", sock};
        std::string redis_target;  // the same arguments for redis-cli's shell command line (load)
        for (auto& a : redis_args) redis_target += (redis_target.empty() ? "" : " ") + a;
        auto measure = [&](const std::string& op, std::size_t size, int conc) {
          const int keys = keys_of(size);
          std::vector<double> ours_ops, ours_p50, ours_p99, base_ops, base_p50, base_p99;
          for (int r = 0; r < s.runs; ++r) {
            auto x = drive(rt, **c, op == "get", size, conc, s.seconds, keys);
            ours_ops.push_back(x.ops_per_s);
            ours_p50.push_back(x.p50_us);
            ours_p99.push_back(x.p99_us);
            if (s.redis) {
              auto b = redis(redis_args, op == "get", size, conc, s.seconds, keys);
              base_ops.push_back(b.ops_per_s);
              base_p50.push_back(b.p50_us);
              base_p99.push_back(b.p99_us);
            }
          }
          std::string name = config + "_" + op + "_" + size_name(size) + "_c" + std::to_string(conc);
          const std::string area = s.curves ? "store_curves" : "store";
          std::string base = s.redis ? (config == "tcp" ? "redis_tcp" : "redis_unix") : "";
          mc::bench::report({area, name, "throughput", "ops/s", ours_ops, base, base_ops});
          mc::bench::report({area, name, "p50", "us", ours_p50, base, base_p50});
          mc::bench::report({area, name, "p99", "us", ours_p99, base, base_p99});
          if (s.curves || !s.cost) return;
          // Cost rows: separate runs with the counters on (they slow every
          // system call a little, so the timed runs above go without).
          std::vector<double> ours_cpu, ours_sys, base_cpu, base_sys;
          const double cost_seconds = std::min(s.seconds, 0.3);
          for (int r = 0; r < s.runs; ++r) {
            auto x = ours_cost(rt, **c, op == "get", size, conc, cost_seconds, keys, owner, master, tracepoint);
            ours_cpu.push_back(x.cpu_us);
            if (x.syscalls >= 0) ours_sys.push_back(x.syscalls);
            if (s.redis) {
              op_cost b;
              (void)redis(redis_args, op == "get", size, conc, cost_seconds, keys, &b, redis_pid, tracepoint);
              base_cpu.push_back(b.cpu_us);
              if (b.syscalls >= 0) base_sys.push_back(b.syscalls);
            }
          }
          if (base_sys.size() != base_cpu.size()) base_sys.clear();
          mc::bench::report({"store_cost", name, "cpu_per_op", "us", ours_cpu, base, base_cpu});
          if (!ours_sys.empty())
            mc::bench::report(
                {"store_cost", name, "syscalls_per_op", "calls", ours_sys, base_sys.empty() ? "" : base, base_sys});
        };
        // Writes every key of a size once (ours and Redis), unreported.
        auto load = [&](std::size_t size) {
          const int keys = keys_of(size);
          std::vector<std::byte> buf(size, std::byte{0x5a});
          mc::store::put_options remote;
          remote.where = mc::store::placement::remote;
          for (int i = 0; i < keys; ++i) {
            auto key = bench_key(size, i);
            auto ok = rt.block_on([](mc::store::client& cl, std::string k, std::span<const std::byte> v,
                                     mc::store::put_options o) -> mc::task<bool> {
              co_return (co_await cl.put(std::move(k), v, std::move(o))).has_value();
            }(**c, key, buf, remote));
            if (!ok) throw std::runtime_error("load: put failed on " + key);
          }
          if (s.redis) {
            // Redis: every key redis-benchmark's -r draws from ("key:%012d")
            // holds a value of this size before the GETs (a GET of a missing
            // key is cheaper and would flatter Redis).
            auto file = (tmp / "value").string();
            {
              std::ofstream out(file, std::ios::binary | std::ios::trunc);
              std::vector<char> z(size, 'x');
              out.write(z.data(), static_cast<std::streamsize>(z.size()));
            }
            for (int i = 0; i < keys; ++i) {
              char key[32];
              std::snprintf(key, sizeof key, "key:%012d", i);
              auto cmd = "redis-cli " + redis_target + " -x SET " + key + " < " + file + " >/dev/null 2>&1";
              if (std::system(cmd.c_str()) != 0) throw std::runtime_error("load: redis-cli SET failed");
            }
          }
        };
        if (s.curves) {
          // Small values first: a redis-server that has held and freed big
          // values answers small requests far slower (which would flatter
          // ours). One unreported run warms both up (connections, caches).
          const bool sizes_have_4k = std::find(s.sizes.begin(), s.sizes.end(), std::size_t{4096}) != s.sizes.end();
          load(4096);
          (void)drive(rt, **c, true, 4096, s.curve_inflight, std::min(s.seconds, 0.3), keys_of(4096));
          if (s.redis) (void)redis(redis_args, true, 4096, s.curve_inflight, 0.3, keys_of(4096));
          for (auto conc : s.concurrency)
            if (conc != s.curve_inflight || !sizes_have_4k) measure("get", 4096, conc);
          auto sizes = s.sizes;
          std::sort(sizes.begin(), sizes.end());
          for (auto size : sizes) {
            if (size != 4096) load(size);
            measure("get", size, s.curve_inflight);
          }
        } else {
          for (auto size : s.sizes) {
            for (auto conc : s.concurrency)  // the put runs load the owner (the spec's remote write flow)
              for (std::string op : {"put", "get"}) measure(op, size, conc);
            // Right after the 4 KiB cases: a redis-server that has held big
            // values answers small requests far slower (which would flatter
            // the floor; it did in report 2026-12-05-bf2caad).
            if (size == 4096 && config == "tcp" && s.redis)
              for (auto conc : s.concurrency) measure_floor(rt, redis_args, conc, floor_port, tmp, s);
          }
        }
        (*c)->stop();
        c->reset();
      }
    }
    mc::rpc::shutdown(rt);
    rt.stop();
    stop(owner);
    stop(master);
  }
  stop(redis_pid);
  std::filesystem::remove_all(tmp);
  return rc;
}
