#pragma once
// Small pieces the store tests build their fixtures from: a DRAM-only tiered
// backend, loopback TCP engine options, and a bound listening socket the test
// owns. Each REQUIREs what it needs (doctest): a broken setup fails the test.
#include "mc/runtime/runtime.hpp"
#include "mc/tiered/tiered_backend.hpp"
#include "mc/transfer/engine.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <string>

namespace mc::test {

/// A tiered backend with one DRAM tier of `capacity` (e.g. "16MiB") on `rt`.
/// Never null: a parse or create failure fails the test.
inline std::unique_ptr<mc::tiered::tiered_backend> dram_backend(mc::runtime::runtime& rt, const std::string& capacity) {
  auto tiers =
      mc::tiered::parse_tiers_json(R"({"tiers":[{"type":"DRAM","capacity":")" + capacity + R"(","priority":1}]})");
  REQUIRE(tiers.has_value());
  auto b = mc::tiered::tiered_backend::create(rt, *tiers);
  REQUIRE(b.has_value());
  return std::move(*b);
}

/// Engine options for a transfer engine on 127.0.0.1 forced to TCP.
inline mc::transfer::engine_options loopback_tcp_engine_options() {
  mc::transfer::engine_options eo;
  eo.bind_host = "127.0.0.1";
  eo.force = mc::transfer::transport_kind::tcp;
  return eo;
}

/// A listening socket and the port it is bound to; the owner closes `fd`.
struct bound_listener {
  int fd = -1;
  std::uint16_t port = 0;
};

/// A listening TCP socket on ip:want_port (0 = any free port) with `backlog`;
/// `type_flags` are or-ed into SOCK_STREAM (e.g. SOCK_NONBLOCK). Any failure
/// fails the test.
inline bound_listener listen_tcp(const char* ip, std::uint16_t want_port, int backlog, int type_flags = 0) {
  bound_listener l;
  l.fd = ::socket(AF_INET, SOCK_STREAM | type_flags, 0);
  REQUIRE(l.fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(want_port);
  REQUIRE(::inet_pton(AF_INET, ip, &a.sin_addr) == 1);
  REQUIRE(::bind(l.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(l.fd, backlog) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(l.fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  l.port = ntohs(a.sin_port);
  return l;
}

}  // namespace mc::test
