#pragma once
// Baselines of inference_bench (see bench/README.md for why each is fair):
//   pump   a raw TCP pump: N streams over 127.0.0.1 to a forked peer process,
//          a batch's bytes split into N disjoint ranges of one buffer, one
//          ack per stream and batch, no protocol beyond a 16-byte header;
//   copy   memcpy of the same pieces over disjoint ranges, one range per thread;
//   cma    the kernel's cross-process copy of the same pieces: process_vm_readv
//          from a child process's own huge-page buffer laid out like the
//          source, over disjoint ranges, one range per thread (what a
//          same-host transport built on process_vm_* can reach);
//   redis  libhiredis against a redis-server we start: pipelined SET / GET of
//          the same keys and bytes, the batch split over N connections.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

namespace mc::bench::base {

/// The pieces of one value, in order (one piece = a contiguous value).
using pieces = std::vector<std::span<std::byte>>;

inline std::size_t total_size(const pieces& p) {
  std::size_t n = 0;
  for (auto& s : p) n += s.size();
  return n;
}

// ---------------------------------------------------------------- raw TCP pump

inline bool send_all(int fd, const void* p, std::size_t n) {
  auto* c = static_cast<const char*>(p);
  while (n > 0) {
    auto k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    c += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

inline bool recv_all(int fd, void* p, std::size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    auto k = ::recv(fd, c, n, 0);
    if (k <= 0) return false;
    c += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

/// The pump peer's side of one connection. Request: {u64 op, u64 bytes};
/// op 0: the client sends `bytes`, we ack with one byte; op 1: we send
/// `bytes`, the client acks. Our buffer is as large as the biggest share asked
/// for (capped at 256 MiB: requests above it are refused by closing).
inline void pump_serve(int fd) {
  std::vector<char> buf;
  for (;;) {
    std::uint64_t req[2];
    if (!recv_all(fd, req, sizeof req) || req[0] > 1 || req[1] > (std::uint64_t{256} << 20)) break;
    if (buf.size() < req[1]) buf.resize(req[1]);
    char ack = 1;
    if (req[0] == 0) {
      if (!recv_all(fd, buf.data(), req[1]) || !send_all(fd, &ack, 1)) break;
    } else {
      if (!send_all(fd, buf.data(), req[1]) || !recv_all(fd, &ack, 1)) break;
    }
  }
  ::close(fd);
}

/// Runs in a forked child (before the parent starts any thread): listens on
/// an ephemeral 127.0.0.1 port, writes it as text to `out_fd`, serves until
/// `in_fd` reaches EOF (the parent closed it or died), then exits.
[[noreturn]] inline void pump_peer_main(int out_fd, int in_fd) {
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(lfd, 64) != 0) _exit(1);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &alen);
  std::string port = std::to_string(ntohs(a.sin_port)) + "\n";
  if (::write(out_fd, port.data(), port.size()) != static_cast<ssize_t>(port.size())) _exit(1);
  std::thread([lfd] {
    for (;;) {
      int c = ::accept(lfd, nullptr, nullptr);
      if (c < 0) return;
      int one = 1;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::thread(pump_serve, c).detach();
    }
  }).detach();
  char c;
  while (::read(in_fd, &c, 1) > 0) {}
  std::_Exit(0);  // serving threads may still be blocked; nothing to flush
}

/// Forks the pump peer (before any thread exists); returns its PID, its
/// port, and the pipe end whose closing stops it.
inline pid_t start_pump_peer(std::uint16_t& port, int& keep_fd) {
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    close(up[0]);
    close(down[1]);
    pump_peer_main(up[1], down[0]);
  }
  close(up[1]);
  close(down[0]);
  keep_fd = down[1];
  char line[32] = {};
  std::size_t n = 0;
  while (n + 1 < sizeof line && read(up[0], line + n, 1) == 1 && line[n] != '\n') ++n;
  close(up[0]);
  port = static_cast<std::uint16_t>(std::atoi(line));
  return port == 0 ? -1 : pid;
}

/// This process's side: `streams` connections to the pump peer.
class pump {
 public:
  pump(std::uint16_t port, std::size_t streams) {
    for (std::size_t i = 0; i < streams; ++i) {
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(port);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        throw std::runtime_error("pump: cannot connect to the peer");
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      fds_.push_back(fd);
    }
  }
  ~pump() {
    for (int fd : fds_) ::close(fd);
  }
  pump(const pump&) = delete;
  pump& operator=(const pump&) = delete;

