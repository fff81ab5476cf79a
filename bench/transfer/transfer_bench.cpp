// TransferEngine throughput between two processes (this one and a forked
// target), against ceilings measured in the same run:
//   tcp_*  vs a raw TCP pump: plain blocking sockets between the same two
//          processes, as many streams per initiator thread as the engine has
//          connections (--conns, at most one per request of the batch), each
//          stream moving its share of the batch straight from / into the same
//          256 MiB regions the engine uses, at rotating offsets (the same
//          memory footprint: no cache-hot scratch buffer), then a 1-byte ack
//          per share (the engine completes a batch when every request is
//          acknowledged);
//   shm_*  vs memcpy of the same sizes, each thread over its own disjoint
//          range of the regions at rotating offsets.
// Run without arguments for the short default matrix; --help for options.
#include "bench_options.hpp"
#include "bench_util.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/transfer/engine.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace mc::transfer;
using clk = std::chrono::steady_clock;

namespace {

constexpr std::size_t region_size = 256u << 20;

struct config {
  std::vector<std::size_t> sizes{64u << 10, 1u << 20, 16u << 20};
  std::vector<std::size_t> batches{1, 16, 128};
  std::vector<std::size_t> threads{1, 2};
  std::vector<std::string> ops{"read", "write"};
  std::vector<std::string> transports{"tcp", "shm"};
  double seconds = 0.3;                      // per run (shorter runs spread by more than 15 %)
  std::size_t big_batch_bytes = 512u << 20;  // batches at least this big run once (keeps the default < 1 min)
  int runs = 3;
  std::size_t slice = 1u << 20;
  std::size_t conns = 4;
  std::string protocol = "tcp";
  std::string device;  // --device (rdma)
  int gid_index = -1;  // --gid-index (rdma)
};

// The RDMA settings of both processes (set before the fork).
std::string g_protocol = "tcp", g_device;
int g_gid_index = -1;
bool g_huge_pages = true;  // both processes' regions (mc::bench::page_buffer)

void apply_protocol(engine_options& o) {
  o.protocol = g_protocol;
  if (!g_device.empty()) o.device_names = {g_device};
  o.gid_index = g_gid_index;
}

// ---- the target process ------------------------------------------------------

// The target's end of one pump stream: receives into (or sends from) its
// registered region at rotating offsets, starting at `start`.
void pump_serve(int fd, char* region, std::size_t start) {
  // Request: 16 bytes {u64 op (0 = client sends, 1 = client receives), u64 total}; then the
  // bytes; then a 1-byte ack from the receiver.
  std::size_t off = start % region_size;
  auto next = [&](std::uint64_t left) {
    if (off >= region_size) off = 0;
    const auto n = std::min<std::uint64_t>(left, region_size - off);
    char* p = region + off;
    return std::pair{p, n};
  };
  for (;;) {
    std::uint64_t req[2];
    if (::recv(fd, req, sizeof req, MSG_WAITALL) != sizeof req) break;
    std::uint64_t left = req[1];
    while (left > 0) {
      auto [p, want] = next(left);
      auto n = req[0] == 0 ? ::recv(fd, p, want, 0) : ::send(fd, p, want, MSG_NOSIGNAL);
      if (n <= 0) return;
      left -= static_cast<std::uint64_t>(n);
      off += static_cast<std::size_t>(n);
    }
    char ack = 1;
    if (req[0] == 0 ? ::send(fd, &ack, 1, MSG_NOSIGNAL) != 1 : ::recv(fd, &ack, 1, MSG_WAITALL) != 1) break;
  }
  ::close(fd);
}

int target_main(int out_fd, int in_fd) {
  mc::runtime::runtime rt(2);
  rt.start();
  engine_options o;
  o.bind_host = "127.0.0.1";
  apply_protocol(o);
  engine e(rt, o);
  if (!e.start()) return 1;
  mc::bench::page_buffer region(region_size, g_huge_pages);
  std::memset(region.data(), 1, region.size());
  auto reg = e.register_memory(region.data(), region.size());
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(lfd, 64) != 0) return 1;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &alen);
  auto d = reg->describe();
  char line[512];
  int n = std::snprintf(line, sizeof line, "%s %llu %llu %llu %u\n", d.endpoint.c_str(), (unsigned long long)d.address,
                        (unsigned long long)d.length, (unsigned long long)d.token, unsigned(ntohs(a.sin_port)));
  if (::write(out_fd, line, static_cast<std::size_t>(n)) != n) return 1;
  std::thread acceptor([lfd, base = region.chars()] {
    for (std::size_t conn = 0;; ++conn) {
      int c = ::accept(lfd, nullptr, nullptr);
      if (c < 0) return;
      int one = 1;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::thread(pump_serve, c, base, conn * (region_size / 8)).detach();
    }
  });
  char c;
  while (::read(in_fd, &c, 1) > 0) {}
  ::shutdown(lfd, SHUT_RDWR);
  ::close(lfd);
  acceptor.join();
  e.stop();
  std::_Exit(0);  // pump threads may still be blocked; nothing to flush
}

