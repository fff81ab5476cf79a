// inference_bench: the three inference-engine connector shapes (SGLang
// HiCache, vLLM, LMCache) and small values, between this process (a client,
// the reader/writer) and a spawned mooncake_client owner (through a spawned
// mooncake_master), each case with its baselines measured in the same run:
//   configuration tcp: transfers forced over TCP   vs a raw TCP pump and Redis over TCP
//   configuration shm: the default same-host path  vs memcpy and Redis over a unix socket
// Every put is a remote put to the owner (placement::remote): the values live
// in the other process, so every get is remote. bench/README.md says what each
// case and baseline is and why it is fair.
#include "baselines.hpp"
#include "bench_util.hpp"
#include "procs.hpp"  // bench/common
#include "settings.hpp"
#include "workload.hpp"

#include "mc/rpc/client.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/store/client.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace {

using mc::bench::inference::settings;
using clock_type = std::chrono::steady_clock;
namespace base = mc::bench::base;
namespace work = mc::bench::work;

/// Whether mc::store::client has the scatter-gather API (issue 14).
template <class C>
concept has_parts = requires(C& c, std::vector<std::string> k, std::vector<std::vector<std::span<std::byte>>> p) {
  c.batch_get_parts(k, p);
};
constexpr bool parts_api = has_parts<mc::store::client>;
/// client::allocate_buffer (shared-memory registered buffers) exists in this build.
template <class C>
concept has_allocate_buffer = requires(C& c) {
  c.allocate_buffer(std::size_t{1});
};
constexpr bool shared_api = has_allocate_buffer<mc::store::client>;

/// Calls op() back to back for at least `seconds` (and at least twice);
/// returns calls per second.
double rate(double seconds, const std::function<void()>& op) {
  auto t0 = clock_type::now();
  long n = 0;
  do {
    op();
    ++n;
  } while (n < 2 || mc::bench::seconds_since(t0) < seconds);
  return static_cast<double>(n) / mc::bench::seconds_since(t0);
}

/// Stops the program with exit status 1 (from any thread: _Exit runs no
/// destructors under running runtime threads; the children get SIGTERM from
/// PR_SET_PDEATHSIG).
/// rate() of ours, looping inside the runtime (a coroutine on runtime thread
/// 0), so that no per-operation hand-off from this thread is timed: `op()`
/// returns the task of one operation.
template <class F>
double ours_rate(mc::runtime::runtime& rt, double seconds, F op) {
  return rt.block_on([](double seconds, F op) -> mc::task<double> {
    auto t0 = clock_type::now();
    long n = 0;
    do {
      co_await op();
      ++n;
    } while (n < 2 || mc::bench::seconds_since(t0) < seconds);
    co_return static_cast<double>(n) / mc::bench::seconds_since(t0);
  }(seconds, op));
}

