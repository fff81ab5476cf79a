// RPC benchmark: 64-byte call latency (p50, p99) and calls/s at 1/16/64 calls
// in flight, for
//   ours        mc::rpc on the runtime (coroutine client, coroutine-served method)
//   ours_plain  mc::rpc with a plain KJ method body (isolates serve() cost)
//   capnp_kj    the same schema on Cap'n Proto's own loop (kj::setupAsyncIo)
//   asio_floor  raw asio 64-byte ping-pong on the runtime (no RPC at all)
// Server and client run on two different threads of this process, over
// TCP loopback, for every implementation.
#include "bench.capnp.h"
#include "bench_options.hpp"
#include "bench_util.hpp"
#include "mc/rpc/capnp.hpp"
#include "mc/rpc/client.hpp"
#include "mc/rpc/protocol.hpp"
#include "mc/rpc/server.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/runtime/when_all.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <future>
#include <string>
#include <thread>

namespace asio = boost::asio;
using asio::ip::tcp;
using clock_type = std::chrono::steady_clock;
using mc::rpc::bench::Bench;

namespace {

struct sample {
  std::vector<double> latency_us;
  double calls_per_s = 0;
};

struct config {
  std::chrono::milliseconds duration{600};
  std::chrono::milliseconds warmup{100};
  int runs = 3;
  std::vector<int> inflight{1, 16, 64};
  std::string only;  // run just this implementation (diagnostics)
};

constexpr std::size_t payload_size = 64;

// ----------------------------------------------------------------- services

class coro_bench final : public mc::rpc::service<Bench> {
 public:
  using service::service;
  kj::Promise<void> ping(PingContext ctx) override { return serve(ctx, body(ctx)); }

 private:
  mc::task<mc::result<void>> body(PingContext ctx) {
    ctx.getResults().setData(ctx.getParams().getData());
    co_return mc::result<void>{};
  }
};

class plain_bench final : public Bench::Server {
 public:
  explicit plain_bench(mc::executor = {}) {}
  kj::Promise<void> ping(PingContext ctx) override {
    ctx.getResults().setData(ctx.getParams().getData());
    return kj::READY_NOW;
  }
};

// --------------------------------------------------------------------- ours

mc::task<void> ours_worker(Bench::Client cli, clock_type::time_point warm_end, clock_type::time_point end,
                           std::vector<double>* lat, std::uint64_t* count) {
  kj::byte payload[payload_size];
  std::memset(payload, 0x5a, sizeof payload);
  while (clock_type::now() < end) {
    auto t0 = clock_type::now();
    auto req = cli.pingRequest();
    req.setData(kj::arrayPtr(payload, payload_size));
    auto r = co_await mc::rpc::call(req.send());
    if (!r || r->getData().size() != payload_size) throw std::runtime_error("ours: bad reply");
    if (t0 >= warm_end) {
      lat->push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
      ++*count;
    }
  }
}

mc::task<sample> ours_run(std::string ep, std::string service, int inflight, config cfg) {
  auto cli = co_await mc::rpc::connect<Bench>(ep, service);
  if (!cli) throw std::runtime_error("connect: " + mc::rpc::last_error_message());
  auto start = clock_type::now();
  auto warm_end = start + cfg.warmup;
  auto end = warm_end + cfg.duration;
  std::vector<std::vector<double>> lats(static_cast<std::size_t>(inflight));
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(inflight));
  std::vector<mc::task<void>> workers;
  for (int i = 0; i < inflight; ++i) workers.push_back(ours_worker(*cli, warm_end, end, &lats[i], &counts[i]));
  // when_all needs a value type: wrap.
  std::vector<mc::task<int>> wrapped;
  for (auto& w : workers)
    wrapped.push_back([](mc::task<void> t) -> mc::task<int> {
      co_await std::move(t);
      co_return 0;
    }(std::move(w)));
  co_await mc::when_all(std::move(wrapped));
  double secs = std::chrono::duration<double>(clock_type::now() - warm_end).count();
  sample s;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < lats.size(); ++i) {
    s.latency_us.insert(s.latency_us.end(), lats[i].begin(), lats[i].end());
    total += counts[i];
  }
  s.calls_per_s = static_cast<double>(total) / secs;
  co_return s;
}

