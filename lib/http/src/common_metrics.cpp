// Metrics every node exports: process, RPC methods, HTTP server.
#include "mc/http/node_endpoints.hpp"
#include "mc/http/prometheus.hpp"
#include "mc/rpc/auth.hpp"
#include "mc/rpc/client.hpp"
#include "mc/rpc/method_stats.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace mc::http {

namespace {

const auto process_start_steady = std::chrono::steady_clock::now();
const auto process_start_system = std::chrono::system_clock::now();

std::uint64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

void append_common_metrics(exposition& e, const server& s) {
  using namespace std::chrono;
  e.single("process_start_time_seconds", "gauge", "Start time of the process since the Unix epoch in seconds.",
           std::chrono::duration<double>(process_start_system.time_since_epoch()).count());
  e.single("mc_process_uptime_seconds", "gauge", "Seconds since the process started.",
           std::chrono::duration<double>(std::chrono::steady_clock::now() - process_start_steady).count());
  e.single("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
           static_cast<double>(resident_bytes()));
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
               static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  e.single("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", cpu);

  auto methods = mc::rpc::method_stats();
  auto side_name = [](mc::rpc::call_side sd) { return sd == mc::rpc::call_side::client ? "client" : "server"; };
  e.family("mc_rpc_calls_total", "counter",
           "RPC calls per method; side=client: calls made, side=server: calls served.");
  for (auto& m : methods) e.sample("mc_rpc_calls_total", {{"method", m.method}, {"side", side_name(m.side)}}, m.calls);
  e.family("mc_rpc_errors_total", "counter",
           "RPC calls that failed at the RPC level (timeout, disconnect, remote error); statuses inside replies "
           "are not counted.");
  for (auto& m : methods)
    e.sample("mc_rpc_errors_total", {{"method", m.method}, {"side", side_name(m.side)}}, m.errors);
  e.family("mc_rpc_latency_seconds", "histogram", "RPC call latency per method and side.");
  for (auto& m : methods)
    e.histogram("mc_rpc_latency_seconds", {{"method", m.method}, {"side", side_name(m.side)}},
                mc::rpc::latency_bucket_bounds, m.buckets, m.sum_seconds);

  auto cc = mc::rpc::connection_counts();
  e.family("mc_rpc_connections_total", "counter",
           "RPC connections opened (side=client) or accepted (side=server) by transport (MC_RPC_PROTOCOL).");
  e.sample("mc_rpc_connections_total", {{"transport", "tcp"}, {"side", "client"}}, cc.client_tcp);
  e.sample("mc_rpc_connections_total", {{"transport", "rdma"}, {"side", "client"}}, cc.client_rdma);
  e.sample("mc_rpc_connections_total", {{"transport", "tcp"}, {"side", "server"}}, cc.server_tcp);
  e.sample("mc_rpc_connections_total", {{"transport", "rdma"}, {"side", "server"}}, cc.server_rdma);
  e.single("mc_rpc_rdma_fallbacks_total", "counter",
           "RPC connections that asked for RDMA and continued over TCP (the server has no RDMA control plane).",
           static_cast<double>(cc.client_fallback));

  auto st = s.stats();
  e.single("mc_http_connections", "gauge", "Open HTTP connections.", static_cast<double>(st.connections));
  e.single("mc_http_connections_refused_total", "counter",
           "HTTP connections over the connection bound (answered 503 with Retry-After).",
           static_cast<double>(st.refused));
  e.family("mc_http_responses_total", "counter", "HTTP responses by status class.");
  e.sample("mc_http_responses_total", {{"class", "2xx"}}, st.status_2xx);
  e.sample("mc_http_responses_total", {{"class", "3xx"}}, st.status_3xx);
  e.sample("mc_http_responses_total", {{"class", "4xx"}}, st.status_4xx);
  e.sample("mc_http_responses_total", {{"class", "5xx"}}, st.status_5xx);
  e.single("mc_http_bad_requests_total", "counter", "Malformed or oversize HTTP requests (connection closed).",
           static_cast<double>(st.bad_requests));
  e.single("mc_http_timeouts_total", "counter", "HTTP connections closed by a read or write deadline.",
           static_cast<double>(st.timeouts));
  e.family("mc_auth_failures_total", "counter",
           "Refused for authentication (--auth_token): surface=rpc: RPC connections without an accepted auth "
           "frame; surface=http: requests answered 401.");
  e.sample("mc_auth_failures_total", {{"surface", "rpc"}}, mc::rpc::auth_failures());
  e.sample("mc_auth_failures_total", {{"surface", "http"}}, st.auth_failures);
}

}  // namespace mc::http
