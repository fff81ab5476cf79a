#include "mc/rpc/protocol.hpp"

#include "negotiate.hpp"

#include <atomic>
#include <cstdlib>
#include <mutex>

namespace mc::rpc {

namespace {
std::atomic<protocol> current{protocol::tcp};
std::once_flag env_once;
std::string env_outcome;
}  // namespace

std::string_view protocol_name(protocol p) noexcept { return p == protocol::rdma ? "rdma" : "tcp"; }

mc::result<protocol> parse_protocol(std::string_view text) {
  if (text.empty() || text == "tcp") return protocol::tcp;
  if (text == "rdma") {
    if (!detail::rdma_rpc_built()) return mc::fail(mc::errc::unsupported);
    return protocol::rdma;
  }
  return mc::fail(mc::errc::invalid_params);
}

mc::result<protocol> protocol_from_env() {
  const char* v = std::getenv("MC_RPC_PROTOCOL");
  return parse_protocol(v ? std::string_view(v) : std::string_view());
}

std::string protocol_error_message(std::string_view text) {
  if (text == "rdma")
    return "MC_RPC_PROTOCOL=rdma: this build has no RDMA support (libibverbs was not found at build time); "
           "use MC_RPC_PROTOCOL=tcp";
  return "MC_RPC_PROTOCOL='" + std::string(text) + "' is not a valid value; allowed values: tcp, rdma";
}

std::string use_protocol(protocol p, const std::vector<std::string>& device_names) {
  if (p == protocol::rdma) {
    std::string why;
    if (!detail::rdma_rpc_open(device_names, &why)) return why;
  }
  current.store(p);
  return {};
}

std::string use_protocol_from_env(const std::vector<std::string>& device_names) {
  std::call_once(env_once, [&] {
    const char* v = std::getenv("MC_RPC_PROTOCOL");
    auto p = protocol_from_env();
    if (!p) {
      env_outcome = protocol_error_message(v ? v : "");
      return;
    }
    env_outcome = use_protocol(*p, device_names);
  });
  return env_outcome;
}

protocol current_protocol() noexcept { return current.load(); }

std::string rdma_device_name() { return detail::rdma_rpc_device_name(); }

}  // namespace mc::rpc