// ----------------------------------------------------------------- capnp_kj

kj::Promise<void> kj_worker(Bench::Client cli, clock_type::time_point warm_end, clock_type::time_point end,
                            std::vector<double>* lat, std::uint64_t* count) {
  if (clock_type::now() >= end) return kj::READY_NOW;
  static const kj::byte payload[payload_size] = {0x5a};
  auto t0 = clock_type::now();
  auto req = cli.pingRequest();
  req.setData(kj::arrayPtr(payload, payload_size));
  return req.send().then([=](capnp::Response<Bench::PingResults>&& r) mutable -> kj::Promise<void> {
    if (r.getData().size() != payload_size) throw std::runtime_error("kj: bad reply");
    if (t0 >= warm_end) {
      lat->push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
      ++*count;
    }
    return kj_worker(cli, warm_end, end, lat, count);
  });
}

/// Runs a capnp server on its own thread with kj::setupAsyncIo, measures from
/// another thread with its own kj::setupAsyncIo.
std::vector<std::pair<int, std::vector<sample>>> kj_measure(const config& cfg) {
  std::promise<unsigned> port_p;
  std::promise<const kj::Executor*> exec_p;
  auto stop_paf_holder = std::make_shared<kj::Own<kj::PromiseFulfiller<void>>>();
  std::thread server([&] {
    auto io = kj::setupAsyncIo();
    auto addr = io.provider->getNetwork().parseAddress("127.0.0.1", 0).wait(io.waitScope);
    auto listener = addr->listen();
    capnp::TwoPartyServer srv(kj::heap<plain_bench>());
    auto listening = srv.listen(*listener).eagerlyEvaluate(nullptr);
    auto stop = kj::newPromiseAndFulfiller<void>();
    *stop_paf_holder = kj::mv(stop.fulfiller);
    exec_p.set_value(&kj::getCurrentThreadExecutor());
    port_p.set_value(listener->getPort());
    stop.promise.wait(io.waitScope);
  });
  unsigned port = port_p.get_future().get();
  auto* server_exec = exec_p.get_future().get();

  std::vector<std::pair<int, std::vector<sample>>> out;
  std::thread client([&] {
    auto io = kj::setupAsyncIo();
    auto addr = io.provider->getNetwork().parseAddress("127.0.0.1", port).wait(io.waitScope);
    auto conn = addr->connect().wait(io.waitScope);
    capnp::TwoPartyClient tp(*conn);
    auto cli = tp.bootstrap().castAs<Bench>();
    for (int inflight : cfg.inflight) {
      std::vector<sample> runs;
      for (int r = 0; r < cfg.runs; ++r) {
        auto warm_end = clock_type::now() + cfg.warmup;
        auto end = warm_end + cfg.duration;
        std::vector<std::vector<double>> lats(static_cast<std::size_t>(inflight));
        std::vector<std::uint64_t> counts(static_cast<std::size_t>(inflight));
        kj::Vector<kj::Promise<void>> ps;
        for (int i = 0; i < inflight; ++i) ps.add(kj_worker(cli, warm_end, end, &lats[i], &counts[i]));
        kj::joinPromises(ps.releaseAsArray()).wait(io.waitScope);
        double secs = std::chrono::duration<double>(clock_type::now() - warm_end).count();
        sample s;
        std::uint64_t total = 0;
        for (std::size_t i = 0; i < lats.size(); ++i) {
          s.latency_us.insert(s.latency_us.end(), lats[i].begin(), lats[i].end());
          total += counts[i];
        }
        s.calls_per_s = static_cast<double>(total) / secs;
        runs.push_back(std::move(s));
      }
      out.emplace_back(inflight, std::move(runs));
    }
  });
  client.join();
  server_exec->executeSync([&] { (*stop_paf_holder)->fulfill(); });
  server.join();
  return out;
}

// --------------------------------------------------------------- asio_floor

mc::task<void> floor_session(tcp::socket s) {
  char buf[4096];
  for (;;) {
    auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    auto [wec, w] = co_await asio::async_write(s, asio::buffer(buf, n), asio::as_tuple(asio::use_awaitable));
    if (wec) co_return;
  }
}

