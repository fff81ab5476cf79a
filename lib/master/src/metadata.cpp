#include "mc/master/metadata.hpp"

#include "mc/runtime/endpoint.hpp"
#include "metadata_state.hpp"

#include <algorithm>
#include <atomic>
#include <functional>
#include <limits>

namespace mc::master {

std::string_view health_name(health h) noexcept {
  switch (h) {
    case health::healthy:
      return "healthy";
    case health::suspect:
      return "suspect";
    case health::dead:
      return "dead";
  }
  return "unknown";
}

metadata::metadata(metadata_options opts)
    : counters_(std::make_unique<counters>()), opts_(opts), slots_(std::make_unique<slot_table>()) {
  if (opts_.shards == 0) opts_.shards = 1;
  // Key lengths are stored in 32 bits.
  opts_.max_key_bytes = std::min<std::size_t>(opts_.max_key_bytes, std::numeric_limits<std::uint32_t>::max());
  for (std::size_t i = 0; i < opts_.shards; ++i) shards_.push_back(std::make_unique<shard>());
  repair_ = std::make_unique<repair_state>();
  retired_ = std::make_unique<retired_tables>();
  repair_->per_shard.assign(shards_.size(), 0);
}

metadata::~metadata() = default;

std::pair<std::size_t, std::uint32_t> metadata::shard_index(std::string_view key) const {
  // The shard is the hash modulo the shard count (as before: paging by shard
  // and the fuzz model rely on it); the high half places the key in it.
  const std::uint64_t h = std::hash<std::string_view>{}(key);
  return {static_cast<std::size_t>(h % shards_.size()), static_cast<std::uint32_t>(h >> 32)};
}

std::pair<metadata::shard*, std::uint32_t> metadata::shard_for(std::string_view key) const {
  auto [i, hash] = shard_index(key);
  return {shards_[i].get(), hash};
}

void metadata::forget_client(const client_entry& c) {
  auto& s = slots_->slots[c.slot];
  if (s.client == &c) s.client = nullptr;
  // Pinned until drop_client_replicas ran: the slot must not be freed and
  // bound to another id before its entries are gone.
  s.refs.fetch_add(1, std::memory_order_relaxed);
}

void metadata::unref(std::uint32_t slot, std::uint64_t n) {
  auto& s = slots_->slots[slot];
  if (n) s.refs.fetch_sub(std::min(n, s.refs.load(std::memory_order_relaxed)), std::memory_order_relaxed);
  slots_->try_free(slot);
}

health metadata::health_of(const client_entry& c, clock::time_point now) const {
  auto silent = now - c.last_heartbeat;
  if (silent > opts_.drop_ttl) return health::dead;
  if (silent > opts_.route_ttl) return health::suspect;
  return health::healthy;
}

result<void> metadata::check_key(std::string_view key) const {
  if (key.empty() || key.size() > opts_.max_key_bytes) return fail(errc::invalid_key);
  return {};
}

result<void> metadata::register_client(const client_info& info) {
  // Peers dial these endpoints: only well-formed ones are stored and served.
  if (info.client_id.empty() || !mc::endpoint::parse(info.rpc_endpoint) ||
      !mc::endpoint::parse(info.transfer_endpoint) || !valid_http_endpoint(info.http_endpoint))
    return fail(errc::invalid_params);
  const auto now = clock::now();
  std::lock_guard lk(clients_mu_);
  auto& e = clients_[info.client_id];
  if (!e) {
    e = std::make_shared<client_entry>();
    e->notice_epoch = slots_->next_notice_epoch++;
    if (e->notice_epoch == 0) e->notice_epoch = slots_->next_notice_epoch++;
    e->slot = slots_->bind(info.client_id);
    slots_->slots[e->slot].client = e.get();
  } else if ((e->info.rpc_endpoint != info.rpc_endpoint || e->info.transfer_endpoint != info.transfer_endpoint) &&
             now - e->last_heartbeat <= opts_.route_ttl) {
    // A live client owns this id: another process must not take over its
    // endpoints (and so its routes). It can once the owner has been silent
    // for route_ttl (client_ttl), or after the owner unregistered.
    return fail(errc::object_already_exists);
  }
  e->info = info;
  e->last_heartbeat = now;
  return {};
}

result<client_info> metadata::find_client(const std::string& client_id) const {
  std::shared_lock lk(clients_mu_);
  auto it = clients_.find(client_id);
  if (it == clients_.end()) return fail(errc::client_not_found);
  return it->second->info;
}

result<void> metadata::heartbeat(const std::string& client_id, std::uint64_t used, std::uint64_t capacity) {
  std::lock_guard lk(clients_mu_);
  auto it = clients_.find(client_id);
  if (it == clients_.end()) return fail(errc::client_not_found);
  it->second->info.used = used;
  it->second->info.capacity = capacity;
  it->second->last_heartbeat = clock::now();
  return {};
}

result<void> metadata::unregister_client(const std::string& client_id) {
  std::uint32_t slot = 0;
  {
    std::lock_guard lk(clients_mu_);
    auto it = clients_.find(client_id);
    if (it == clients_.end()) return fail(errc::client_not_found);
    slot = it->second->slot;
    forget_client(*it->second);
    clients_.erase(it);
  }
  const std::uint32_t one[] = {slot};
  drop_client_replicas(one);
  return {};
}

result<replica> metadata::write_route(std::uint64_t size, const std::string& exclude) const {
  auto now = clock::now();
  std::shared_lock clk(clients_mu_);
  const client_entry* best = nullptr;
  std::uint64_t best_free = 0;
  for (auto& [id, c] : clients_) {
    if (id == exclude || health_of(*c, now) != health::healthy) continue;
    auto free = c->info.capacity > c->info.used ? c->info.capacity - c->info.used : 0;
    if (free < size) continue;
    if (!best || free > best_free) {
      best = c.get();
      best_free = free;
    }
  }
  if (!best) return fail(errc::no_available_handle);
  return replica{best->info.client_id, best->info.rpc_endpoint, best->info.transfer_endpoint};
}

std::vector<std::string> metadata::sweep() {
  std::vector<std::string> dropped;
  std::vector<std::uint32_t> slots;
  auto now = clock::now();
  {
    std::lock_guard clk(clients_mu_);
    for (auto it = clients_.begin(); it != clients_.end();) {
      if (health_of(*it->second, now) == health::dead) {
        dropped.push_back(it->first);
        slots.push_back(it->second->slot);
        forget_client(*it->second);
        it = clients_.erase(it);
      } else {
        ++it;
      }
    }
  }
  drop_client_replicas(slots, true);  // silent: they may come back
  return dropped;
}

std::vector<client_status> metadata::clients() const {
  auto now = clock::now();
  std::vector<client_status> out;
  std::shared_lock clk(clients_mu_);
  for (auto& [id, c] : clients_) out.push_back({c->info, health_of(*c, now), now - c->last_heartbeat, c->keys.load()});
  std::sort(out.begin(), out.end(),
            [](const client_status& a, const client_status& b) { return a.info.client_id < b.info.client_id; });
  return out;
}

}  // namespace mc::master