  std::size_t streams() const { return fds_.size(); }

  /// One batch: `buf` split into streams() disjoint ranges, each moved over
  /// its own connection (sent when `send`, else received into it), one ack
  /// per stream. Throws on a connection error.
  void batch(bool send, std::span<std::byte> buf) {
    std::size_t n = fds_.size(), share = buf.size() / n;
    std::vector<std::thread> ts;
    std::vector<char> ok(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
      std::size_t off = i * share, len = i + 1 == n ? buf.size() - off : share;
      ts.emplace_back([&, i, off, len] {
        std::uint64_t req[2] = {send ? 0u : 1u, len};
        char ack = 1;
        int fd = fds_[i];
        ok[i] = send_all(fd, req, sizeof req) && (send ? send_all(fd, buf.data() + off, len) && recv_all(fd, &ack, 1)
                                                       : recv_all(fd, buf.data() + off, len) && send_all(fd, &ack, 1));
      });
    }
    for (auto& t : ts) t.join();
    if (std::count(ok.begin(), ok.end(), 0) != 0) throw std::runtime_error("pump: a stream failed");
  }

 private:
  std::vector<int> fds_;
};

// ---------------------------------------------------------------- memcpy

/// Copies dst[i] <- src[i] (same sizes), the items split into `threads`
/// disjoint contiguous ranges, one thread each.
inline void copy_batch(const std::vector<std::span<std::byte>>& dst, const std::vector<std::span<std::byte>>& src,
                       std::size_t threads) {
  std::size_t n = dst.size(), per = (n + threads - 1) / threads;
  std::vector<std::thread> ts;
  for (std::size_t t = 0; t < threads && t * per < n; ++t)
    ts.emplace_back([&, t] {
      for (std::size_t i = t * per; i < std::min(n, (t + 1) * per); ++i)
        std::memcpy(dst[i].data(), src[i].data(), dst[i].size());
    });
  for (auto& t : ts) t.join();
}

// ---------------------------------------------------------------- process_vm_* ceiling

/// A forked child that maps its own buffer of `size` bytes (fresh anonymous
/// memory, 2 MiB-aligned, advised MADV_HUGEPAGE when `huge_pages`, and
/// touched, like ours: never shared copy-on-write with this process), fills nothing else and waits
/// until destroyed. `skip` (e.g. a destination) is left out of the child
/// (MADV_DONTFORK). The child makes system calls only (mmap, madvise, write,
/// read, _exit): safe after fork() from a threaded process. Keep one alive
/// only while measuring: meanwhile the rest of our memory is shared
/// copy-on-write with it.
class cma_peer {
 public:
  cma_peer(std::size_t size, std::span<std::byte> skip, bool huge_pages) : skip_(skip) {
    if (::madvise(skip_.data(), skip_.size(), MADV_DONTFORK) != 0) throw std::runtime_error("cma: madvise");
    int up[2], down[2];
    if (::pipe2(up, O_CLOEXEC) != 0 || ::pipe2(down, O_CLOEXEC) != 0) throw std::runtime_error("cma: pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::close(up[0]);
      ::close(down[1]);  // else our own copy keeps the parent's end open: no EOF
      const std::size_t align = 2u << 20;
      void* m = ::mmap(nullptr, size + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      std::uintptr_t base = 0;
      if (m != MAP_FAILED) {
        base = (reinterpret_cast<std::uintptr_t>(m) + align - 1) & ~(align - 1);
        if (huge_pages) ::madvise(reinterpret_cast<void*>(base), size, MADV_HUGEPAGE);
        for (std::size_t i = 0; i < size; i += 4096) reinterpret_cast<volatile char*>(base)[i] = 1;
      }
      if (::write(up[1], &base, sizeof base) != sizeof base) ::_exit(1);
      char c;
      while (::read(down[0], &c, 1) > 0) {}
      ::_exit(0);
    }
    ::close(up[1]);
    ::close(down[0]);
    keep_ = down[1];
    if (pid_ < 0) {
      ::close(up[0]);
      ::close(keep_);
      throw std::runtime_error("cma: fork");
    }
    std::uintptr_t base = 0;
    if (::read(up[0], &base, sizeof base) != sizeof base || base == 0) {
      ::close(up[0]);
      throw std::runtime_error("cma: the child could not map its buffer");
    }
    ::close(up[0]);
    base_ = base;
  }
  ~cma_peer() {
    ::close(keep_);
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
    ::madvise(skip_.data(), skip_.size(), MADV_DOFORK);
  }
  cma_peer(const cma_peer&) = delete;
  cma_peer& operator=(const cma_peer&) = delete;

  /// dst[i] <- the child's buffer at src[i]'s offset from `src_base` (the
  /// same layout as src), with process_vm_readv, the items split into
  /// `threads` disjoint contiguous ranges, one thread each, up to 1 MiB and
  /// 1024 pieces per call (as our same-host transport copies). Throws when
  /// the kernel refuses or copies short.
  void copy_batch(const std::vector<std::span<std::byte>>& dst, const std::vector<std::span<std::byte>>& src,
                  const std::byte* src_base, std::size_t threads) const {
    std::size_t n = dst.size(), per = (n + threads - 1) / threads;
    std::vector<std::thread> ts;
    std::vector<char> ok(threads, 1);
    for (std::size_t t = 0; t < threads && t * per < n; ++t)
      ts.emplace_back([&, t] {
        std::vector<iovec> l, r;
        const std::size_t end = std::min(n, (t + 1) * per);
        for (std::size_t i = t * per; i < end;) {
          l.clear();
          r.clear();
          std::size_t bytes = 0;
          for (; i < end && l.size() < 1024 && (l.empty() || bytes + dst[i].size() <= (1u << 20)); ++i) {
            l.push_back({dst[i].data(), dst[i].size()});
            r.push_back({reinterpret_cast<void*>(base_ + static_cast<std::uintptr_t>(src[i].data() - src_base)),
                         src[i].size()});
            bytes += dst[i].size();
          }
          if (::process_vm_readv(pid_, l.data(), l.size(), r.data(), r.size(), 0) != static_cast<ssize_t>(bytes))
            ok[t] = 0;
        }
      });
    for (auto& t : ts) t.join();
    if (std::count(ok.begin(), ok.end(), 0) != 0) throw std::runtime_error("cma: process_vm_readv failed or short");
  }

 private:
  std::span<std::byte> skip_;
  pid_t pid_ = -1;
  int keep_ = -1;
  std::uintptr_t base_ = 0;
};

// ---------------------------------------------------------------- Redis

/// One hiredis connection (TCP when `unix_path` is empty).
class redis {
 public:
  redis(const std::string& host, int port, const std::string& unix_path) {
    ctx_ = unix_path.empty() ? redisConnect(host.c_str(), port) : redisConnectUnix(unix_path.c_str());
    if (ctx_ == nullptr || ctx_->err) {
      std::string why = ctx_ ? ctx_->errstr : "out of memory";
      if (ctx_) redisFree(ctx_);
      throw std::runtime_error("redis: cannot connect: " + why);
    }
    // The strongest hiredis client we could make for big values: the reader
    // keeps its input buffer between replies (maxbuf 0: by default it frees
    // a buffer over 16 KiB once drained and regrows it for the next 1 MiB
    // reply), and a GET's bytes go from that buffer straight into the
    // destination pieces through our own reply functions (no reply object
    // allocated and copied per GET). bench/README.md, "Baseline changes".
    ctx_->reader->maxbuf = 0;
    ctx_->reader->fn = &reply_fns;
    ctx_->reader->privdata = this;
  }
  ~redis() { redisFree(ctx_); }
  redis(const redis&) = delete;
  redis& operator=(const redis&) = delete;

