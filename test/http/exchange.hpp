#pragma once
// A blocking HTTP exchange with a server under test (from the test thread).
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>

namespace mc::test {

/// A connected socket to 127.0.0.1:port whose reads give up after
/// `recv_timeout_s` seconds without data. A signal delivered to this thread
/// (other parts of the process use them) interrupts blocking calls with
/// EINTR: every helper here retries, never reads it as the end.
inline int connect_to(std::uint16_t port, long recv_timeout_s = 5) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    // Interrupted: the connection completes in the background; wait for it.
    REQUIRE(errno == EINTR);
    pollfd p{fd, POLLOUT, 0};
    while (::poll(&p, 1, 5000) < 0) REQUIRE(errno == EINTR);
    int err = -1;
    socklen_t len = sizeof err;
    REQUIRE(::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0);
    REQUIRE(err == 0);
  }
  timeval tv{recv_timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

/// Sends all of `raw`.
inline void send_all(int fd, const std::string& raw) {
  std::size_t sent = 0;
  while (sent < raw.size()) {
    auto n = ::send(fd, raw.data() + sent, raw.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    REQUIRE(n > 0);
    sent += static_cast<std::size_t>(n);
  }
}

/// Everything until the server closes (or the read timeout passes), then
/// closes `fd`; `error` is the errno of a failed read (ECONNRESET for a
/// reset, EAGAIN for the timeout), 0 after a clean end of stream.
inline std::string read_to_end(int fd, int& error) {
  std::string out;
  char buf[4096];
  error = 0;
  for (;;) {
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = errno;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

/// Sends `raw` to 127.0.0.1:port and returns everything the server sends
/// until it closes (or 5 s without data pass).
inline std::string exchange(std::uint16_t port, const std::string& raw) {
  int fd = connect_to(port);
  send_all(fd, raw);
  int error = 0;
  return read_to_end(fd, error);
}

}  // namespace mc::test
