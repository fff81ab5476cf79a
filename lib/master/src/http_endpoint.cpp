// The HTTP endpoint a node registers with the master (ClientInfo.httpEndpoint):
// built by the node, checked by the master before it is stored or served.
#include "mc/master/metadata.hpp"

#include <charconv>

namespace mc::master {

bool valid_http_endpoint(std::string_view ep) noexcept {
  if (ep.empty()) return true;
  if (ep.size() > max_http_endpoint_size) return false;
  for (char ch : ep)
    if (ch <= ' ' || ch > '~' || ch == '"' || ch == '\\') return false;
  auto colon = ep.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == ep.size()) return false;
  auto host = ep.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return false;
  } else if (host.find(':') != std::string_view::npos || host.find_first_of("[]") != std::string_view::npos) {
    return false;  // an IPv6 host needs brackets
  }
  auto port = ep.substr(colon + 1);
  unsigned value = 0;
  auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  return ec == std::errc{} && p == port.data() + port.size() && value >= 1 && value <= 65535;
}

std::string http_endpoint_of(std::string_view rpc_endpoint, std::string_view http_host, std::uint16_t port) {
  std::string host;
  if (http_host.empty() || http_host == "0.0.0.0" || http_host == "::" || http_host == "[::]") {
    auto colon = rpc_endpoint.rfind(':');
    host = std::string(rpc_endpoint.substr(0, colon == std::string_view::npos ? rpc_endpoint.size() : colon));
  } else if (http_host.find(':') != std::string_view::npos && http_host.front() != '[') {
    // (append, not "[" + string: gcc 12 -O3 raises a false -Wrestrict on that)
    host.reserve(http_host.size() + 2);
    host.push_back('[');
    host.append(http_host);
    host.push_back(']');
  } else {
    host = std::string(http_host);
  }
  host.push_back(':');
  host.append(std::to_string(port));
  return host;
}

}  // namespace mc::master
