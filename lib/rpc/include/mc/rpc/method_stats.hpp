#pragma once
/// Per-method RPC counters for /metrics: calls, errors and a latency
/// histogram, on both sides (client = calls this process made, server = calls
/// it served). Recorded by mc::rpc::call() and mc::rpc::serve() (capnp.hpp).
///
/// Cost: each method has one slot (looked up once per call site through a
/// function-local static); recording is a few relaxed atomic increments plus
/// two steady_clock reads. set_method_stats_enabled(false) skips all of it.
/// "errors" are calls that failed at the RPC level (timeout, disconnect, a
/// remote mc error raised as an exception); statuses carried inside a reply
/// are not errors here. Thread-safe; header-only.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace mc::rpc {

enum class call_side : std::uint8_t { client, server };

/// Upper bounds (seconds) of the latency histogram buckets; +Inf is implicit.
inline constexpr std::array<double, 14> latency_bucket_bounds = {10e-6,  25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3,
                                                                 2.5e-3, 5e-3,  10e-3, 25e-3,  100e-3, 1.0,    10.0};

/// One method's live counters (never destroyed once registered).
struct method_counters {
  std::string method;  ///< "Interface.method", e.g. "Master.getReplicaList"
  call_side side = call_side::client;
  std::atomic<std::uint64_t> calls{0};
  std::atomic<std::uint64_t> errors{0};
  std::atomic<std::uint64_t> sum_ns{0};
  /// Non-cumulative: buckets[i] counts latencies <= bound i and > bound i-1;
  /// the last one counts those above every bound.
  std::array<std::atomic<std::uint64_t>, latency_bucket_bounds.size() + 1> buckets{};

  void record(std::chrono::nanoseconds d, bool ok) noexcept {
    calls.fetch_add(1, std::memory_order_relaxed);
    if (!ok) errors.fetch_add(1, std::memory_order_relaxed);
    auto ns = static_cast<std::uint64_t>(d.count() < 0 ? 0 : d.count());
    sum_ns.fetch_add(ns, std::memory_order_relaxed);
    double s = static_cast<double>(ns) * 1e-9;
    std::size_t i = 0;
    while (i < latency_bucket_bounds.size() && s > latency_bucket_bounds[i]) ++i;
    buckets[i].fetch_add(1, std::memory_order_relaxed);
  }
};

/// A copy of one slot (relaxed loads: each number exact, the set not atomic).
struct method_snapshot {
  std::string method;
  call_side side = call_side::client;
  std::uint64_t calls = 0;
  std::uint64_t errors = 0;
  double sum_seconds = 0;
  std::array<std::uint64_t, latency_bucket_bounds.size() + 1> buckets{};
};

namespace detail {
struct method_registry {
  std::mutex mu;
  std::deque<method_counters> slots;  // stable addresses
  std::atomic<bool> enabled{true};
};
/// Never destroyed: runtime threads that outlive main's return (a process
/// that exits without stopping its runtimes) may still record a call while
/// exit handlers run static destructors (a use-after-free the http fuzz
/// target hit at exit).
inline method_registry& registry() {
  static auto* r = new method_registry;
  return *r;
}
}  // namespace detail

/// The slot of (method, side), created on first use. Thread-safe; the
/// reference stays valid for the life of the process.
inline method_counters& method_slot(std::string_view method, call_side side) {
  auto& r = detail::registry();
  std::lock_guard lk(r.mu);
  for (auto& s : r.slots)
    if (s.side == side && s.method == method) return s;
  auto& s = r.slots.emplace_back();
  s.method = std::string(method);
  s.side = side;
  return s;
}

/// Turns recording on (default) or off, process-wide (benchmarks compare both).
inline void set_method_stats_enabled(bool on) noexcept {
  detail::registry().enabled.store(on, std::memory_order_relaxed);
}
inline bool method_stats_enabled() noexcept { return detail::registry().enabled.load(std::memory_order_relaxed); }

/// Snapshot of every registered method. Thread-safe.
inline std::vector<method_snapshot> method_stats() {
  auto& r = detail::registry();
  std::lock_guard lk(r.mu);
  std::vector<method_snapshot> out;
  out.reserve(r.slots.size());
  for (auto& s : r.slots) {
    method_snapshot m;
    m.method = s.method;
    m.side = s.side;
    m.calls = s.calls.load(std::memory_order_relaxed);
    m.errors = s.errors.load(std::memory_order_relaxed);
    m.sum_seconds = static_cast<double>(s.sum_ns.load(std::memory_order_relaxed)) * 1e-9;
    for (std::size_t i = 0; i < m.buckets.size(); ++i) m.buckets[i] = s.buckets[i].load(std::memory_order_relaxed);
    out.push_back(std::move(m));
  }
  return out;
}

/// "Master.getReplicaList" from a capnp display name such as
/// "master.capnp:Master.getReplicaList$Params".
inline std::string method_from_display_name(std::string_view n) {
  if (auto c = n.find(':'); c != std::string_view::npos) n.remove_prefix(c + 1);
  if (auto d = n.rfind('$'); d != std::string_view::npos) n = n.substr(0, d);
  return std::string(n);
}

}  // namespace mc::rpc
