#pragma once
// A raw client of an engine's TCP port for the transfer tests that speak the
// wire protocol by hand (hostile requests; not a public header).
#include "wire.hpp"

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mc::transfer::test {

namespace wire = mc::transfer::detail;

/// A blocking client socket to the engine's TCP port (plain POSIX: not on
/// any io_context), with a receive timeout so a wrong expectation fails
/// instead of hanging.
class raw_conn {
 public:
  explicit raw_conn(const std::string& endpoint) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(endpoint.substr(endpoint.rfind(':') + 1))));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~raw_conn() { ::close(fd_); }
  raw_conn(const raw_conn&) = delete;
  raw_conn& operator=(const raw_conn&) = delete;

  void send(const std::vector<std::byte>& b) {
    std::size_t at = 0;
    while (at < b.size()) {
      auto n = ::send(fd_, b.data() + at, b.size() - at, MSG_NOSIGNAL);
      REQUIRE(n > 0);
      at += static_cast<std::size_t>(n);
    }
  }
  /// Exactly n bytes; empty when the peer closed (or the timeout hit) first.
  std::vector<std::byte> recv(std::size_t n) {
    std::vector<std::byte> b(n);
    std::size_t at = 0;
    while (at < n) {
      auto k = ::recv(fd_, b.data() + at, n - at, 0);
      if (k <= 0) return {};
      at += static_cast<std::size_t>(k);
    }
    return b;
  }
  /// True when the peer closes the connection (EOF) before sending anything.
  bool closed_by_peer() {
    std::byte one;
    return ::recv(fd_, &one, 1, 0) == 0;
  }

 private:
  int fd_ = -1;
};

/// Reads one answer header; nullopt when the connection closed instead.
inline std::optional<wire::header> answer(raw_conn& c) {
  auto b = c.recv(wire::header_size);
  if (b.empty()) return std::nullopt;
  wire::header_bytes hb;
  std::copy(b.begin(), b.end(), hb.begin());
  auto h = wire::decode(hb);
  REQUIRE(h.has_value());
  return *h;
}

}  // namespace mc::transfer::test
