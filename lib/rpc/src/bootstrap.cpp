#include "bootstrap.hpp"

#include "bootstrap.capnp.h"

#include <map>

namespace mc::rpc::detail {

namespace {

class bootstrap_impl final : public schema::Bootstrap::Server {
 public:
  bootstrap_impl(std::shared_ptr<const service_list> services, mc::executor ex, std::shared_ptr<thread_services> shared,
                 connection_info conn)
      : services_(std::move(services)), ex_(std::move(ex)), shared_(std::move(shared)), conn_(std::move(conn)) {}

  kj::Promise<void> getService(GetServiceContext ctx) override {
    auto name = ctx.getParams().getName();
    std::string key(name.cStr(), name.size());
    const service_factory* factory = nullptr;
    for (auto& [n, f] : *services_)
      if (n == key) factory = &f;
    if (!factory)
      return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                           kj::str("mc:UNSUPPORTED: unknown service '", name, "'"));
    auto& made = factory->is_per_connection() ? own_ : shared_->made;
    auto it = made.find(key);
    if (it == made.end()) it = made.emplace(key, (*factory)(ex_, conn_)).first;
    ctx.getResults().setService(it->second);
    return kj::READY_NOW;
  }

 private:
  std::shared_ptr<const service_list> services_;
  mc::executor ex_;
  std::shared_ptr<thread_services> shared_;
  connection_info conn_;
  std::map<std::string, capnp::Capability::Client> own_;
};

}  // namespace

capnp::Capability::Client make_bootstrap(std::shared_ptr<const service_list> services, mc::executor ex,
                                         std::shared_ptr<thread_services> shared, connection_info conn) {
  return kj::heap<bootstrap_impl>(std::move(services), std::move(ex), std::move(shared), std::move(conn));
}

}  // namespace mc::rpc::detail