mc::task<void> floor_accept(tcp::acceptor* acc) {
  for (;;) {
    auto [ec, s] = co_await acc->async_accept(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    asio::co_spawn(acc->get_executor(), floor_session(std::move(s)), asio::detached);
  }
}

/// One connection, `inflight` 64-byte messages outstanding; each reply triggers the next.
mc::task<sample> floor_run(std::uint16_t port, int inflight, config cfg) {
  auto ex = co_await asio::this_coro::executor;
  tcp::socket s(ex);
  co_await s.async_connect({asio::ip::address_v4::loopback(), port}, asio::use_awaitable);
  s.set_option(tcp::no_delay(true));
  char msg[payload_size];
  std::memset(msg, 0x5a, sizeof msg);
  std::deque<clock_type::time_point> sent;
  auto warm_end = clock_type::now() + cfg.warmup;
  auto end = warm_end + cfg.duration;
  std::vector<char> batch(payload_size * static_cast<std::size_t>(inflight), 0x5a);
  for (int i = 0; i < inflight; ++i) sent.push_back(clock_type::now());
  co_await asio::async_write(s, asio::buffer(batch), asio::use_awaitable);
  sample out;
  std::uint64_t count = 0;
  char in[payload_size];
  while (!sent.empty()) {
    co_await asio::async_read(s, asio::buffer(in), asio::use_awaitable);
    auto t0 = sent.front();
    sent.pop_front();
    auto now = clock_type::now();
    if (t0 >= warm_end) {
      out.latency_us.push_back(std::chrono::duration<double, std::micro>(now - t0).count());
      ++count;
    }
    if (now < end) {
      sent.push_back(clock_type::now());
      co_await asio::async_write(s, asio::buffer(msg), asio::use_awaitable);
    }
  }
  out.calls_per_s = static_cast<double>(count) / std::chrono::duration<double>(clock_type::now() - warm_end).count();
  co_return out;
}

// ------------------------------------------------------------------ report

void report(const std::string& case_name, const std::vector<sample>& ours, const std::string& base_name,
            const std::vector<sample>* base) {
  auto metric = [&](const char* name, const char* unit, auto get) {
    mc::bench::row r;
    r.bench = "rpc";
    r.case_name = case_name;
    r.metric = name;
    r.unit = unit;
    for (auto& s : ours) r.runs.push_back(get(s));
    if (base) {
      r.baseline = base_name;
      for (auto& s : *base) r.baseline_runs.push_back(get(s));
    }
    mc::bench::report(r);
  };
  metric("p50_latency", "us", [](const sample& s) { return mc::bench::percentile(s.latency_us, 50); });
  metric("p99_latency", "us", [](const sample& s) { return mc::bench::percentile(s.latency_us, 99); });
  metric("throughput", "calls/s", [](const sample& s) { return s.calls_per_s; });
}

}  // namespace

