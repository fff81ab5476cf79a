#include "bootstrap.hpp"

#include "bootstrap.capnp.h"

#include <map>

namespace mc::rpc::detail {

namespace {

class bootstrap_impl final : public schema::Bootstrap::Server {
 public:
  bootstrap_impl(std::shared_ptr<const service_list> services, mc::executor ex)
      : services_(std::move(services)), ex_(std::move(ex)) {}

  kj::Promise<void> getService(GetServiceContext ctx) override {
    auto name = ctx.getParams().getName();
    std::string key(name.cStr(), name.size());
    auto it = made_.find(key);
    if (it == made_.end()) {
      const service_factory* factory = nullptr;
      for (auto& [n, f] : *services_)
        if (n == key) factory = &f;
      if (!factory)
        return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                             kj::str("mc:UNSUPPORTED: unknown service '", name, "'"));
      it = made_.emplace(key, (*factory)(ex_)).first;
    }
    ctx.getResults().setService(it->second);
    return kj::READY_NOW;
  }

 private:
  std::shared_ptr<const service_list> services_;
  mc::executor ex_;
  std::map<std::string, capnp::Capability::Client> made_;
};

}  // namespace

capnp::Capability::Client make_bootstrap(std::shared_ptr<const service_list> services, mc::executor ex) {
  return kj::heap<bootstrap_impl>(std::move(services), std::move(ex));
}

}  // namespace mc::rpc::detail
