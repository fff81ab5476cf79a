// mc::store::client: the data operations (put / get / batch / exists / remove / query).
#include "client_impl.hpp"

#include "mc/runtime/when_all.hpp"

namespace mc::store {
namespace {
constexpr auto relaxed = std::memory_order_relaxed;

bool worth_another_replica(const boost::system::error_code& ec) {
  return mc::is(ec, errc::object_not_found) || mc::is(ec, errc::timeout) || mc::is(ec, errc::rpc_fail) ||
         mc::is(ec, errc::transfer_fail) || mc::is(ec, errc::shutting_down) || mc::is(ec, errc::invalid_params) ||
         mc::is(ec, errc::overloaded);
}
}  // namespace

std::optional<mc::master::key_info> client::impl::cached_route(const std::string& key) {
  std::lock_guard lk(routes_mu);
  auto it = routes.find(key);
  if (it == routes.end()) return std::nullopt;
  return it->second;
}

void client::impl::cache_route(const std::string& key, const mc::master::key_info& info) {
  std::lock_guard lk(routes_mu);
  if (routes.size() >= max_routes) routes.clear();  // bounded; refilled on demand
  routes[key] = info;
}

void client::impl::forget_route(const std::string& key) {
  std::lock_guard lk(routes_mu);
  routes.erase(key);
}

task<result<mc::master::key_info>> client::impl::route(const std::string& key) {
  if (auto c = cached_route(key)) {
    stats.route_cache_hits.fetch_add(1, relaxed);
    co_return std::move(*c);
  }
  auto r = co_await master.lookup(key);
  if (!r) {
    if (!mc::is(r.error(), errc::object_not_found)) stats.master_errors.fetch_add(1, relaxed);
    co_return r.error();
  }
  cache_route(key, *r);
  co_return std::move(*r);
}

task<result<void>> client::put(std::string key, std::span<const std::byte> value, put_options opts) {
  if (auto k = check_key(key); !k) co_return k;
  if (value.empty()) co_return fail(errc::invalid_params);
  impl_->forget_route(key);
  if (opts.where == placement::local) co_return co_await impl_->dm->put(key, value);
  co_return co_await impl_->put_remote(key, value, opts.target);
}

task<result<void>> client::impl::put_remote(const std::string& key, std::span<const std::byte> value,
                                            const std::string& target) {
  std::string endpoint = target;
  if (endpoint.empty()) {
    auto r = co_await master.write_route(value.size(), id);
    if (!r) co_return r.error();
    endpoint = r->rpc_endpoint;
  }
  // The peer READs the value out of our memory: register it for this call.
  auto region = engine->register_memory(const_cast<std::byte*>(value.data()), value.size(),
                                        mc::transfer::region_access::remote_read);
  if (!region) co_return region.error();
  co_return co_await peers.write_remote(endpoint, key, region->describe());
}

task<result<std::size_t>> client::get(std::string key, std::span<std::byte> buf) {
  if (auto k = check_key(key); !k) co_return k.error();
  auto local = co_await impl_->dm->get(key, buf);
  if (local || !mc::is(local.error(), errc::object_not_found)) {
    if (local) impl_->stats.local_hits.fetch_add(1, relaxed);
    co_return local;
  }
  co_return co_await impl_->get_remote(key, buf);
}

task<result<std::size_t>> client::impl::get_remote(const std::string& key, std::span<std::byte> buf) {
  boost::system::error_code last = make_error_code(errc::object_not_found);
  for (int round = 0; round < 2; ++round) {
    auto info = co_await route(key);
    if (!info) {
      if (mc::is(info.error(), errc::object_not_found)) stats.misses.fetch_add(1, relaxed);
      co_return info.error();
    }
    if (info->size > buf.size()) co_return fail(errc::buffer_overflow);
    bool stale = false;
    for (auto& rep : info->replicas) {
      if (rep.client_id == id) continue;  // our own entry, and we missed locally: stale
      // A fresh registration per attempt: a late WRITE from a replica we gave
      // up on can never land once its registration is gone.
      auto region = engine->register_memory(buf.data(), info->size, mc::transfer::region_access::remote_write);
      if (!region) co_return region.error();
      auto r = co_await peers.read_remote(rep.rpc_endpoint, key, region->describe());
      if (r.value && *r.value > buf.size()) r.value = make_error_code(errc::rpc_fail);  // never past `buf`
      if (r.value) {
        stats.remote_hits.fetch_add(1, relaxed);
        co_return static_cast<std::size_t>(*r.value);
      }
      last = r.value.error();
      if (!worth_another_replica(last)) co_return last;
      stale = stale || mc::is(last, errc::object_not_found) || mc::is(last, errc::invalid_params);
      stats.fallbacks.fetch_add(1, relaxed);
    }
    forget_route(key);
    if (!stale) break;  // every replica failed for transport reasons: report it
  }
  co_return last;
}

task<std::vector<result<void>>> client::batch_put(std::vector<std::string> keys,
                                                  std::vector<std::span<const std::byte>> values,
                                                  put_options opts) {
  std::vector<result<void>> out;
  if (keys.size() != values.size()) {
    out.assign(keys.size(), fail(errc::invalid_params));
    co_return out;
  }
  std::vector<task<result<void>>> work;
  for (std::size_t i = 0; i < keys.size(); ++i) work.push_back(put(std::move(keys[i]), values[i], opts));
  co_return co_await mc::when_all(std::move(work));
}

task<std::vector<result<std::size_t>>> client::batch_get(std::vector<std::string> keys,
                                                         std::vector<std::span<std::byte>> bufs) {
  std::vector<result<std::size_t>> out;
  if (keys.size() != bufs.size()) {
    out.assign(keys.size(), fail(errc::invalid_params));
    co_return out;
  }
  std::vector<task<result<std::size_t>>> work;
  for (std::size_t i = 0; i < keys.size(); ++i) work.push_back(get(std::move(keys[i]), bufs[i]));
  co_return co_await mc::when_all(std::move(work));
}

task<result<bool>> client::exists(std::string key) {
  // result<bool> cannot be built implicitly from an error_code (it converts to bool).
  auto error = [](boost::system::error_code ec) { return result<bool>(boost::system::in_place_error, ec); };
  if (auto k = check_key(key); !k) co_return error(k.error());
  if (impl_->dm->exists(key)) co_return true;
  auto r = co_await impl_->master.lookup(key);
  if (r) co_return true;
  if (mc::is(r.error(), errc::object_not_found)) co_return false;
  co_return error(r.error());
}

task<result<void>> client::remove(std::string key) {
  if (auto k = check_key(key); !k) co_return k;
  auto& p = *impl_;
  p.forget_route(key);
  bool removed = false;
  auto holders = co_await p.master.remove_key(key);
  if (!holders && !mc::is(holders.error(), errc::object_not_found)) co_return holders.error();
  boost::system::error_code first_error;
  if (holders) {
    for (auto& h : *holders) {
      if (h.client_id == p.id) continue;
      auto r = co_await p.peers.remove(h.rpc_endpoint, key);
      if (r || mc::is(r.error(), errc::object_not_found)) removed = removed || r.has_value();
      else if (!first_error) first_error = r.error();
    }
  }
  if (auto r = co_await p.dm->remove(key); r) removed = true;
  if (first_error) co_return first_error;
  if (!removed && !holders) co_return fail(errc::object_not_found);
  co_return result<void>{};
}

task<result<object_info>> client::query(std::string key) {
  if (auto k = check_key(key); !k) co_return k.error();
  object_info info;
  auto local = impl_->dm->size_of(key);
  info.local = local.has_value();
  auto r = co_await impl_->master.lookup(key);
  if (r) {
    info.size = r->size;
    info.replicas = std::move(r->replicas);
    co_return info;
  }
  if (info.local) {
    info.size = *local;
    co_return info;
  }
  co_return r.error();
}

}  // namespace mc::store
