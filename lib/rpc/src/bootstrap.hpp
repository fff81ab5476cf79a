#pragma once
// The bootstrap capability of a server thread: getService(name) -> capability.
#include "mc/rpc/capnp.hpp"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mc::rpc::detail {

using service_list = std::vector<std::pair<std::string, service_factory>>;

/// The services a serving thread has made (shared by its connections).
struct thread_services {
  std::map<std::string, capnp::Capability::Client> made;
};

/// One per connection. Services are made lazily with `ex`: once per thread
/// (kept in `shared`), or once per connection for per-connection factories
/// (which receive `conn`). `services` must outlive the capability.
capnp::Capability::Client make_bootstrap(std::shared_ptr<const service_list> services, mc::executor ex,
                                         std::shared_ptr<thread_services> shared, connection_info conn);

}  // namespace mc::rpc::detail
