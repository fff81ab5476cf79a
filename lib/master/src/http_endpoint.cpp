// The HTTP endpoint a node registers with the master (ClientInfo.httpEndpoint):
// built by the node, checked by the master before it is stored or served.
#include "mc/master/metadata.hpp"

#include "mc/runtime/endpoint.hpp"

namespace mc::master {

bool valid_http_endpoint(std::string_view ep) noexcept {
  if (ep.empty()) return true;
  if (ep.size() > max_http_endpoint_size) return false;
  return mc::endpoint::parse(ep).has_value();
}

std::string http_endpoint_of(std::string_view rpc_endpoint, std::string_view http_host, std::uint16_t port) {
  const bool any = http_host.empty() || http_host == "0.0.0.0" || http_host == "::" || http_host == "[::]";
  auto ep = any ? mc::endpoint::parse(rpc_endpoint) : mc::endpoint::make(http_host, port);
  if (ep && any) ep = ep->with_port(port);
  return ep ? ep->str() : std::string();
}

}  // namespace mc::master
