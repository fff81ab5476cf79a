// Runtime benchmark: async mutex costs and O_DIRECT file throughput on the
// runtime's io_uring file I/O, with fio (io_uring, direct=1) as the baseline.
#include "mc/runtime/async_mutex.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/runtime/uring_file.hpp"
#include "mc/runtime/when_all.hpp"

#include "bench_options.hpp"
#include "bench_util.hpp"
#include "fio.hpp"

#include <boost/asio/post.hpp>
#include <boost/json/src.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>

namespace {

using clock_type = std::chrono::steady_clock;
namespace rt = mc::runtime;
namespace b = mc::bench;

struct options {
  std::uint64_t runs = 3;
  std::size_t file_mib = 512;
  std::string dir = "/var/tmp";
  bool fio = true;
  bool locks = true;
  bool files = true;
};

// ---- locks -----------------------------------------------------------------

mc::task<double> uncontended(bool shared, std::size_t n) {
  mc::async_shared_mutex m;
  auto t0 = clock_type::now();
  for (std::size_t i = 0; i < n; ++i) {
    if (shared) {
      auto g = co_await m.lock_shared();
      g->unlock();
    } else {
      auto g = co_await m.lock();
      g->unlock();
    }
  }
  co_return b::seconds_since(t0) * 1e9 / static_cast<double>(n);
}

// Holds the lock across a yield so the other thread's contender really waits:
// every acquisition after the first is a cross-thread hand-off.
mc::task<void> contender(mc::async_mutex& m, std::size_t n, std::atomic<std::size_t>& counter) {
  auto ex = co_await boost::asio::this_coro::executor;
  for (std::size_t i = 0; i < n; ++i) {
    auto g = co_await m.lock();
    counter.fetch_add(1, std::memory_order_relaxed);
    co_await boost::asio::post(ex, boost::asio::use_awaitable);
  }
}

double contended_rate(rt::runtime& r, std::size_t n) {
  mc::async_mutex m;
  std::atomic<std::size_t> counter{0};
  std::promise<void> done1;
  auto t0 = clock_type::now();
  boost::asio::co_spawn(r.executor(1), contender(m, n, counter), [&](std::exception_ptr) { done1.set_value(); });
  r.block_on(contender(m, n, counter), 0);
  done1.get_future().wait();
  return static_cast<double>(counter.load()) / b::seconds_since(t0);
}

void bench_locks(rt::runtime& r, const options& o) {
  constexpr std::size_t n = 1'000'000;
  b::row ex{"runtime", "async_mutex_uncontended", "latency", "ns/op", {}, "", {}};
  b::row sh{"runtime", "async_shared_mutex_uncontended_shared", "latency", "ns/op", {}, "", {}};
  b::row ct{"runtime", "async_mutex_handoff_2_threads", "throughput", "ops/s", {}, "", {}};
  for (std::uint64_t i = 0; i < o.runs; ++i) {
    ex.runs.push_back(r.block_on(uncontended(false, n)));
    sh.runs.push_back(r.block_on(uncontended(true, n)));
    ct.runs.push_back(contended_rate(r, 100'000));
  }
  b::report(ex);
  b::report(sh);
  b::report(ct);
}

// ---- files -----------------------------------------------------------------

constexpr std::size_t block = 1 << 20;

mc::task<mc::result<void>> io_worker(const rt::uring_file& f, bool write, std::span<std::byte> buf,
                                     std::atomic<std::uint64_t>& next, std::uint64_t end) {
  for (;;) {
    auto off = next.fetch_add(block);
    if (off >= end) co_return mc::result<void>{};
    auto res = write ? co_await f.write_at(off, buf) : co_await f.read_at(off, buf);
    if (!res) co_return res.error();
  }
}

mc::task<mc::result<double>> sequential(const rt::uring_file& f, bool write, unsigned depth, std::byte* bufs,
                                        std::uint64_t size) {
  std::atomic<std::uint64_t> next{0};
  std::vector<mc::task<mc::result<void>>> workers;
  for (unsigned i = 0; i < depth; ++i) workers.push_back(io_worker(f, write, {bufs + i * block, block}, next, size));
  auto t0 = clock_type::now();
  for (auto& x : co_await mc::when_all(std::move(workers)))
    if (!x) co_return x.error();
  co_return static_cast<double>(size) / (1024.0 * 1024.0) / b::seconds_since(t0);
}

int bench_files(rt::runtime& r, const options& o) {
  const std::string path = o.dir + "/mc-runtime-bench-" + std::to_string(::getpid());
  const std::uint64_t size = std::uint64_t(o.file_mib) << 20;
  auto f = rt::uring_file::open(path, rt::file_mode::create_truncate);
  if (!f) {
    std::fprintf(stderr, "cannot open %s: %s\n", path.c_str(), rt::last_io_error().message.c_str());
    return 1;
  }
  constexpr unsigned max_depth = 8;
  void* mem = ::mmap(nullptr, max_depth * block, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  auto* bufs = static_cast<std::byte*>(mem);
  for (std::size_t i = 0; i < max_depth * block; ++i) bufs[i] = std::byte(i * 131 + 7);
  auto reg = rt::register_fixed_buffer({bufs, max_depth * block});
  if (!reg) std::fprintf(stderr, "note: fixed buffers unavailable (%s)\n", rt::last_io_error().message.c_str());
  // Lay the file out once so every case overwrites allocated blocks.
  if (auto w = r.block_on(sequential(*f, true, max_depth, bufs, size)); !w) {
    std::fprintf(stderr, "write failed: %s %s\n", w.error().message().c_str(), rt::last_io_error().message.c_str());
    return 1;
  }
  int rc = 0;
  for (bool write : {true, false}) {
    for (unsigned depth : {1u, 8u}) {
      std::string name = std::string("file_") + (write ? "write" : "read") + "_1MiB_qd" + std::to_string(depth);
      b::row row{"runtime", name, "throughput", "MiB/s", {}, o.fio ? "fio" : "", {}};
      for (std::uint64_t i = 0; i < o.runs; ++i) {
        auto v = r.block_on(sequential(*f, write, depth, bufs, size));
        if (!v) {
          std::fprintf(stderr, "%s failed: %s\n", name.c_str(), v.error().message().c_str());
          rc = 1;
          break;
        }
        row.runs.push_back(*v);
        if (o.fio) {
          auto fr = b::run_fio({path, write ? "write" : "read", "1M", std::to_string(o.file_mib) + "M", depth, ""});
          if (fr) row.baseline_runs.push_back(fr->mib_s);
        }
      }
      b::report(row);
    }
  }
  reg = {};
  ::munmap(mem, max_depth * block);
  f->close();
  ::unlink(path.c_str());
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  bool no_fio = false, only_locks = false, only_files = false;
  mc::config::option_set set(
      "runtime_bench",
      "Async mutex costs and O_DIRECT file throughput on the runtime's io_uring file I/O,\n"
      "with fio (io_uring, direct=1) as the baseline. Prints a table and one JSON line per result.");
  set.add("runs", &o.runs, "repetitions per case", 1, 1000)
      .add("file-mib", &o.file_mib, "file size (MiB) of the sequential I/O cases", 1, 1 << 20)
      .add("dir", &o.dir, "directory for the test file, must support O_DIRECT")
      .add("no-fio", &no_fio, "skip the fio baseline")
      .add("only-locks", &only_locks, "only the mutex cases")
      .add("only-files", &only_files, "only the file cases");
  mc::bench::parse_options(set, argc, argv);
  o.fio = !no_fio;
  o.files = !only_locks;
  o.locks = !only_files;
  rt::runtime r(2);
  r.start();
  std::printf("%-34s %-12s %12s %-7s  %-14s %12s\n", "case", "metric", "value", "unit", "baseline", "value");
  if (o.locks) bench_locks(r, o);
  int rc = o.files ? bench_files(r, o) : 0;
  r.stop();
  return rc;
}