// ---- the initiator -----------------------------------------------------------

struct target_info {
  remote_buffer desc;
  std::uint16_t pump_port = 0;
};

/// Bytes per second moved by `threads` threads calling `body(t, stop_at)`
/// which returns the bytes it moved.
template <class F>
double measure(std::size_t threads, double seconds, F body) {
  std::vector<std::uint64_t> moved(threads, 0);
  auto t0 = clk::now();
  auto stop_at = t0 + std::chrono::duration_cast<clk::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> ts;
  for (std::size_t t = 0; t < threads; ++t) ts.emplace_back([&, t] { moved[t] = body(t, stop_at); });
  for (auto& t : ts) t.join();
  double el = mc::bench::seconds_since(t0);
  std::uint64_t total = 0;
  for (auto m : moved) total += m;
  return static_cast<double>(total) / el;
}

/// One pump stream: rounds of `requests` requests of `size` bytes (one
/// request header, the bytes from / into `local` at rotating offsets in
/// [lo, hi), one ack) until stop_at. Returns the bytes moved.
std::uint64_t pump_stream(std::uint16_t port, bool client_sends, std::size_t size, std::size_t requests, char* local,
                          std::size_t lo, std::size_t hi, clk::time_point stop_at) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return ::close(fd), 0;
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::uint64_t moved = 0;
  std::size_t off = lo;
  while (clk::now() < stop_at) {
    std::uint64_t req[2] = {client_sends ? 0u : 1u, static_cast<std::uint64_t>(size) * requests};
    if (::send(fd, req, sizeof req, MSG_NOSIGNAL) != sizeof req) break;
    for (std::size_t i = 0; i < requests; ++i) {
      if (off + size > hi) off = lo;
      std::size_t done = 0;
      while (done < size) {
        auto n = client_sends ? ::send(fd, local + off + done, size - done, MSG_NOSIGNAL)
                              : ::recv(fd, local + off + done, size - done, 0);
        if (n <= 0) return ::close(fd), moved;
        done += static_cast<std::size_t>(n);
      }
      off += size;
    }
    char ack = 1;
    if (client_sends ? ::recv(fd, &ack, 1, MSG_WAITALL) != 1 : ::send(fd, &ack, 1, MSG_NOSIGNAL) != 1) break;
    moved += req[1];
  }
  ::close(fd);
  return moved;
}

/// The pump baseline of one initiator thread: min(conns, batch) streams in
/// parallel, each with its share of the batch and its own slice of the
/// thread's range [lo, hi) of `local`.
std::uint64_t pump_thread(std::uint16_t port, bool client_sends, std::size_t size, std::size_t batch, std::size_t conns,
                          char* local, std::size_t lo, std::size_t hi, clk::time_point stop_at) {
  const std::size_t streams = std::max<std::size_t>(1, std::min(conns, batch));
  std::vector<std::uint64_t> moved(streams, 0);
  std::vector<std::thread> ts;
  const std::size_t span = (hi - lo) / streams;
  for (std::size_t k = 0; k < streams; ++k) {
    const std::size_t share = batch / streams + (k < batch % streams ? 1 : 0);
    // Each stream's range holds at least one request (ranges overlap when
    // the thread's range is smaller than streams x size).
    const std::size_t a = std::min(lo + k * span, hi - size), b = std::min(hi, std::max(a + size, lo + (k + 1) * span));
    ts.emplace_back(
        [&, k, share, a, b] { moved[k] = pump_stream(port, client_sends, size, share, local, a, b, stop_at); });
  }
  for (auto& t : ts) t.join();
  std::uint64_t total = 0;
  for (auto m : moved) total += m;
  return total;
}

/// memcpy of `batch` copies of `size` bytes per round, over the thread's own
/// range [lo, hi) of the two regions at rotating offsets.
std::uint64_t memcpy_loop(const char* src, char* dst, std::size_t size, std::size_t batch, std::size_t lo,
                          std::size_t hi, clk::time_point stop_at) {
  std::uint64_t moved = 0;
  std::size_t off = lo;
  while (clk::now() < stop_at) {
    for (std::size_t i = 0; i < batch; ++i) {
      if (off + size > hi) off = lo;
      std::memcpy(dst + off, src + off, size);
      off += size;
    }
    moved += size * batch;
  }
  return moved;
}

