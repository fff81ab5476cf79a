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

mc::task<mc::result<capnp::Capability::Client>> connect_service(std::string endpoint,
                                                                  std::string service) {
  auto& tc = thread_context::current();
  auto cache = tc.clients().shared_from_this();
  auto conn = co_await cache->acquire(std::move(endpoint));
  if (!conn) co_return conn.error();
  auto c = std::move(*conn);
  auto it = c->services.find(service);
  if (it != c->services.end()) co_return it->second;

  capnp::Capability::Client boot = nullptr;
  KJ_IF_MAYBE(b, c->bootstrap) { boot = *b; }
  else co_return mc::fail(mc::errc::rpc_fail);
  auto req = boot.castAs<schema::Bootstrap>().getServiceRequest();
  req.setName(service);
  kj::Promise<capnp::Response<schema::Bootstrap::GetServiceResults>> p = req.send();
  auto o = co_await await(kj::mv(p), cache->options().connect_timeout);
  if (o.error) co_return mc::fail(from_kj_exception(*o.error));
  if (!o.value) {
    set_last_error("service lookup: " + std::string(mc::error_message(o.local)));
    co_return mc::fail(o.local);
  }
  auto cap = o.value->getService();
  if (c->st == client_connection::state::ready && c->services.size() < max_services_per_connection)
    c->services.emplace(service, cap);
  co_return cap;
}

}  // namespace mc::rpc::detail
