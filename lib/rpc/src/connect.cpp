// connect_service(): endpoint + service name -> capability, via the cache.
#include "bootstrap.capnp.h"
#include "client_cache.hpp"
#include "mc/rpc/detail/bridge.hpp"
#include "thread_context.hpp"

namespace mc::rpc::detail {

namespace {
/// Service capabilities remembered per connection (names are few; bound anyway).
constexpr std::size_t max_services_per_connection = 64;
}  // namespace

mc::task<mc::result<capnp::Capability::Client>> connect_service(std::string endpoint, std::string service) {
  auto& tc = thread_context::current();
  auto cache = tc.clients().shared_from_this();
  auto conn = co_await cache->acquire(std::move(endpoint));
  if (!conn) co_return conn.error();
  auto c = std::move(*conn);
  auto it = c->services.find(service);
  if (it != c->services.end()) co_return it->second;

  auto lit = c->lookups.find(service);
  if (lit == c->lookups.end()) {
    capnp::Capability::Client boot = nullptr;
    KJ_IF_MAYBE (b, c->bootstrap) {
      boot = *b;
    } else
      co_return mc::fail(mc::errc::rpc_fail);
    auto req = boot.castAs<schema::Bootstrap>().getServiceRequest();
    req.setName(service);
    kj::Promise<capnp::Capability::Client> p =
        req.send().then([](capnp::Response<schema::Bootstrap::GetServiceResults>&& r) { return r.getService(); });
    lit = c->lookups.emplace(service, p.fork()).first;
  }
  auto o = co_await await(lit->second.addBranch(), cache->options().connect_timeout);
  c->lookups.erase(service);  // done (or failed: the next connect() retries)
  if (o.error) co_return mc::fail(from_kj_exception(*o.error));
  if (!o.value) {
    set_last_error("service lookup: " + std::string(mc::error_message(o.local)));
    co_return mc::fail(o.local);
  }
  if (c->st == client_connection::state::ready && c->services.size() < max_services_per_connection)
    c->services.emplace(service, *o.value);
  co_return std::move(*o.value);
}

}  // namespace mc::rpc::detail