[[noreturn]] void fail(const std::string& why) {
  std::fflush(stdout);
  std::fprintf(stderr, "inference_bench: FAILED: %s\n", why.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

template <class T>
void check_all(const std::vector<mc::result<T>>& rs, const std::vector<std::string>& keys, const char* what) {
  for (std::size_t i = 0; i < rs.size(); ++i)
    if (!rs[i]) fail(std::string(what) + " " + keys[i] + ": " + rs[i].error().message());
}

/// Everything one configuration's cases use.
struct env {
  mc::runtime::runtime& rt;
  mc::store::client& c;
  std::string config;        // "tcp" or "shm"
  std::string owner_target;  // the owner's RPC endpoint (remote puts)
  std::uint16_t pump_port;
  int redis_port;
  std::string redis_sock;
  const settings& s;

  mc::store::put_options remote() const {
    mc::store::put_options o;
    o.where = mc::store::placement::remote;
    o.target = owner_target;
    return o;
  }
  bool tcp() const { return config == "tcp"; }
  std::string redis_name() const { return tcp() ? "redis_tcp" : "redis_unix"; }
  std::unique_ptr<base::redis> redis_conn() const {
    return std::make_unique<base::redis>("127.0.0.1", redis_port, tcp() ? "" : redis_sock);
  }
};

// ------------------------------------------------------------------ ours

// Templates on the client type: the scatter-gather branch is discarded (not
// compiled) when the client lacks the API.
template <class C>
mc::task<void> ours_put(C& c, env& e, work::data& d, bool one_at_a_time) {
  auto& keys = d.keys();
  if (one_at_a_time) {
    for (std::size_t k = 0; k < keys.size(); ++k) {
      auto& p = d.src_pieces()[k][0];
      auto r = co_await c.put(keys[k], std::span<const std::byte>(p.data(), p.size()), e.remote());
      if (!r) fail("put " + keys[k] + ": " + r.error().message());
    }
    co_return;
  }
  if constexpr (has_parts<C>) {
    if (d.dims().pieces > 1) {
      std::vector<std::vector<std::span<const std::byte>>> vs;
      for (auto& ps : d.src_pieces()) vs.emplace_back(ps.begin(), ps.end());
      check_all(co_await c.batch_put_parts(keys, std::move(vs), e.remote()), keys, "batch_put_parts");
      co_return;
    }
  }
  std::vector<std::span<const std::byte>> vs;
  for (auto& ps : d.src_pieces()) vs.emplace_back(ps[0].data(), ps[0].size());
  check_all(co_await c.batch_put(keys, std::move(vs), e.remote()), keys, "batch_put");
}

template <class C>
mc::task<void> ours_get(C& c, work::data& d) {
  auto& keys = d.keys();
  std::vector<mc::result<std::size_t>> rs;
  if constexpr (has_parts<C>) {
    if (d.dims().pieces > 1) rs = co_await c.batch_get_parts(keys, d.dst_pieces());
  }
  if (rs.empty()) {
    std::vector<std::span<std::byte>> bufs;
    for (auto& ps : d.dst_pieces()) bufs.push_back(ps[0]);
    rs = co_await c.batch_get(keys, std::move(bufs));
  }
  check_all(rs, keys, d.dims().pieces > 1 ? "batch_get_parts" : "batch_get");
  for (std::size_t k = 0; k < rs.size(); ++k)
    if (*rs[k] != d.dims().value) fail("batch_get " + keys[k] + ": wrong size");
}

/// The TCP connections that carry our bulk bytes, 1..16: the stream count
/// the pump and Redis get. In configuration tcp the owner moves every value
/// (it WRITEs our gets into us and READs our puts from us), so they are our
/// engine's inbound connections; its outbound ones are the small reads'
/// calls to the owner (lib/transfer "Calls"), idle during big batches
/// (counted too, they made the baselines 12 streams instead of 4 in report
/// 2026-12-05-bf2caad).
std::size_t our_streams(env& e) {
  auto st = e.c.engine().stats();
  return std::clamp<std::size_t>(st.inbound_connections, 1, 16);
}

/// Bytes our engine moved over TCP so far, initiated or served (in
/// configuration tcp both engines are forced to TCP, so served bytes are TCP).
std::uint64_t tcp_bytes(env& e) {
  auto st = e.c.engine().stats();
  auto& t = st.initiated[static_cast<std::size_t>(mc::transfer::transport_kind::tcp)];
  return t.read_bytes + t.write_bytes + st.served_read_bytes + st.served_write_bytes;
}

// ------------------------------------------------------------------ big batches

struct big_case {
  std::string name;  // sglang, vllm, lmcache
  work::shape shape;
  bool put_one_at_a_time = false;
};

/// Puts then gets through ours and through Redis once, checking every key's
/// bytes; fails loudly on a mismatch.
void warm_up_and_verify(env& e, work::data& d, bool one_at_a_time, std::vector<base::redis*>& conns) {
  e.rt.block_on(ours_put(e.c, e, d, one_at_a_time));
  d.clear_dst();
  auto before = e.c.stats();
  auto tcp_before = tcp_bytes(e);
  e.rt.block_on(ours_get(e.c, d));
  if (long k = d.first_mismatch(); k >= 0) fail("ours: wrong bytes for " + d.keys()[static_cast<std::size_t>(k)]);
  // The gets must have been remote (the value lives in the owner process),
  // and in configuration tcp the bytes of values above the inline threshold
  // (smaller ones come back inside the RPC reply) must have crossed our TCP
  // transport.
  auto after = e.c.stats();
  if (after.local_hits != before.local_hits || after.remote_hits - before.remote_hits < d.keys().size())
    fail("ours: the gets of " + d.keys()[0] + "... were not all remote");
  if (e.tcp() && d.dims().value > e.c.options().inline_threshold && tcp_bytes(e) - tcp_before < d.dims().bytes())
    fail("ours: the gets of " + d.keys()[0] + "... did not move their bytes over TCP");
  base::redis_batch(conns, true, d.keys(), d.src_pieces());
  d.clear_dst();
  base::redis_batch(conns, false, d.keys(), d.dst_pieces());
  if (long k = d.first_mismatch(); k >= 0) fail("redis: wrong bytes for " + d.keys()[static_cast<std::size_t>(k)]);
}

/// `shared`: the caller's buffers come from client::allocate_buffer (shared
/// memory: same-host peers map them and copy with memcpy) instead of being
/// the caller's own huge-page memory passed to register_buffer; cases named
/// *_shared.
template <class C>
void run_big(env& e, C& c, const big_case& bc, bool shared) {
  std::optional<work::data> held;
  mc::result<mc::transfer::region> r1 = mc::fail(mc::errc::invalid_params), r2 = mc::fail(mc::errc::invalid_params);
  if constexpr (has_allocate_buffer<C>) {
    if (shared) {
      r1 = c.allocate_buffer(bc.shape.bytes());
      r2 = c.allocate_buffer(bc.shape.bytes());
      if (!r1 || !r2) fail("allocate_buffer: " + (r1 ? r2.error() : r1.error()).message());
      held.emplace(e.config + "/" + bc.name, bc.shape, std::span(r1->data(), r1->size()),
                   std::span(r2->data(), r2->size()));
    }
  }
  if (!held) {
    held.emplace(e.config + "/" + bc.name, bc.shape, !e.s.small_pages);
    r1 = c.register_buffer(held->src());
    r2 = c.register_buffer(held->dst());
    if (!r1 || !r2) fail("register_buffer: " + (r1 ? r2.error() : r1.error()).message());
  }
  work::data& d = *held;
  e.rt.block_on(ours_put(e.c, e, d, bc.put_one_at_a_time));  // opens the connections
  // Streams the baselines get: tcp: our engine's TCP connections; shm: our
  // runtime's threads (the same-host copies run on them; memcpy gets as many).
  std::size_t streams = e.tcp() ? our_streams(e) : e.rt.size();
  std::vector<std::unique_ptr<base::redis>> owned;
  std::vector<base::redis*> conns;
  for (std::size_t i = 0; i < streams; ++i) conns.push_back(owned.emplace_back(e.redis_conn()).get());
  warm_up_and_verify(e, d, bc.put_one_at_a_time, conns);
  std::unique_ptr<base::pump> pump;
  if (e.tcp()) pump = std::make_unique<base::pump>(e.pump_port, streams);
  const double mib = static_cast<double>(bc.shape.bytes()) / (1 << 20);
  const bool contig = bc.name.starts_with("vllm") && !parts_api;
  if (!e.s.ours_only.empty()) {  // --ours-only: ours alone, no rows
    const bool put = e.s.ours_only == "put";
    const std::string name = e.config + "_" + bc.name + "_" + e.s.ours_only + (shared ? "_shared" : "");
    for (int r = 0; r < e.s.runs; ++r)
      std::printf("%-34s run %d: %.1f MiB/s\n", name.c_str(), r + 1,
                  mib * ours_rate(e.rt, e.s.seconds,
                                  [&] { return put ? ours_put(e.c, e, d, bc.put_one_at_a_time) : ours_get(e.c, d); }));
    std::fflush(stdout);
    return;
  }
  for (bool put : {true, false}) {
    std::vector<double> ours, floor, red, ceiling;
    auto src = work::data::flat(d.src_pieces()), dst = work::data::flat(d.dst_pieces());
    for (int r = 0; r < e.s.runs; ++r) {
      ours.push_back(mib * ours_rate(e.rt, e.s.seconds, [&] {
                       return put ? ours_put(e.c, e, d, bc.put_one_at_a_time) : ours_get(e.c, d);
                     }));
      floor.push_back(mib * rate(e.s.seconds, [&] {
                        if (pump && put && bc.put_one_at_a_time) {  // one value per exchange, like ours
                          for (auto& ps : d.src_pieces()) pump->batch(true, ps[0]);
                        } else if (pump) {
                          pump->batch(put, put ? d.src() : d.dst());
                        } else {
                          base::copy_batch(dst, src, e.rt.size());
                        }
                      }));
      if (!e.tcp() && !shared) {
        // Same-host: the kernel's cross-process copy of the same pieces (what
        // any process_vm_* transport can reach) out of a child process's own
        // buffer (huge pages unless --small-pages, like ours), the child
        // alive only for this measurement.
        base::cma_peer cma(d.src().size(), d.dst(), !e.s.small_pages);
        ceiling.push_back(mib * rate(e.s.seconds, [&] { cma.copy_batch(dst, src, d.src().data(), e.rt.size()); }));
      }
      red.push_back(mib * rate(e.s.seconds, [&] {
                      if (put && bc.put_one_at_a_time) {
                        for (std::size_t k = 0; k < d.keys().size(); ++k)
                          conns[0]->set(std::span(d.keys()).subspan(k, 1), std::span(d.src_pieces()).subspan(k, 1));
                      } else {
                        base::redis_batch(conns, put, d.keys(), put ? d.src_pieces() : d.dst_pieces());
                      }
                    }));
    }
    std::string name = e.config + "_" + bc.name + (put ? "_put" : "_get") + (contig ? "_contig" : "") +
                       (shared            ? "_shared"
                        : e.s.small_pages ? "_4kpages"
                                          : "");
    std::string floor_name = e.tcp() ? "raw_tcp_x" + std::to_string(streams) : "memcpy_t" + std::to_string(e.rt.size());
    const mc::bench::row vs_floor{"inference", name, "throughput", "MiB/s", ours, floor_name, floor};
    const mc::bench::row vs_redis{
        "inference", name, "throughput", "MiB/s", ours, e.redis_name() + "_x" + std::to_string(conns.size()), red};
    if (e.s.small_pages && !shared) {  // a comparison of page sizes, not a row the targets are judged by
      mc::bench::report(vs_floor);
      mc::bench::report(vs_redis);
    } else {
      mc::bench::report_target(vs_floor, {e.tcp() ? 0.8 : 0.5, false});
      mc::bench::report_target(vs_redis, {e.tcp() ? 1.5 : 4.0, false});
    }
    if (!e.tcp() && !shared)  // no target: where the kernel's process_vm_* copy of these pieces stands
      mc::bench::report(
          {"inference", name, "throughput", "MiB/s", ours, "process_vm_t" + std::to_string(e.rt.size()), ceiling});
  }
  if (contig)
    std::printf(
        "# %s_vllm_*_contig: mc::store::client has no batch_put_parts/batch_get_parts in this build; "
        "measured with batch_put/batch_get on one contiguous 2 MiB buffer per key (no gather/scatter)\n",
        e.config.c_str());
}

// ------------------------------------------------------------------ small values

void run_small_batches(env& e) {
  work::data d(e.config + "/small", {32, 4096, 1}, !e.s.small_pages);
  auto r1 = e.c.register_buffer(d.src());
  auto r2 = e.c.register_buffer(d.dst());
  if (!r1 || !r2) fail("register_buffer failed");
  auto conn = e.redis_conn();
  std::vector<base::redis*> conns{conn.get()};
  warm_up_and_verify(e, d, false, conns);
  for (bool put : {false, true}) {
    std::vector<double> ours, red;
    for (int r = 0; r < e.s.runs; ++r) {
      ours.push_back(32 *
                     ours_rate(e.rt, e.s.seconds, [&] { return put ? ours_put(e.c, e, d, false) : ours_get(e.c, d); }));
      red.push_back(32 * rate(e.s.seconds,
                              [&] { base::redis_batch(conns, put, d.keys(), put ? d.src_pieces() : d.dst_pieces()); }));
    }
    std::string name = e.config + (put ? "_small_batch_put" : "_small_batch_get") + "_4KiB_b32";
    mc::bench::report_target({"inference", name, "throughput", "keys/s", ours, e.redis_name(), red}, {1.0, false});
  }
}

struct latencies {
  double ops_per_s = 0;
  std::vector<double> us;
};

/// `conc` coroutines (spread over the runtime's threads) each issuing single
/// 4 KiB gets back to back for `seconds`, keys rotating over `keys`.
latencies ours_single_gets(env& e, const std::vector<std::string>& keys, int conc) {
  std::vector<std::vector<double>> lat(static_cast<std::size_t>(conc));
  std::vector<std::vector<std::byte>> bufs(static_cast<std::size_t>(conc), std::vector<std::byte>(4096));
  std::atomic<long> ops{0}, errors{0};
  auto deadline =
      clock_type::now() + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(e.s.seconds));
  std::vector<std::future<void>> done;
  auto t0 = clock_type::now();
  for (std::size_t w = 0; w < static_cast<std::size_t>(conc); ++w) {
    auto p = std::make_shared<std::promise<void>>();
    done.push_back(p->get_future());
    boost::asio::co_spawn(
        e.rt.executor(w % e.rt.size()),
        [](mc::store::client& c, const std::vector<std::string>& keys, std::span<std::byte> buf,
           std::vector<double>& lat, std::atomic<long>& ops, std::atomic<long>& errors, clock_type::time_point until,
           std::size_t w) -> mc::task<void> {
          for (std::size_t i = w; clock_type::now() < until; i += 7) {
            auto t = clock_type::now();
            auto r = co_await c.get(keys[i % keys.size()], buf);
            if (!r || *r != buf.size()) ++errors;
            lat.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t).count());
            ++ops;
          }
        }(e.c, keys, bufs[w], lat[w], ops, errors, deadline, w),
        [p](std::exception_ptr x) { x ? p->set_exception(x) : p->set_value(); });
  }
  for (auto& f : done) f.get();
  if (errors.load() != 0) fail("single gets: " + std::to_string(errors.load()) + " failed");
  latencies out{static_cast<double>(ops.load()) / mc::bench::seconds_since(t0), {}};
  for (auto& l : lat) out.us.insert(out.us.end(), l.begin(), l.end());
  return out;
}

