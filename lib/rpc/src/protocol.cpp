#include "mc/rpc/protocol.hpp"

#include <cstdlib>

namespace mc::rpc {

std::string_view protocol_name(protocol p) noexcept { return p == protocol::rdma ? "rdma" : "tcp"; }

mc::result<protocol> parse_protocol(std::string_view text) {
  if (text.empty() || text == "tcp") return protocol::tcp;
  if (text == "rdma") return mc::fail(mc::errc::unsupported);
  return mc::fail(mc::errc::invalid_params);
}

mc::result<protocol> protocol_from_env() {
  const char* v = std::getenv("MC_RPC_PROTOCOL");
  return parse_protocol(v ? std::string_view(v) : std::string_view());
}

std::string protocol_error_message(std::string_view text) {
  if (text == "rdma")
    return "MC_RPC_PROTOCOL=rdma: the RDMA control plane is not available in this build "
           "(no RDMA RPC transport / no RDMA device); use MC_RPC_PROTOCOL=tcp";
  return "MC_RPC_PROTOCOL='" + std::string(text) + "' is not a valid value; allowed values: tcp, rdma";
}

}  // namespace mc::rpc