  /// Bytes of values one pipeline window carries at most (at least one
  /// command). Redis 7.0 with deeper pipelines of big values is far slower
  /// on this host (redis-benchmark -c 2 -d 1MiB: SET 4.9k/s at -P 1, 3.4k/s
  /// at -P 4, 0.27k/s at -P 16), so the baseline pipelines small values
  /// whole and big ones a window at a time: the strongest Redis we found.
  static constexpr std::size_t pipeline_bytes = 1u << 20;

  /// Pipelined SET of keys[i] = values[i], in windows of at most
  /// pipeline_bytes: each window's commands are written with writev, the
  /// values' pieces straight from where they are (the RESP argument is one
  /// contiguous string on the wire, not in our memory). Throws on any error.
  void set(std::span<const std::string> keys, std::span<const pieces> values) {
    for (std::size_t b = 0; b < keys.size();) {
      auto e = window_end(b, values);
      set_window(keys.subspan(b, e - b), values.subspan(b, e - b));
      b = e;
    }
  }

  /// Pipelined GET of keys into dsts (scattered over the pieces), in windows
  /// of at most pipeline_bytes. Throws on a missing key or a size other than
  /// the pieces' total.
  void get(std::span<const std::string> keys, std::span<const pieces> dsts) {
    for (std::size_t b = 0; b < keys.size();) {
      auto e = window_end(b, dsts);
      get_window(keys.subspan(b, e - b), dsts.subspan(b, e - b));
      b = e;
    }
  }