/// The same with `conc` threads, one Redis connection each, one GET at a time.
latencies redis_single_gets(env& e, const std::vector<std::string>& keys, int conc, bool over_tcp) {
  std::vector<std::vector<double>> lat(static_cast<std::size_t>(conc));
  std::vector<std::thread> ts;
  std::vector<std::string> errors(static_cast<std::size_t>(conc));
  auto until = clock_type::now() + std::chrono::duration<double>(e.s.seconds);
  auto t0 = clock_type::now();
  for (std::size_t w = 0; w < static_cast<std::size_t>(conc); ++w)
    ts.emplace_back([&, w] {
      try {
        base::redis conn("127.0.0.1", e.redis_port, over_tcp ? "" : e.redis_sock);
        std::vector<std::byte> buf(4096);
        std::vector<base::pieces> dst{{std::span<std::byte>(buf)}};
        for (std::size_t i = w; clock_type::now() < until; i += 7) {
          auto t = clock_type::now();
          conn.get(std::span(keys).subspan(i % keys.size(), 1), dst);
          lat[w].push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t).count());
        }
      } catch (const std::exception& x) {
        errors[w] = x.what();
      }
    });
  for (auto& t : ts) t.join();
  for (auto& x : errors)
    if (!x.empty()) fail(x);
  latencies out;
  for (auto& l : lat) out.us.insert(out.us.end(), l.begin(), l.end());
  out.ops_per_s = static_cast<double>(out.us.size()) / mc::bench::seconds_since(t0);
  return out;
}

