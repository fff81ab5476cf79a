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

/// Sends `raw` to 127.0.0.1:port and returns everything the server sends
/// until it closes (or 5 s without data pass).
inline std::string exchange(std::uint16_t port, const std::string& raw) {
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
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  // A signal delivered to this thread (other parts of the process use them)
  // interrupts blocking calls with EINTR: retry, never read it as the end.
  std::size_t sent = 0;
  while (sent < raw.size()) {
    auto n = ::send(fd, raw.data() + sent, raw.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    REQUIRE(n > 0);
    sent += static_cast<std::size_t>(n);
  }
  std::string out;
  char buf[4096];
  for (;;) {
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace mc::test
