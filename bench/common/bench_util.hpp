#pragma once
// Shared helpers for benchmark programs: repeated runs, medians, spread, a
// human table on stdout and one JSON line per result (the project's format):
// {"bench":"runtime","case":"file_read_1MiB_qd8","metric":"throughput","unit":"MiB/s",
//  "value":N,"baseline":"fio","baseline_value":M,"runs":3,"spread":0.04}
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mc::bench {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// (max - min) / median: how far apart the repeated runs were.
inline double spread(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  auto [mn, mx] = std::minmax_element(v.begin(), v.end());
  double m = median(v);
  return m > 0 ? (*mx - *mn) / m : 0;
}

/// Percentile (0..100) of samples.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto idx = static_cast<std::size_t>(std::clamp(p / 100.0 * (v.size() - 1), 0.0, double(v.size() - 1)));
  return v[idx];
}

struct row {
  std::string bench;
  std::string case_name;
  std::string metric;
  std::string unit;
  std::vector<double> runs;  // one value per repetition
  std::string baseline;      // empty if none
  std::vector<double> baseline_runs;
};

/// Prints one result: a table line and its JSON line. Warns when the spread of
/// the runs exceeds 20 %.
inline void report(const row& r) {
  double v = median(r.runs);
  double s = spread(r.runs);
  std::optional<double> b;
  if (!r.baseline.empty() && !r.baseline_runs.empty()) b = median(r.baseline_runs);
  std::printf("%-34s %-12s %12.2f %-7s", r.case_name.c_str(), r.metric.c_str(), v, r.unit.c_str());
  if (b) std::printf("  %-14s %12.2f  ratio %.2f", r.baseline.c_str(), *b, *b > 0 ? v / *b : 0.0);
  if (s > 0.2) std::printf("  (spread %.0f%%: noisy)", s * 100);
  std::printf("\n");
  std::printf("{\"bench\":\"%s\",\"case\":\"%s\",\"metric\":\"%s\",\"unit\":\"%s\",\"value\":%.4f", r.bench.c_str(),
              r.case_name.c_str(), r.metric.c_str(), r.unit.c_str(), v);
  if (b) std::printf(",\"baseline\":\"%s\",\"baseline_value\":%.4f", r.baseline.c_str(), *b);
  std::printf(",\"runs\":%zu,\"spread\":%.4f}\n", r.runs.size(), s);
  std::fflush(stdout);
}

/// A goal for a row's ratio ours / baseline (medians of one run): met when
/// the ratio is >= `ratio` (throughput), or <= `ratio` when `at_most`
/// (latency).
struct target {
  double ratio = 1;
  bool at_most = false;
};

/// Like report(), plus the target: the table line ends in "target >= R:
/// met" / "missed", the JSON line carries "target":">= R", "met":true|false
/// and every run's value ("run_values", "baseline_run_values").
/// Returns whether the target was met (false without a baseline).
inline bool report_target(const row& r, const target& t) {
  double v = median(r.runs);
  double s = spread(r.runs);
  double b = r.baseline_runs.empty() ? 0 : median(r.baseline_runs);
  double x = b > 0 ? v / b : 0;
  bool met = b > 0 && (t.at_most ? x <= t.ratio : x >= t.ratio);
  char goal[32];
  std::snprintf(goal, sizeof goal, "%s %.2f", t.at_most ? "<=" : ">=", t.ratio);
  std::printf("%-34s %-12s %12.2f %-7s  %-14s %12.2f  ratio %.2f  target %s: %s", r.case_name.c_str(), r.metric.c_str(),
              v, r.unit.c_str(), r.baseline.c_str(), b, x, goal, met ? "target met" : "missed");
  if (s > 0.2) std::printf("  (spread %.0f%%: noisy)", s * 100);
  std::printf("\n");
  std::printf(
      "{\"bench\":\"%s\",\"case\":\"%s\",\"metric\":\"%s\",\"unit\":\"%s\",\"value\":%.4f"
      ",\"baseline\":\"%s\",\"baseline_value\":%.4f,\"runs\":%zu,\"spread\":%.4f"
      ",\"target\":\"%s\",\"met\":%s",
      r.bench.c_str(), r.case_name.c_str(), r.metric.c_str(), r.unit.c_str(), v, r.baseline.c_str(), b, r.runs.size(),
      s, goal, met ? "true" : "false");
  // Every run's value, ours and the baseline's (the spread's raw data).
  for (const auto* xs : {&r.runs, &r.baseline_runs}) {
    std::printf(",\"%s\":[", xs == &r.runs ? "run_values" : "baseline_run_values");
    for (std::size_t i = 0; i < xs->size(); ++i) std::printf("%s%.4f", i ? "," : "", (*xs)[i]);
    std::printf("]");
  }
  std::printf("}\n");
  std::fflush(stdout);
  return met;
}

/// Caller memory for a benchmark, laid out like an inference engine's KV
/// pool or a registered transfer region: one anonymous mapping, 2 MiB-aligned
/// and, unless `huge_pages` is false, advised for transparent huge pages
/// before its first touch (the kernel's default here is "madvise": without
/// the advice every page is 4 KiB). Ours and every baseline use the same
/// buffers. Same-host copies (process_vm_*) pin and walk the pages of both
/// sides, so they gain far more from huge pages than memcpy does: the
/// benches say which pages they used (`--small-pages` measures 4 KiB).
class page_buffer {
 public:
  static constexpr std::size_t huge_page = 2u << 20;
  page_buffer(std::size_t n, bool huge_pages) : size_(n) {
    map_len_ = (n + 2 * huge_page - 1) / huge_page * huge_page;
    void* p = ::mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    map_ = static_cast<std::byte*>(p);
    data_ = map_ + ((huge_page - reinterpret_cast<std::uintptr_t>(map_) % huge_page) % huge_page);
    if (huge_pages) ::madvise(data_, (n + huge_page - 1) / huge_page * huge_page, MADV_HUGEPAGE);  // best effort
  }
  ~page_buffer() { ::munmap(map_, map_len_); }
  page_buffer(const page_buffer&) = delete;
  page_buffer& operator=(const page_buffer&) = delete;
  std::byte* data() { return data_; }
  char* chars() { return reinterpret_cast<char*>(data_); }
  std::size_t size() const { return size_; }
  operator std::span<std::byte>() { return {data_, size_}; }

 private:
  std::byte* map_ = nullptr;
  std::byte* data_ = nullptr;
  std::size_t map_len_ = 0, size_ = 0;
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace mc::bench