/// One single get() of every key, checked against the bytes stored.
void verify_single_gets(env& e, work::data& d) {
  for (std::size_t k = 0; k < d.keys().size(); ++k) {
    auto dst = d.dst_pieces()[k][0];
    std::memset(dst.data(), 0, dst.size());
    auto r = e.rt.block_on(e.c.get(d.keys()[k], dst));
    if (!r || *r != dst.size() || work::checksum(d.dst_pieces()[k]) != work::checksum(d.src_pieces()[k]))
      fail("ours: single get of " + d.keys()[k] + " failed or returned wrong bytes");
  }
}

void run_single_gets(env& e) {
  work::data d(e.config + "/small", {32, 4096, 1}, !e.s.small_pages);  // the keys run_small_batches stored (same bytes)
  verify_single_gets(e, d);
  for (int conc : {1, 8}) {
    std::vector<double> ops, p50, p99, rops, rp50, rp99;
    for (int r = 0; r < e.s.runs; ++r) {
      auto o = ours_single_gets(e, d.keys(), conc);
      auto b = redis_single_gets(e, d.keys(), conc, e.tcp());
      ops.push_back(o.ops_per_s);
      p50.push_back(mc::bench::percentile(o.us, 50));
      p99.push_back(mc::bench::percentile(o.us, 99));
      rops.push_back(b.ops_per_s);
      rp50.push_back(mc::bench::percentile(b.us, 50));
      rp99.push_back(mc::bench::percentile(b.us, 99));
    }
    std::string name = e.config + "_small_get_4KiB_c" + std::to_string(conc);
    mc::bench::report({"inference", name, "throughput", "ops/s", ops, e.redis_name(), rops});
    if (e.tcp())
      mc::bench::report_target({"inference", name, "p50", "us", p50, e.redis_name(), rp50}, {1.2, true});
    else
      mc::bench::report({"inference", name, "p50", "us", p50, e.redis_name(), rp50});
    mc::bench::report({"inference", name, "p99", "us", p99, e.redis_name(), rp99});
  }
}

