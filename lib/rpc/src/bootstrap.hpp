#pragma once
// The bootstrap capability of a server thread: getService(name) -> capability.
#include "mc/rpc/capnp.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mc::rpc::detail {

using service_list = std::vector<std::pair<std::string, service_factory>>;

/// One per serving thread. Services are made lazily (once) with `ex`.
/// `services` must outlive the capability.
capnp::Capability::Client make_bootstrap(std::shared_ptr<const service_list> services, mc::executor ex);

}  // namespace mc::rpc::detail
