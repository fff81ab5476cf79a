#pragma once
// Internals of the same-host transport shared by its initiator
// (shm_transport.cpp) and its target (shm_server.cpp). Not a public header.
#include "engine_impl.hpp"
#include "io.hpp"
#include "wire.hpp"

#include <boost/asio/local/stream_protocol.hpp>

#include <sys/socket.h>

#include <chrono>
#include <optional>
#include <string>

namespace mc::transfer::detail::shm {

namespace asio = boost::asio;
using local_ep = asio::local::stream_protocol::endpoint;
using lease = conn_lease<unix_socket>;
inline constexpr auto no_socket_ttl = std::chrono::seconds(30);
inline constexpr auto refused_ttl = std::chrono::seconds(60);
/// Outstanding grants per control connection (the initiator's window).
inline constexpr std::size_t max_grants_per_conn = 64;

inline local_ep abstract_endpoint(const std::string& name) { return local_ep(std::string(1, '\0') + name); }

/// The other end's credentials as the kernel reports them, translated into
/// our namespaces (pid 0: the process is not visible in our pid namespace).
inline std::optional<ucred> peer_cred_of(unix_socket& s) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(s.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof cred)
    return std::nullopt;
  return cred;
}

inline void put_u64(std::byte* p, std::uint64_t v) noexcept { wire_le::store<std::uint64_t>(p, v); }
inline std::uint64_t get_u64(const std::byte* p) noexcept { return wire_le::load<std::uint64_t>(p); }

/// `tp` (steady_clock = CLOCK_MONOTONIC on Linux, made explicit) in ns.
inline std::uint64_t to_monotonic_ns(std::chrono::steady_clock::time_point tp) noexcept {
  const auto now = std::chrono::steady_clock::now();
  const auto mono = monotonic_ns();
  if (tp <= now) return mono;
  const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(tp - now).count();
  return static_cast<std::uint64_t>(left) > ~mono ? ~0ull : mono + static_cast<std::uint64_t>(left);
}

inline task<result<void>> send_header(unix_socket& s, const header& h) {
  header_bytes hb;
  encode(h, hb);
  co_return co_await send_all(s, hb.data(), hb.size());
}

inline task<result<header>> recv_header(unix_socket& s) {
  header_bytes hb;
  auto r = co_await recv_all(s, hb.data(), hb.size());
  if (!r) co_return r.error();
  co_return decode(hb);
}

}  // namespace mc::transfer::detail::shm