bool wanted(const settings& s, const std::string& c) {
  return s.cases.empty() || std::find(s.cases.begin(), s.cases.end(), c) != s.cases.end();
}

void run_config(env& e) {
  const std::vector<big_case> big{
      {"sglang", {128, 1u << 20, 1}, false},
      {e.s.vllm_pieces == 64 ? "vllm" : "vllm_p" + std::to_string(e.s.vllm_pieces),
       {64, 2u << 20, parts_api ? e.s.vllm_pieces : 1u},
       false},
      {"lmcache", {4, 32u << 20, 1}, true},
  };
  // Small values first: after the big batches have freed hundreds of MiB
  // (ours and Redis alike) the kernel's page work adds millisecond tails to
  // every small operation for a while.
  if (wanted(e.s, "small") && e.s.ours_only.empty()) {  // (no ours-only form)
    run_small_batches(e);
    run_single_gets(e);
  }
  for (auto& bc : big)
    if (wanted(e.s, bc.name.substr(0, bc.name.find('_')))) run_big(e, e.c, bc, false);
  // Same-host again with buffers allocated by the store in shared memory
  // (client::allocate_buffer): the owner maps them and copies with memcpy.
  // Not in the --small-pages pass: the store's shared memory has one page size.
  if (shared_api && !e.tcp() && !e.s.small_pages)
    for (auto& bc : big)
      if (wanted(e.s, bc.name.substr(0, bc.name.find('_')))) run_big(e, e.c, bc, true);
}

}  // namespace

