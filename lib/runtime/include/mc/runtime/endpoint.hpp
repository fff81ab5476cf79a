#pragma once
/// `mc::endpoint`: a checked "host:port" (IPv6 in brackets), the one parser of
/// endpoints in the project. Every endpoint that comes from a user, a
/// configuration file, the master or a peer goes through endpoint::parse
/// before it is split, resolved or dialled.
///
/// Accepted text (parse):
///   `name:port`      a host name: letters, digits, '.', '-', '_' (not
///                    starting with '.' or '-'), e.g. "node-1.example:12345"
///   `1.2.3.4:port`   an IPv4 address (a host name as far as the syntax goes)
///   `[v6]:port`      an IPv6 address in brackets (what inet_pton accepts,
///                    e.g. "::1", "fd00::5", "::ffff:10.0.0.1"), optionally
///                    followed by "%zone" (zone: name characters)
/// Rejected (errc::invalid_params): an empty host, "[]", a bare IPv6 address
/// without brackets ("fd00::1:80" is ambiguous), brackets around a
/// non-IPv6 host, unbalanced brackets, a missing or empty port, a port that
/// is not decimal digits or is 0 or above 65535, any character outside the
/// sets above (whitespace, control characters, NUL, quotes, '/', '@', ...),
/// trailing junk, and a host longer than max_host_size.
/// parse_with_default_port also accepts a missing port, and a bare IPv6
/// address (no brackets) when there is no port: see there. Host names are
/// checked for syntax only: nothing here resolves or blocks.
///
/// Thread-safety: a value type; const members are safe from any thread, the
/// static functions are pure.
#include "mc/runtime/error.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <utility>

namespace mc {

class endpoint {
 public:
  /// Longest host accepted, without brackets (a DNS name is at most 253).
  static constexpr std::size_t max_host_size = 253;
  /// Longest text accepted: "[" host "]:" and five digits.
  static constexpr std::size_t max_text_size = max_host_size + 8;

  /// An empty endpoint (host "", port 0); `empty()` is true. Only parse and
  /// make produce a non-empty one.
  endpoint() = default;

  /// `text` as "host:port" / "[v6]:port" (see the file comment). Errors:
  /// invalid_params; when `why` is set it receives a short static
  /// description of the first problem ("port is not in 1..65535", ...).
  static result<endpoint> parse(std::string_view text, std::string_view* why = nullptr);

  /// Like parse, and a missing port means `default_port`: accepts "host",
  /// "[v6]", a bare IPv6 address "fd00::1" (two or more ':' and no port;
  /// "fd00::1:80" is read as the address fd00::1:80, never as a port), plus
  /// everything parse accepts. Errors: invalid_params as parse, and when the
  /// port is missing and `default_port` is 0.
  static result<endpoint> parse_with_default_port(std::string_view text, std::uint16_t default_port,
                                                  std::string_view* why = nullptr);

  /// `host` (no brackets; an IPv6 address may have them, they are dropped)
  /// with `port`. Errors: invalid_params as parse (bad host, port 0).
  static result<endpoint> make(std::string_view host, std::uint16_t port, std::string_view* why = nullptr);

  /// The host without brackets ("fd00::1", "node-1", "10.0.0.5").
  const std::string& host() const noexcept { return host_; }
  /// The port, 1..65535 (0 only for an empty endpoint).
  std::uint16_t port() const noexcept { return port_; }
  /// True for a default-constructed endpoint.
  bool empty() const noexcept { return host_.empty(); }
  /// Whether the host is an IPv6 address (it contains ':').
  bool is_ipv6() const noexcept;
  /// Whether the host is a loopback name or address: "localhost",
  /// 127.0.0.0/8 written as an address, or "::1".
  bool is_loopback() const noexcept;
  /// The host as it goes before ":port" in a URL or endpoint: IPv6 in brackets.
  std::string host_for_url() const;
  /// "host:port", IPv6 in brackets. parse(str()) gives back the same endpoint.
  std::string str() const;
  /// The same host with another port. Errors: invalid_params for port 0.
  result<endpoint> with_port(std::uint16_t port) const;

  friend bool operator==(const endpoint&, const endpoint&) = default;
  /// Writes str() (for logs and test output).
  friend std::ostream& operator<<(std::ostream& os, const endpoint& e);

 private:
  endpoint(std::string host, std::uint16_t port) : host_(std::move(host)), port_(port) {}

  std::string host_;
  std::uint16_t port_ = 0;
};

}  // namespace mc

template <>
struct std::hash<mc::endpoint> {
  std::size_t operator()(const mc::endpoint& e) const noexcept {
    return std::hash<std::string>{}(e.host()) ^ (std::size_t{e.port()} * 0x9e3779b97f4a7c15ull);
  }
};