 private:
  static std::size_t window_end(std::size_t b, std::span<const pieces> values) {
    std::size_t e = b, bytes = 0;
    while (e < values.size() && (e == b || bytes + total_size(values[e]) <= pipeline_bytes))
      bytes += total_size(values[e++]);
    return e;
  }

  void set_window(std::span<const std::string> keys, std::span<const pieces> values) {
    head_.clear();
    marks_.clear();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      marks_.push_back(head_.size());
      head_ += "*3\r\n$3\r\nSET\r\n$" + std::to_string(keys[i].size()) + "\r\n";
      head_ += keys[i];
      head_ += "\r\n$" + std::to_string(total_size(values[i])) + "\r\n";
    }
    marks_.push_back(head_.size());
    iov_.clear();
    for (std::size_t i = 0; i < keys.size(); ++i) {  // head_ no longer grows: its pointers stay valid
      iov_.push_back({head_.data() + marks_[i], marks_[i + 1] - marks_[i]});
      for (auto& p : values[i])
        if (!p.empty()) iov_.push_back({const_cast<std::byte*>(p.data()), p.size()});
      iov_.push_back({const_cast<char*>(crlf), 2});
    }
    write_all();
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (reply().type != REDIS_REPLY_STATUS) throw std::runtime_error("redis: SET " + keys[i] + " failed");
  }

  void get_window(std::span<const std::string> keys, std::span<const pieces> dsts) {
    head_.clear();
    for (auto& k : keys) {
      head_ += "*2\r\n$3\r\nGET\r\n$" + std::to_string(k.size()) + "\r\n";
      head_ += k;
      head_ += "\r\n";
    }
    iov_.assign(1, {head_.data(), head_.size()});
    write_all();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      dst_ = &dsts[i];
      auto& r = reply();
      dst_ = nullptr;
      if (r.type != REDIS_REPLY_STRING || !r.placed)
        throw std::runtime_error("redis: GET " + keys[i] + ": missing or wrong size");
    }
  }

  /// The one reply being read (replies are read one at a time): its type,
  /// whether a string reply was scattered into dst_ (its size was the
  /// pieces' total), and the text of a status or error reply.
  struct reply_state {
    int type = 0;
    bool placed = false;
    std::string text;
  };

