#pragma once
// Blocking POSIX socket helpers for bad-input tests (run on the test's main
// thread, never on a runtime thread). Every wait has a deadline.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

namespace mc::rpc::test {

/// Connected TCP socket to 127.0.0.1:port, or -1.
inline int raw_connect(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool raw_send(int fd, const void* p, std::size_t n) {
  auto* b = static_cast<const char*>(p);
  while (n > 0) {
    auto k = ::send(fd, b, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    b += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

/// Reads exactly n bytes into p within `timeout`. True if all arrived; false
/// on timeout, EOF or a socket error.
inline bool raw_read(int fd, std::uint8_t* p, std::size_t n, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (n > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pf{fd, POLLIN, 0};
    int r = ::poll(&pf, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;  // a signal, not the peer
    if (r <= 0) return false;
    auto k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

/// Reads (and discards) until the peer closes the connection (EOF or reset).
/// True if that happened before `timeout`.
inline bool raw_wait_closed(int fd, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    auto k = ::recv(fd, buf, sizeof buf, 0);
    if (k == 0) return true;
    if (k < 0) return errno == ECONNRESET || errno == EPIPE;
  }
}

/// Waits until at least `need` of `fds` were closed by the peer (or the
/// deadline); returns how many were.
inline std::size_t raw_count_closed(const std::vector<int>& fds, std::size_t need, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<bool> closed(fds.size(), false);
  std::size_t count = 0;
  char buf[256];
  while (count < need) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    std::vector<pollfd> ps;
    std::vector<std::size_t> idx;
    for (std::size_t i = 0; i < fds.size(); ++i)
      if (!closed[i]) {
        ps.push_back({fds[i], POLLIN, 0});
        idx.push_back(i);
      }
    int r = ::poll(ps.data(), ps.size(), static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    for (std::size_t k = 0; k < ps.size(); ++k) {
      if (!ps[k].revents) continue;
      auto n = ::recv(ps[k].fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        closed[idx[k]] = true;
        ++count;
      }
    }
  }
  return count;
}

/// capnp stream framing: segment count - 1, then segment sizes in words.
inline std::vector<std::uint8_t> frame_header(std::uint32_t segments, std::uint32_t first_words) {
  std::vector<std::uint8_t> h(8);
  std::uint32_t a = segments - 1;
  std::memcpy(h.data(), &a, 4);
  std::memcpy(h.data() + 4, &first_words, 4);
  return h;
}

/// Resident set size of this process in bytes.
inline std::size_t rss_bytes() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<std::size_t>(resident) * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace mc::rpc::test
