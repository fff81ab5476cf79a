// TieredBackend benchmark: SSD tier put/get throughput (fio as the baseline in
// the same run) and DRAM allocate+free rate.
#include "mc/runtime/runtime.hpp"
#include "mc/runtime/when_all.hpp"
#include "mc/tiered/offset_allocator.hpp"
#include "mc/tiered/tiered_backend.hpp"

#include "bench_options.hpp"
#include "bench_util.hpp"
#include "fio.hpp"

#include <boost/json/src.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <filesystem>
#include <map>
#include <set>
#include <optional>
#include <random>
#include <string>

namespace {

using clock_type = std::chrono::steady_clock;
namespace b = mc::bench;
using namespace mc::tiered;

struct options {
  unsigned runs = 3;
  unsigned depth = 8;
  std::size_t mib = 512;  // data volume of the 1 MiB cases
  std::string dir = "/var/tmp";
  bool fio = true;
  std::uint64_t scaling_max = 10u << 20;  // live allocations of the largest scaling point
};

/// 4096-aligned heap buffer (O_DIRECT-friendly user memory).
struct aligned_buffer {
  explicit aligned_buffer(std::size_t n, std::size_t shift = 0)
      : base(static_cast<std::byte*>(std::aligned_alloc(4096, n + 4096))), data(base + shift), size(n) {}
  ~aligned_buffer() { std::free(base); }
  aligned_buffer(aligned_buffer&& o) noexcept : base(std::exchange(o.base, nullptr)), data(o.data), size(o.size) {}
  std::byte* base;
  std::byte* data;
  std::size_t size;
};

mc::task<mc::result<void>> put_worker(tiered_backend& be, std::atomic<std::size_t>& next, std::size_t count,
                                      std::size_t size, const aligned_buffer& src, std::string prefix) {
  for (;;) {
    auto i = next.fetch_add(1);
    if (i >= count) co_return mc::result<void>{};
    auto h = co_await be.allocate(size, tier_type::ssd);
    if (!h) co_return h.error();
    if (auto w = co_await h->write({src.data, size}); !w) co_return w;
    if (auto c = be.commit(prefix + std::to_string(i), std::move(*h)); !c) co_return c.error();
  }
}

mc::task<mc::result<void>> get_worker(tiered_backend& be, std::atomic<std::size_t>& next, std::size_t count,
                                      std::size_t keys, std::string prefix, aligned_buffer& dst, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  for (;;) {
    auto i = next.fetch_add(1);
    if (i >= count) co_return mc::result<void>{};
    auto h = be.get(prefix + std::to_string(keys == count ? i : g() % keys));
    if (!h) co_return h.error();
    if (auto r = co_await h->read_into({dst.data, h->size()}); !r) co_return r;
  }
}

template <class MakeWorker>
double run_parallel(mc::runtime::runtime& rt, unsigned depth, std::uint64_t bytes, MakeWorker make) {
  auto t0 = clock_type::now();
  auto res = rt.block_on([](unsigned depth, MakeWorker make) -> mc::task<mc::result<void>> {
    std::vector<mc::task<mc::result<void>>> ws;
    for (unsigned d = 0; d < depth; ++d) ws.push_back(make(d));
    for (auto& r : co_await mc::when_all(std::move(ws)))
      if (!r) co_return r;
    co_return mc::result<void>{};
  }(depth, make));
  double secs = b::seconds_since(t0);
  if (!res) {
    std::fprintf(stderr, "operation failed: %s\n", res.error().message().c_str());
    std::exit(1);
  }
  return static_cast<double>(bytes) / (1024.0 * 1024.0) / secs;
}

void bench_ssd(const options& o) {
  mc::runtime::runtime rt(1);
  rt.start();
  const std::string dir = o.dir + "/mc-tier-bench-" + std::to_string(::getpid());
  const std::size_t big = 1 << 20, small = 4096;
  const std::size_t big_count = o.mib, small_count = 16384, small_gets = 100000;
  auto be = tiered_backend::create(rt, {tier_config{tier_type::ssd, (o.mib + 128) << 20, 1, "OFFSET", dir, false}},
                                   backend_options{4 << 20, o.depth * 2});
  if (!be) {
    std::fprintf(stderr, "%s\n", be.error().message.c_str());
    std::exit(1);
  }
  auto& bk = **be;
  aligned_buffer src(big), src_odd(big, 8);
  for (std::size_t i = 0; i < big; ++i) src.data[i] = src_odd.data[i] = std::byte(i * 31 + 1);
  std::vector<aligned_buffer> dst, dst_odd;
  for (unsigned d = 0; d < o.depth; ++d) {
    dst.emplace_back(big);
    dst_odd.emplace_back(big, 8);
  }
  const std::string fio_file = dir + "/fio.dat";
  const auto depth_s = std::to_string(o.depth);

  b::row put{"tiered", "ssd_put_1MiB_qd" + depth_s, "throughput", "MiB/s", {}, o.fio ? "fio" : "", {}};
  b::row get{"tiered", "ssd_get_1MiB_qd" + depth_s, "throughput", "MiB/s", {}, o.fio ? "fio" : "", {}};
  b::row put_odd{
      "tiered", "ssd_put_1MiB_qd" + depth_s + "_unaligned_src", "throughput", "MiB/s", {}, o.fio ? "fio" : "", {}};
  b::row get_odd{
      "tiered", "ssd_get_1MiB_qd" + depth_s + "_unaligned_dst", "throughput", "MiB/s", {}, o.fio ? "fio" : "", {}};
  b::row get4{"tiered", "ssd_get_4KiB_qd" + depth_s, "throughput", "MiB/s", {}, o.fio ? "fio" : "", {}};
  for (unsigned run = 0; run < o.runs; ++run) {
    for (auto& k : bk.keys()) (void)bk.remove(k.key);
    std::atomic<std::size_t> next{0};
    put.runs.push_back(run_parallel(rt, o.depth, big_count * big,
                                    [&](unsigned) { return put_worker(bk, next, big_count, big, src, "b"); }));
    next = 0;
    get.runs.push_back(run_parallel(rt, o.depth, big_count * big, [&](unsigned d) {
      return get_worker(bk, next, big_count, big_count, "b", dst[d], d);
    }));
    // Unaligned user memory: through the staging buffers (extra memcpy).
    for (auto& k : bk.keys()) (void)bk.remove(k.key);
    next = 0;
    put_odd.runs.push_back(run_parallel(rt, o.depth, big_count * big,
                                        [&](unsigned) { return put_worker(bk, next, big_count, big, src_odd, "b"); }));
    next = 0;
    get_odd.runs.push_back(run_parallel(rt, o.depth, big_count * big, [&](unsigned d) {
      return get_worker(bk, next, big_count, big_count, "b", dst_odd[d], d);
    }));
    for (auto& k : bk.keys()) (void)bk.remove(k.key);
    next = 0;
    run_parallel(rt, o.depth, small_count * small,
                 [&](unsigned) { return put_worker(bk, next, small_count, small, src, "s"); });
    next = 0;
    get4.runs.push_back(run_parallel(rt, o.depth, small_gets * small, [&](unsigned d) {
      return get_worker(bk, next, small_gets, small_count, "s", dst[d], d + 77);
    }));
    if (o.fio) {
      auto size = std::to_string(o.mib) + "M";
      if (auto f = b::run_fio({fio_file, "write", "1M", size, o.depth, ""})) {
        put.baseline_runs.push_back(f->mib_s);
        put_odd.baseline_runs.push_back(f->mib_s);
      }
      if (auto f = b::run_fio({fio_file, "read", "1M", size, o.depth, ""})) {
        get.baseline_runs.push_back(f->mib_s);
        get_odd.baseline_runs.push_back(f->mib_s);
      }
      if (auto f = b::run_fio({fio_file, "randread", "4k", "64M", o.depth,
                               "--io_size=" + std::to_string(small_gets * small / 1024) + "k"}))
        get4.baseline_runs.push_back(f->mib_s);
    }
  }
  b::report(put);
  b::report(get);
  b::report(put_odd);
  b::report(get_odd);
  b::report(get4);
  be->reset();
  rt.stop();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

void bench_dram(const options& o) {
  // Raw allocator (single thread, mixed sizes, ~50 % fill).
  b::row raw{"tiered", "offset_allocator_alloc_free", "rate", "ops/s", {}, "", {}};
  b::row be_row{"tiered", "dram_allocate_free_4KiB", "rate", "ops/s", {}, "", {}};
  for (unsigned run = 0; run < o.runs; ++run) {
    offset_allocator a(1ull << 30, 64);
    std::mt19937_64 g(run);
    std::vector<mc::tiered::allocation> live;
    for (int i = 0; i < 4096; ++i) {
      auto s = 64 + g() % (256 << 10);
      if (auto got = a.allocate(s)) live.push_back(*got);
    }
    constexpr std::size_t n = 2'000'000;
    auto t0 = clock_type::now();
    for (std::size_t i = 0; i < n; ++i) {
      auto k = g() % live.size();
      a.free(live[k]);
      auto got = a.allocate(64 + g() % (256 << 10));
      if (!got) std::abort();
      live[k] = *got;
    }
    raw.runs.push_back(static_cast<double>(n) / b::seconds_since(t0));
  }
  mc::runtime::runtime rt(1);
  rt.start();
  auto be = tiered_backend::create(rt, {tier_config{tier_type::dram, 256 << 20, 100, "OFFSET", "", false}}).value();
  for (unsigned run = 0; run < o.runs; ++run) {
    constexpr std::size_t n = 500'000;
    auto t0 = clock_type::now();
    auto ok = rt.block_on([](tiered_backend& be) -> mc::task<bool> {
      for (std::size_t i = 0; i < n; ++i) {
        auto h = co_await be.allocate(4096);
        if (!h) co_return false;
      }
      co_return true;
    }(*be));
    if (!ok) std::exit(1);
    be_row.runs.push_back(static_cast<double>(n) / b::seconds_since(t0));
  }
  b::report(raw);
  b::report(be_row);
}

/// Commit then get of 4 KiB DRAM values on one thread over 16 Ki keys (the
/// tier holds them all; every commit replaces an older value of its key):
/// allocate + write + commit + get + read, two operations per iteration.
void bench_dram_put_get(const options& o) {
  b::row row{"tiered", "dram_put_get_4KiB", "rate", "ops/s", {}, "", {}};
  mc::runtime::runtime rt(1);
  rt.start();
  auto be = tiered_backend::create(rt, {tier_config{tier_type::dram, 256 << 20, 100, "OFFSET", "", false}}).value();
  constexpr std::size_t keys = 16 << 10, n = 500'000, size = 4096;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < keys; ++i) names.push_back("key-" + std::to_string(i));
  std::vector<std::byte> src(size, std::byte{7}), dst(size);
  for (unsigned run = 0; run < o.runs; ++run) {
    auto t0 = clock_type::now();
    auto ok = rt.block_on([](tiered_backend& be, std::vector<std::string>& names, std::vector<std::byte>& src,
                             std::vector<std::byte>& dst) -> mc::task<bool> {
      for (std::size_t i = 0; i < n; ++i) {
        auto h = co_await be.allocate(size);
        if (!h) co_return false;
        std::memcpy(h->data().data(), src.data(), size);
        auto& key = names[i % keys];
        if (!be.commit(key, std::move(*h))) co_return false;
        auto r = be.get(key);
        if (!r) co_return false;
        std::memcpy(dst.data(), r->data().data(), size);
      }
      co_return true;
    }(*be, names, src, dst));
    if (!ok || dst[size - 1] != std::byte{7}) std::exit(1);
    row.runs.push_back(static_cast<double>(2 * n) / b::seconds_since(t0));
  }
  b::report(row);
}

/// The baseline of the scaling rows: best fit over a size-ordered std::set
/// with an address-ordered std::map for coalescing (the tier's allocator
/// before the OFFSET allocator; O(log free blocks) per operation).
class map_best_fit {
 public:
  explicit map_best_fit(std::uint64_t capacity) { insert_free(0, capacity); }
  std::optional<std::uint64_t> allocate(std::uint64_t size) {
    size = (size + 63) & ~std::uint64_t{63};
    auto it = by_size_.lower_bound({size, 0});
    if (it == by_size_.end()) return std::nullopt;
    auto [len, off] = *it;
    by_size_.erase(it);
    by_offset_.erase(off);
    if (len > size) insert_free(off + size, len - size);
    return off;
  }
  void free(std::uint64_t off, std::uint64_t size) {
    size = (size + 63) & ~std::uint64_t{63};
    std::uint64_t start = off, end = off + size;
    auto next = by_offset_.lower_bound(off);
    if (next != by_offset_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == off) {
        start = prev->first;
        erase_free(prev);
      }
    }
    if (next != by_offset_.end() && next->first == end) {
      end += next->second;
      erase_free(next);
    }
    insert_free(start, end - start);
  }

 private:
  void insert_free(std::uint64_t off, std::uint64_t len) {
    by_offset_.emplace(off, len);
    by_size_.emplace(len, off);
  }
  void erase_free(std::map<std::uint64_t, std::uint64_t>::iterator it) {
    by_size_.erase({it->second, it->first});
    by_offset_.erase(it);
  }
  std::map<std::uint64_t, std::uint64_t> by_offset_;
  std::set<std::pair<std::uint64_t, std::uint64_t>> by_size_;
};

/// OFFSET allocator cost per free + allocate pair with N live allocations
/// (random sizes 64 B .. 64 KiB, random victims), against map_best_fit on
/// the same sequence. Per-op work is constant; what grows with N is the cache
/// and TLB misses of touching random live blocks.
void bench_allocator_scaling(const options& o) {
  for (std::uint64_t live_n : {1ull << 10, 16ull << 10, 256ull << 10, 1ull << 20, 10ull << 20}) {
    if (live_n > o.scaling_max) break;
    b::row row{"tiered", "offset_allocator_scaling_" + std::to_string(live_n), "latency", "ns/op", {}, "map_best_fit",
               {}};
    for (unsigned run = 0; run < o.runs; ++run) {
      offset_allocator a(std::uint64_t{1} << 50, 64);
      std::mt19937_64 g(run);
      std::vector<mc::tiered::allocation> live;
      live.reserve(live_n);
      for (std::uint64_t i = 0; i < live_n; ++i) live.push_back(a.allocate(64 + g() % (64 << 10)).value());
      constexpr std::size_t n = 1'000'000;
      auto t0 = clock_type::now();
      for (std::size_t i = 0; i < n; ++i) {
        auto k = g() % live.size();
        a.free(live[k]);
        live[k] = a.allocate(64 + g() % (64 << 10)).value();
      }
      row.runs.push_back(b::seconds_since(t0) * 1e9 / static_cast<double>(n));
      // The baseline on the same sizes and victims.
      map_best_fit m(std::uint64_t{1} << 50);
      std::mt19937_64 h(run);
      std::vector<std::pair<std::uint64_t, std::uint64_t>> held;
      held.reserve(live_n);
      for (std::uint64_t i = 0; i < live_n; ++i) {
        auto sz = 64 + h() % (64 << 10);
        held.emplace_back(m.allocate(sz).value(), sz);
      }
      t0 = clock_type::now();
      for (std::size_t i = 0; i < n; ++i) {
        auto k = h() % held.size();
        m.free(held[k].first, held[k].second);
        auto sz = 64 + h() % (64 << 10);
        held[k] = {m.allocate(sz).value(), sz};
      }
      row.baseline_runs.push_back(b::seconds_since(t0) * 1e9 / static_cast<double>(n));
    }
    b::report(row);
  }
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  std::uint64_t runs = o.runs, depth = o.depth;
  bool no_fio = false;
  mc::config::option_set set("tier_bench",
                             "SSD tier put/get vs fio on the same directory; DRAM allocator rates.\n"
                             "Prints a table and one JSON line per result.");
  set.add("runs", &runs, "repetitions per case", 1, 1000)
      .add("depth", &depth, "concurrent operations (and fio iodepth)", 1, 1024)
      .add("mib", &o.mib, "MiB written/read in the 1 MiB cases", 1, 1 << 20)
      .add("dir", &o.dir, "directory for the SSD tier and fio files")
      .add("no-fio", &no_fio, "skip the fio baseline")
      .add("scaling-max", &o.scaling_max, "live allocations of the largest allocator scaling point", 1024,
           std::uint64_t{100} << 20);
  mc::bench::parse_options(set, argc, argv);
  o.runs = static_cast<unsigned>(runs);
  o.depth = static_cast<unsigned>(depth);
  o.fio = !no_fio;
  std::printf("%-34s %-12s %12s %-7s  %-14s %12s\n", "case", "metric", "value", "unit", "baseline", "value");
  bench_ssd(o);
  bench_dram(o);
  bench_dram_put_get(o);
  bench_allocator_scaling(o);
  return 0;
}