  static void* on_string(const redisReadTask* t, char* str, std::size_t len) {
    auto* self = static_cast<redis*>(t->privdata);
    auto& r = *static_cast<reply_state*>(on_other(t));
    if (t->type != REDIS_REPLY_STRING) {
      r.text.assign(str, len);
    } else if (self->dst_ != nullptr && len == total_size(*self->dst_)) {
      std::size_t off = 0;
      for (auto& p : *self->dst_) {
        std::memcpy(p.data(), str + off, p.size());
        off += p.size();
      }
      r.placed = true;
    }
    return &r;
  }
  static void* on_other(const redisReadTask* t) {
    auto& r = static_cast<redis*>(t->privdata)->reply_;
    r.type = t->type;
    r.placed = false;
    r.text.clear();
    return &r;
  }
  static void* on_array(const redisReadTask* t, int) { return on_other(t); }
  static void* on_integer(const redisReadTask* t, long long) { return on_other(t); }
  static void on_free(void*) {}  // the reply is a member, reused
  static inline redisReplyObjectFunctions reply_fns{on_string, on_array, on_integer, on_other, on_free};

  /// Writes every byte iov_ describes to the connection (blocking, as
  /// hiredis's own blocking writes), IOV_MAX entries per system call.
  void write_all() {
    std::size_t i = 0;
    while (i < iov_.size()) {
      const int n = static_cast<int>(std::min<std::size_t>(iov_.size() - i, 1024));
      ssize_t w = ::writev(ctx_->fd, iov_.data() + i, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        throw std::runtime_error(std::string("redis: write failed: ") + std::strerror(errno));
      }
      auto left = static_cast<std::size_t>(w);
      while (left > 0 && i < iov_.size()) {
        if (left >= iov_[i].iov_len) {
          left -= iov_[i].iov_len;
          ++i;
        } else {
          iov_[i].iov_base = static_cast<char*>(iov_[i].iov_base) + left;
          iov_[i].iov_len -= left;
          left = 0;
        }
      }
      while (i < iov_.size() && iov_[i].iov_len == 0) ++i;
    }
  }

  reply_state& reply() {
    void* r = nullptr;
    if (redisGetReply(ctx_, &r) != REDIS_OK || r == nullptr)
      throw std::runtime_error(std::string("redis: ") + ctx_->errstr);
    auto& rr = *static_cast<reply_state*>(r);
    if (rr.type == REDIS_REPLY_ERROR) throw std::runtime_error("redis: " + rr.text);
    return rr;
  }
  redisContext* ctx_ = nullptr;
  const pieces* dst_ = nullptr;  // where the GET reply being read goes
  reply_state reply_;
  /// One window's commands as RESP text (a SET's value bytes are not copied
  /// in: the pieces are written from where they are), where each command's
  /// text starts, and what one writev sends. Kept across windows.
  std::string head_;
  std::vector<std::size_t> marks_;
  std::vector<iovec> iov_;
  static constexpr const char* crlf = "\r\n";
};

/// A batch over several connections: keys split into conns.size() contiguous
/// ranges, each pipelined on its own connection from its own thread.
inline void redis_batch(std::vector<redis*>& conns, bool put, std::span<const std::string> keys,
                        std::span<const pieces> values) {
  if (conns.size() == 1) {  // one connection: this thread, as a single-connection client would
    if (put)
      conns[0]->set(keys, values);
    else
      conns[0]->get(keys, values);
    return;
  }
  std::size_t n = keys.size(), per = (n + conns.size() - 1) / conns.size();
  std::vector<std::thread> ts;
  std::vector<std::string> errors(conns.size());
  for (std::size_t c = 0; c < conns.size() && c * per < n; ++c)
    ts.emplace_back([&, c] {
      std::size_t b = c * per, e = std::min(n, b + per);
      try {
        if (put)
          conns[c]->set(keys.subspan(b, e - b), values.subspan(b, e - b));
        else
          conns[c]->get(keys.subspan(b, e - b), values.subspan(b, e - b));
      } catch (const std::exception& x) {
        errors[c] = x.what();
      }
    });
  for (auto& t : ts) t.join();
  for (auto& e : errors)
    if (!e.empty()) throw std::runtime_error(e);
}

}  // namespace mc::bench::base
