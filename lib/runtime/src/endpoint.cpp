// mc::endpoint: the one "host:port" parser (see mc/runtime/endpoint.hpp).
#include "mc/runtime/endpoint.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <ostream>

namespace mc {
namespace {

bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }
bool is_hex(char c) noexcept { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool is_name_char(char c) noexcept {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == '-' || c == '_';
}

/// Records the first problem; returns false (for the checks below).
bool no(std::string_view* why, std::string_view text) noexcept {
  if (why) *why = text;
  return false;
}

/// Records the first problem; returns invalid_params.
boost::system::error_code bad(std::string_view* why, std::string_view text) noexcept {
  no(why, text);
  return fail(errc::invalid_params);
}

/// A host name or IPv4 address (no ':').
bool valid_name(std::string_view h) noexcept {
  if (h.empty() || h.front() == '.' || h.front() == '-') return false;
  for (char c : h)
    if (!is_name_char(c)) return false;
  return true;
}

/// An IPv6 address without brackets (inet_pton's syntax: hex digits, ':' and
/// '.'), then optionally "%zone".
bool valid_v6(std::string_view h) noexcept {
  auto pct = h.find('%');
  auto addr = h.substr(0, pct);
  char text[INET6_ADDRSTRLEN] = {};  // 46: the longest textual IPv6 address and a NUL
  if (addr.size() < 2 || addr.size() >= sizeof(text)) return false;
  for (char c : addr)
    if (!is_hex(c) && c != ':' && c != '.') return false;
  addr.copy(text, addr.size());
  in6_addr bin{};
  if (::inet_pton(AF_INET6, text, &bin) != 1) return false;
  if (pct == std::string_view::npos) return true;
  auto zone = h.substr(pct + 1);
  if (zone.empty()) return false;
  for (char c : zone)
    if (!is_name_char(c)) return false;
  return true;
}

/// Checks a host without brackets: a name, or an IPv6 address.
bool valid_host(std::string_view h, std::string_view* why) noexcept {
  if (h.empty()) return no(why, "empty host");
  if (h.size() > endpoint::max_host_size) return no(why, "host too long");
  if (h.find(':') != std::string_view::npos ? valid_v6(h) : valid_name(h)) return true;
  return no(why, "host has characters outside letters, digits, '.', '-', '_' (IPv6: hex digits, ':', '.')");
}

/// Decimal 1..65535, digits only.
bool parse_port(std::string_view p, std::uint16_t& out, std::string_view* why) noexcept {
  if (p.empty()) return no(why, "missing port");
  if (p.size() > 5) return no(why, "port is not in 1..65535");
  unsigned v = 0;
  for (char c : p) {
    if (!is_digit(c)) return no(why, "port is not a decimal number");
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v == 0 || v > 65535) return no(why, "port is not in 1..65535");
  out = static_cast<std::uint16_t>(v);
  return true;
}

/// Splits `text` into host (brackets dropped) and port text. `port_optional`:
/// a missing port leaves `port` empty (and a bare IPv6 address is a host).
bool split(std::string_view text, bool port_optional, std::string_view& host, std::string_view& port, bool& has_port,
           std::string_view* why) noexcept {
  if (text.empty()) return no(why, "empty endpoint");
  if (text.size() > endpoint::max_text_size) return no(why, "endpoint too long");
  has_port = false;
  if (text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos) return no(why, "unbalanced '['");
    host = text.substr(1, close - 1);
    if (host.find(':') == std::string_view::npos) return no(why, "brackets around a host that is not IPv6");
    auto rest = text.substr(close + 1);
    if (rest.empty()) {
      if (!port_optional) return no(why, "missing port");
      return true;
    }
    if (rest.front() != ':') return no(why, "junk after ']'");
    port = rest.substr(1);
    has_port = true;
    return true;
  }
  auto first = text.find(':');
  auto last = text.rfind(':');
  if (first == std::string_view::npos) {
    if (!port_optional) return no(why, "missing port (expected host:port)");
    host = text;
    return true;
  }
  if (first != last) {
    if (!port_optional) return no(why, "an IPv6 host needs brackets ([v6]:port)");
    host = text;  // a bare IPv6 address, no port
    return true;
  }
  host = text.substr(0, first);
  port = text.substr(first + 1);
  has_port = true;
  return true;
}

}  // namespace

result<endpoint> endpoint::make(std::string_view host, std::uint16_t port, std::string_view* why) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (!valid_host(host, why)) return fail(errc::invalid_params);
  if (port == 0) return bad(why, "port is not in 1..65535");
  return endpoint(std::string(host), port);
}

result<endpoint> endpoint::parse(std::string_view text, std::string_view* why) {
  std::string_view host, port;
  bool has_port = false;
  if (!split(text, false, host, port, has_port, why)) return fail(errc::invalid_params);
  std::uint16_t p = 0;
  if (!valid_host(host, why) || !parse_port(port, p, why)) return fail(errc::invalid_params);
  return endpoint(std::string(host), p);
}

result<endpoint> endpoint::parse_with_default_port(std::string_view text, std::uint16_t default_port,
                                                   std::string_view* why) {
  std::string_view host, port;
  bool has_port = false;
  if (!split(text, true, host, port, has_port, why)) return fail(errc::invalid_params);
  std::uint16_t p = default_port;
  if (!valid_host(host, why)) return fail(errc::invalid_params);
  if (has_port) {
    if (!parse_port(port, p, why)) return fail(errc::invalid_params);
  } else if (p == 0) {
    return bad(why, "missing port");
  }
  return endpoint(std::string(host), p);
}

bool endpoint::is_ipv6() const noexcept { return host_.find(':') != std::string::npos; }

bool endpoint::is_loopback() const noexcept {
  if (host_ == "localhost" || host_ == "::1") return true;
  if (host_.rfind("127.", 0) != 0) return false;
  // 127.a.b.c written as an address (not a name such as "127.example").
  for (char c : host_)
    if (!is_digit(c) && c != '.') return false;
  return true;
}

std::string endpoint::host_for_url() const {
  if (!is_ipv6()) return host_;
  std::string out;
  out.reserve(host_.size() + 2);
  out.push_back('[');
  out.append(host_);
  out.push_back(']');
  return out;
}

std::string endpoint::str() const {
  std::string out = host_for_url();
  out.push_back(':');
  out.append(std::to_string(port_));
  return out;
}

result<endpoint> endpoint::with_port(std::uint16_t port) const {
  if (port == 0 || empty()) return fail(errc::invalid_params);
  return endpoint(host_, port);
}

std::ostream& operator<<(std::ostream& os, const endpoint& e) { return os << e.str(); }

}  // namespace mc