namespace {

/// Starts a master, an owner mooncake_client and this process's client for
/// one configuration, runs its cases, stops everything. Returns 0 or 1.
int one_config(const settings& s, const std::string& config, const std::filesystem::path& tmp, int off,
               std::uint16_t pump_port, int redis_port, const std::string& sock) {
  const int master_port = 25951 + off, owner_rpc = 25952 + off, owner_te = 25953 + off;
  std::string transport = config == "tcp" ? "tcp" : "auto";
  pid_t master = mc::bench::proc::spawn(
      {s.apps_dir + "/mooncake_master", "--rpc_port", std::to_string(master_port), "--rpc_address", "127.0.0.1"},
      (tmp / ("master-" + config + ".log")).string());
  mc::bench::proc::wait_port(master_port, 10);
  std::vector<std::string> owner_cmd = {s.apps_dir + "/mooncake_client",
                                        "--master_server_address",
                                        "127.0.0.1:" + std::to_string(master_port),
                                        "--host",
                                        "127.0.0.1",
                                        "--port",
                                        std::to_string(owner_te),
                                        "--client_rpc_port",
                                        std::to_string(owner_rpc),
                                        "--transfer_transport",
                                        transport,
                                        "--client_id",
                                        "owner",
                                        "--tiered_backend_config",
                                        R"({"tiers":[{"type":"DRAM","capacity":"3GiB","priority":100}]})"};
  owner_cmd.insert(owner_cmd.end(), s.owner_flags.begin(), s.owner_flags.end());
  pid_t owner = mc::bench::proc::spawn(owner_cmd, (tmp / ("owner-" + config + ".log")).string());
  int rc = 0;
  if (!mc::bench::proc::wait_port(owner_rpc, 20)) {
    std::fprintf(stderr, "inference_bench: the owner client did not start (see %s)\n",
                 (tmp / ("owner-" + config + ".log")).c_str());
    rc = 1;
  } else {
    mc::runtime::runtime rt(2);
    rt.start();
    mc::store::client_options o;
    o.client_id = "bench";
    o.master_server_address = "127.0.0.1:" + std::to_string(master_port);
    o.host = "127.0.0.1";
    o.transfer_transport = transport;
    o.tiered_backend_config = R"({"tiers":[{"type":"DRAM","capacity":"64MiB","priority":100}]})";
    mc::config::option_set none("b", "b");
    mc::store::resolve(o, none);
    std::string why;
    auto c = mc::store::client::start(rt, o, &why);
    if (!c) {
      std::fprintf(stderr, "inference_bench: %s\n", why.c_str());
      rc = 1;
    } else {
      env e{rt, **c, config, "127.0.0.1:" + std::to_string(owner_rpc), pump_port, redis_port, sock, s};
      run_config(e);
      (*c)->stop();
      c->reset();
    }
    mc::rpc::shutdown(rt);
    rt.stop();
  }
  mc::bench::proc::stop(owner);
  mc::bench::proc::stop(master);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  settings s;
  s.apps_dir = (std::filesystem::path(argv[0]).parent_path() / ".." / ".." / "apps").string();
  mc::bench::inference::parse(argc, argv, s);
  std::uint16_t pump_port = 0;
  int pump_fd = -1;
  pid_t pump_pid = base::start_pump_peer(pump_port, pump_fd);
  if (pump_pid < 0) fail("cannot start the pump peer");
  auto tmp = std::filesystem::temp_directory_path() / ("inference_bench." + std::to_string(getpid()));
  std::filesystem::create_directories(tmp);
  const int off = mc::bench::proc::pid_port_offset();
  const int redis_port = 25954 + off;
  std::string sock = (tmp / "redis.sock").string();
  if (!parts_api)
    std::printf("# note: no scatter-gather API in mc::store::client: vllm cases use contiguous values (_contig)\n");
  std::printf("%-34s %-12s %12s %-7s  %-14s %12s\n", "case", "metric", "ours", "unit", "baseline", "value");
  int rc = 0;
  for (auto& config : s.configs) {
    // A fresh redis-server per configuration: one that has held and freed the
    // other configuration's big values answers small requests several times
    // slower for a while (measured), which would flatter ours.
    pid_t redis_pid = mc::bench::proc::spawn(
        {"/usr/bin/redis-server", "--port", std::to_string(redis_port), "--bind", "127.0.0.1", "--unixsocket", sock,
         "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--maxmemory", "8gb"},
        (tmp / ("redis-" + config + ".log")).string());
    if (redis_pid < 0 || !mc::bench::proc::wait_port(redis_port, 10)) {
      std::fprintf(stderr, "inference_bench: cannot start redis-server (scripts/install-deps.sh --bench)\n");
      rc = 1;
    } else {
      rc = one_config(s, config, tmp, off, pump_port, redis_port, sock);
    }
    mc::bench::proc::stop(redis_pid);
    if (rc != 0) break;
  }
  close(pump_fd);
  mc::bench::proc::stop(pump_pid);
  if (rc == 0) std::filesystem::remove_all(tmp);
  return rc;
}