mc::task<std::uint64_t> engine_loop(engine* e, remote_buffer d, std::byte* local, bool write, std::size_t size,
                                    std::size_t batch, std::size_t thread, clk::time_point stop_at, int* errors) {
  std::uint64_t moved = 0;
  std::size_t off = (thread * region_size / 2) % (region_size - size + 1);
  while (clk::now() < stop_at) {
    std::vector<request> reqs;
    reqs.reserve(batch);
    for (std::size_t i = 0; i < batch; ++i) {
      if (off + size > region_size) off = 0;
      auto rb = d;
      rb.address += off;
      rb.length = size;
      reqs.push_back(write ? request::make_write(std::span<const std::byte>(local + off, size), rb)
                           : request::make_read(std::span<std::byte>(local + off, size), rb));
      off += size;
    }
    auto res = co_await e->batch(std::move(reqs), std::chrono::seconds(30));
    for (auto& r : res) {
      if (r)
        moved += size;
      else
        ++*errors;
    }
  }
  co_return moved;
}

}  // namespace

int main(int argc, char** argv) {
  config cfg;
  std::uint64_t runs = 3, big_batch_mib = 512;
  bool small_pages = false;
  mc::config::option_set set("transfer_bench",
                             "TransferEngine throughput between this process and a forked target, against ceilings\n"
                             "measured in the same run: tcp_* vs a raw TCP pump, shm_* vs memcpy. Prints a table and\n"
                             "one JSON line per case (bench_util format).");
  set.add_size_list("sizes", &cfg.sizes, "request sizes (comma list, units allowed: 64K,1M)")
      .add_list("batch", &cfg.batches, "requests per batch (comma list)", 1, 1 << 16)
      .add_list("threads", &cfg.threads, "initiator runtime threads (one raw TCP stream per thread)", 1, 64)
      .add_list("ops", &cfg.ops, "directions (read,write)")
      .add_list("transports", &cfg.transports, "tcp (vs raw TCP pump) and/or shm = same-host (vs memcpy)")
      .add("seconds", &cfg.seconds, "duration of one run (at least one batch)", 0, 3600)
      .add("runs", &runs, "repetitions (median reported)", 1, 1000)
      .add("big-batch-mib", &big_batch_mib, "batches at least this big (MiB) run once (0: repeat every case)", 0,
           1 << 20)
      .add_size("slice", &cfg.slice, "engine slice size")
      .add("conns", &cfg.conns, "engine connections per peer per thread", 1, 1024)
      .add("protocol", &cfg.protocol,
           "tcp, or rdma: both processes use the verbs transport and the transports list becomes 'rdma'")
      .add("device", &cfg.device, "RDMA device (empty: the first active one)")
      .add("small-pages", &small_pages,
           "both processes' regions in 4 KiB pages (default: 2 MiB-aligned and advised for transparent huge pages; "
           "cases are then named *_4kpages)")
      .add_custom("gid-index", "auto", "RoCE GID index (auto: chosen automatically)",
                  [&cfg](std::string_view v) -> std::optional<std::string> {
                    if (v == "auto") return cfg.gid_index = -1, std::nullopt;
                    std::uint64_t n = 0;
                    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
                    if (v.empty() || ec != std::errc{} || p != v.data() + v.size() || n > 255)
                      return "expected auto or an index in 0..255";
                    cfg.gid_index = static_cast<int>(n);
                    return std::nullopt;
                  });
  mc::bench::parse_options(set, argc, argv);
  cfg.runs = static_cast<int>(runs);
  if (cfg.slice < 4096) mc::bench::option_error("transfer_bench", "--slice must be at least 4096");
  cfg.big_batch_bytes = big_batch_mib ? big_batch_mib << 20 : SIZE_MAX;
  mc::bench::check_choices("transfer_bench", "ops", cfg.ops, {"read", "write"});
  mc::bench::check_choices("transfer_bench", "transports", cfg.transports, {"tcp", "shm"});
  if (cfg.protocol != "tcp" && cfg.protocol != "rdma") {
    std::fprintf(stderr, "transfer_bench: unknown protocol '%s' (tcp or rdma)\n", cfg.protocol.c_str());
    return 2;
  }
  g_protocol = cfg.protocol;
  g_device = cfg.device;
  g_gid_index = cfg.gid_index;
  g_huge_pages = !small_pages;
  if (cfg.protocol == "rdma") {
    cfg.transports = {"rdma"};
    try {  // fail early and clearly (no device) before forking the target
      mc::runtime::runtime probe_rt(1);
      engine_options o;
      apply_protocol(o);
      engine probe(probe_rt, o);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "transfer_bench: %s\n", ex.what());
      return 2;
    }
  }
  for (auto s : cfg.sizes)
    if (s == 0 || s > region_size) return std::fprintf(stderr, "size out of range\n"), 2;

  int to_parent[2], to_child[2];
  if (::pipe(to_parent) != 0 || ::pipe(to_child) != 0) return 1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(to_parent[0]);
    ::close(to_child[1]);
    return target_main(to_parent[1], to_child[0]);
  }
  ::close(to_parent[1]);
  ::close(to_child[0]);
  std::string line;
  char ch;
  while (::read(to_parent[0], &ch, 1) == 1 && ch != '\n') line.push_back(ch);
  target_info tgt;
  {
    std::istringstream in(line);
    unsigned port = 0;
    in >> tgt.desc.endpoint >> tgt.desc.address >> tgt.desc.length >> tgt.desc.token >> port;
    tgt.pump_port = static_cast<std::uint16_t>(port);
  }
  if (tgt.desc.endpoint.empty()) return std::fprintf(stderr, "target failed to start\n"), 1;

  mc::bench::page_buffer local(region_size, g_huge_pages), copy_dst(region_size, g_huge_pages);
  std::memset(local.data(), 2, local.size());
  std::memset(copy_dst.data(), 3, copy_dst.size());
  std::printf("# transfer_bench: target pid %d at %s; %d runs x %.2fs per case\n", int(pid), tgt.desc.endpoint.c_str(),
              cfg.runs, cfg.seconds);
  int errors = 0;
  for (auto& tr : cfg.transports) {
    for (auto threads : cfg.threads) {
      mc::runtime::runtime rt(threads);
      rt.start();
      engine_options o;
      o.bind_host = "127.0.0.1";
      o.slice_size = cfg.slice;
      o.connections_per_peer = cfg.conns;
      o.force = tr == "tcp" ? transport_kind::tcp : tr == "rdma" ? transport_kind::rdma : transport_kind::same_host;
      if (tr == "rdma") apply_protocol(o);
      engine e(rt, o);
      if (!e.start()) return 1;
      std::optional<region> local_reg;  // rdma: the local buffer is an MR (no bounce copies)
      if (tr == "rdma") {
        auto lr = e.register_memory(local.data(), local.size());
        if (!lr) return 1;
        local_reg = std::move(*lr);
      }
      for (auto size : cfg.sizes)
        for (auto batch : cfg.batches) {
          // A batch bigger than the region just wraps around (overlapping ranges are fine here).
          for (auto& op : cfg.ops) {
            bool write = op == "write";
            mc::bench::row r;
            r.bench = "transfer";
            char name[96];
            std::snprintf(name, sizeof name, "%s_%s_%zu%s_b%zu_t%zu%s", tr.c_str(), op.c_str(),
                          size >= (1u << 20) ? size >> 20 : size >> 10, size >= (1u << 20) ? "MiB" : "KiB", batch,
                          threads, g_huge_pages ? "" : "_4kpages");
            r.case_name = name;
            r.metric = "throughput";
            r.unit = "GB/s";
            r.baseline = tr == "shm" ? "memcpy" : "raw_tcp";
            const int runs = size * batch >= cfg.big_batch_bytes ? 1 : cfg.runs;
            for (int run = 0; run < runs; ++run) {
              r.runs.push_back(measure(threads, cfg.seconds,
                                       [&](std::size_t t, clk::time_point stop_at) {
                                         return rt.block_on(
                                             engine_loop(&e, tgt.desc, reinterpret_cast<std::byte*>(local.data()),
                                                         write, size, batch, t, stop_at, &errors),
                                             t);
                                       }) /
                               1e9);
              r.baseline_runs.push_back(
                  measure(threads, cfg.seconds,
                          [&](std::size_t t, clk::time_point stop_at) {
                            // Thread t's own range: disjoint from the others'.
                            // (Overlapping only when a request is larger than a share.)
                            const std::size_t part = region_size / threads;
                            const std::size_t lo = std::min(t * part, region_size - size);
                            const std::size_t hi = std::min(region_size, std::max(lo + size, (t + 1) * part));
                            if (tr != "shm")
                              return pump_thread(tgt.pump_port, write, size, batch, cfg.conns, local.chars(), lo, hi,
                                                 stop_at);
                            return memcpy_loop(local.chars(), copy_dst.chars(), size, batch, lo, hi, stop_at);
                          }) /
                  1e9);
            }
            mc::bench::report(r);
          }
        }
      local_reg.reset();
      e.stop();
    }
  }
  ::close(to_child[1]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (errors) std::fprintf(stderr, "transfer_bench: %d requests failed\n", errors);
  return errors ? 1 : 0;
}
