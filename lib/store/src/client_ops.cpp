// mc::store::client: the data operations (put / get / batch / exists / remove / query).
#include "client_impl.hpp"

#include "mc/runtime/when_all.hpp"

namespace mc::store {
namespace {
using std::memory_order::relaxed;
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

task<result<void>> client::put(std::string key, std::span<const std::byte> value, put_options opts) {
  if (auto k = check_key(key); !k) co_return k;
  if (value.empty()) co_return fail(errc::invalid_params);
  impl_->forget_route(key);
  if (opts.where == placement::local && opts.replicas == 1) co_return co_await impl_->dm->put(key, value);
  std::vector<std::span<const std::byte>> pieces;
  pieces.push_back(value);
  co_return co_await put_parts(std::move(key), std::move(pieces), std::move(opts));
}

task<result<std::size_t>> client::get(std::string key, std::span<std::byte> buf) {
  if (auto k = check_key(key); !k) co_return k.error();
  auto local = co_await impl_->dm->get(key, buf);
  if (local || !mc::is(local.error(), errc::object_not_found)) {
    if (local) impl_->stats.local_hits.fetch_add(1, relaxed);
    co_return local;
  }
  // Missed locally: the remote path without probing the tiers again.
  std::vector<std::string> keys;
  keys.push_back(std::move(key));
  std::vector<std::vector<std::span<std::byte>>> pieces(1);
  pieces[0].push_back(buf);
  auto r = co_await impl_->get_many(std::move(keys), std::move(pieces), false);
  co_return std::move(r.front());
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
      if (r || mc::is(r.error(), errc::object_not_found))
        removed = removed || r.has_value();
      else if (!first_error)
        first_error = r.error();
    }
  }
  if (auto r = co_await p.dm->remove(key); r) removed = true;
  if (first_error) co_return first_error;
  if (!removed && !holders) co_return fail(errc::object_not_found);
  co_return result<void>{};
}

task<result<std::uint64_t>> client::remove_matching(std::string pattern, bool all) {
  auto& p = *impl_;
  constexpr std::uint32_t page = 4096;  // keys per master call
  constexpr std::size_t fan_out = 64;   // holder notices in flight
  std::uint64_t removed = 0;
  std::uint32_t from = 0;
  for (;;) {
    auto r = co_await p.master.remove_matching(pattern, all, page, from);
    if (!r) co_return removed > 0 ? result<std::uint64_t>(removed) : result<std::uint64_t>(r.error());
    auto& keys = r->removed;
    removed += keys.size();
    std::vector<task<result<void>>> tells;
    for (auto& k : keys) {
      p.forget_route(k.key);
      for (auto& h : k.holders)
        if (h.client_id != p.id) tells.push_back(p.peers.remove(h.rpc_endpoint, k.key));
      tells.push_back(p.dm->remove(k.key));
      if (tells.size() >= fan_out) {
        (void)co_await mc::when_all(std::move(tells));  // per-holder failures: see the header
        tells.clear();
      }
    }
    if (!tells.empty()) (void)co_await mc::when_all(std::move(tells));
    if (!r->next_shard) co_return removed;
    from = *r->next_shard;
  }
}

task<result<void>> client::remove_local(std::string key) {
  if (auto k = check_key(key); !k) co_return k;
  auto r = co_await impl_->dm->drop_local(key);
  if (!r) co_return r;
  co_await impl_->drain_notices();
  co_return result<void>{};
}

task<result<std::uint64_t>> client::remove_all_local() {
  std::uint64_t dropped = 0;
  for (auto& k : impl_->backend->keys()) {
    auto r = co_await impl_->dm->drop_local(k.key);
    if (r) ++dropped;
  }
  co_await impl_->drain_notices();
  co_return dropped;
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