int main(int argc, char** argv) {
  config cfg;
  std::uint64_t runs = 3;
  std::vector<std::uint64_t> inflight{1, 16, 64};
  mc::config::option_set set("rpc_bench",
                             "64-byte RPC latency/throughput, mc::rpc vs capnp's own loop vs raw asio.\n"
                             "Environment: MC_RPC_PROTOCOL=rdma runs our calls over RDMA (needs an RDMA device;\n"
                             "case names get _rdma); the capnp and asio baselines stay on TCP.");
  set.add("duration-ms", &cfg.duration, "measured time per run (a bare number is milliseconds)")
      .add("runs", &runs, "repetitions per case", 1, 1000)
      .add_list("inflight", &inflight, "calls in flight (comma list)", 1, 1 << 16)
      .add_custom("only", "", "run only ours|plain|kj|floor (no comparison rows)",
                  [&cfg](std::string_view v) -> std::optional<std::string> {
                    if (v != "ours" && v != "plain" && v != "kj" && v != "floor")
                      return "expected ours, plain, kj or floor";
                    cfg.only = std::string(v);
                    return std::nullopt;
                  });
  mc::bench::parse_options(set, argc, argv);
  cfg.runs = static_cast<int>(runs);
  cfg.inflight.assign(inflight.begin(), inflight.end());

  // Baseline first, on its own threads, while our runtime is idle.
  if (cfg.only == "kj") {
    for (auto& [qd, runs] : kj_measure(cfg)) report("capnp_kj_call_64B_qd" + std::to_string(qd), runs, "", nullptr);
    return 0;
  }
  // MC_RPC_PROTOCOL=rdma: our calls run over RDMA (real NICs); the capnp
  // kj-loop baseline and the asio floor stay on TCP. Case names get "_rdma".
  if (auto err = mc::rpc::use_protocol_from_env({}); !err.empty()) {
    std::fprintf(stderr, "rpc_bench: %s\n", err.c_str());
    return 2;
  }
  const std::string sfx = mc::rpc::current_protocol() == mc::rpc::protocol::rdma ? "_rdma" : "";
  if (!sfx.empty())
    std::printf("# our calls over RDMA (device %s); baselines over TCP\n", mc::rpc::rdma_device_name().c_str());
  mc::runtime::runtime rt(2);
  rt.start();
  mc::rpc::server_options o;
  o.host = "127.0.0.1";
  o.threads = 1;  // server on thread 0, clients on thread 1
  mc::rpc::server srv(rt, o);
  srv.add_service("coro", mc::rpc::make_service<coro_bench>());
  srv.add_service("plain", mc::rpc::make_service<plain_bench>());
  if (!srv.start()) {
    std::fprintf(stderr, "server: %s\n", srv.message().c_str());
    return 1;
  }
  std::string ep = "127.0.0.1:" + std::to_string(srv.port());

  tcp::acceptor floor_acc(rt.context(0), {asio::ip::address_v4::loopback(), 0});
  auto floor_port = floor_acc.local_endpoint().port();
  asio::co_spawn(rt.executor(0), floor_accept(&floor_acc), asio::detached);

  std::printf("%-34s %-12s %12s %-7s  %-14s %12s\n", "case", "metric", "value", "unit", "baseline", "value");
  // Repetitions interleave the implementations (kj, ours, plain, floor) so a
  // change of machine load hits all of them alike.
  auto want = [&](const char* n) { return cfg.only.empty() || cfg.only == n; };
  auto one_run = cfg;
  one_run.runs = 1;
  std::vector<std::vector<sample>> kj_by_qd(cfg.inflight.size()), ours_by_qd(cfg.inflight.size()),
      plain_by_qd(cfg.inflight.size()), floor_by_qd(cfg.inflight.size());
  for (int r = 0; r < cfg.runs; ++r) {
    if (cfg.only.empty()) {
      auto kr = kj_measure(one_run);
      for (std::size_t k = 0; k < kr.size(); ++k) kj_by_qd[k].push_back(std::move(kr[k].second[0]));
    }
    for (std::size_t k = 0; k < cfg.inflight.size(); ++k) {
      int inflight = cfg.inflight[k];
      if (want("ours")) ours_by_qd[k].push_back(rt.block_on(ours_run(ep, "coro", inflight, cfg), 1));
      if (want("plain")) plain_by_qd[k].push_back(rt.block_on(ours_run(ep, "plain", inflight, cfg), 1));
      if (want("floor")) floor_by_qd[k].push_back(rt.block_on(floor_run(floor_port, inflight, cfg), 1));
    }
  }
  for (std::size_t k = 0; k < cfg.inflight.size(); ++k) {
    int inflight = cfg.inflight[k];
    auto& ours = ours_by_qd[k];
    auto& plain = plain_by_qd[k];
    auto& floor = floor_by_qd[k];
    std::string qd = "_qd" + std::to_string(inflight);
    if (!cfg.only.empty()) {
      if (!ours.empty()) report("call_64B" + sfx + qd, ours, "", nullptr);
      if (!plain.empty()) report("call_64B_plain_method" + sfx + qd, plain, "", nullptr);
      if (!floor.empty()) report("pingpong_64B_asio_floor" + qd, floor, "", nullptr);
      continue;
    }
    auto& base = kj_by_qd[k];
    report("call_64B" + sfx + qd, ours, "capnp_kj_loop", &base);
    report("call_64B_plain_method" + sfx + qd, plain, "capnp_kj_loop", &base);
    report("pingpong_64B_asio_floor" + qd, floor, "", nullptr);
  }

  rt.block_on(
      [](tcp::acceptor* a) -> mc::task<void> {
        a->close();
        co_return;
      }(&floor_acc),
      0);
  srv.stop();
  mc::rpc::shutdown(rt);
  rt.stop();
  return 0;
}
