#include "mc/master/metadata.hpp"

#include <algorithm>
#include <atomic>
#include <functional>

namespace mc::master {

struct metadata::client_entry {
  client_info info;
  clock::time_point last_heartbeat;
  std::atomic<std::uint64_t> keys{0};
};

struct metadata::shard {
  struct entry {
    std::uint64_t size = 0;
    std::vector<std::string> holders;
  };
  mutable std::mutex mu;
  std::unordered_map<std::string, entry> map;
};

std::string_view health_name(health h) noexcept {
  switch (h) {
    case health::healthy: return "healthy";
    case health::suspect: return "suspect";
    case health::dead: return "dead";
  }
  return "unknown";
}

metadata::metadata(metadata_options opts) : opts_(opts) {
  if (opts_.shards == 0) opts_.shards = 1;
  for (std::size_t i = 0; i < opts_.shards; ++i) shards_.push_back(std::make_unique<shard>());
}

metadata::~metadata() = default;

metadata::shard& metadata::shard_for(const std::string& key) const {
  return *shards_[std::hash<std::string>{}(key) % shards_.size()];
}

health metadata::health_of(const client_entry& c, clock::time_point now) const {
  auto silent = now - c.last_heartbeat;
  if (silent > opts_.drop_ttl) return health::dead;
  if (silent > opts_.route_ttl) return health::suspect;
  return health::healthy;
}

result<void> metadata::check_key(const std::string& key) const {
  if (key.empty() || key.size() > opts_.max_key_bytes) return fail(errc::invalid_key);
  return {};
}

result<void> metadata::register_client(const client_info& info) {
  if (info.client_id.empty() || info.rpc_endpoint.empty() || info.transfer_endpoint.empty())
    return fail(errc::invalid_params);
  std::lock_guard lk(clients_mu_);
  auto& e = clients_[info.client_id];
  if (!e) e = std::make_shared<client_entry>();
  e->info = info;
  e->last_heartbeat = clock::now();
  return {};
}

result<client_info> metadata::find_client(const std::string& client_id) const {
  std::lock_guard lk(clients_mu_);
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
  {
    std::lock_guard lk(clients_mu_);
    if (clients_.erase(client_id) == 0) return fail(errc::client_not_found);
  }
  drop_client_replicas(client_id);
  return {};
}

void metadata::drop_client_replicas(const std::string& client_id) {
  for (auto& s : shards_) {
    std::lock_guard lk(s->mu);
    for (auto it = s->map.begin(); it != s->map.end();) {
      auto& h = it->second.holders;
      h.erase(std::remove(h.begin(), h.end(), client_id), h.end());
      it = h.empty() ? s->map.erase(it) : std::next(it);
    }
  }
}

result<void> metadata::add_replica(const std::string& key, const std::string& client_id, std::uint64_t size) {
  if (auto r = check_key(key); !r) return r;
  std::shared_ptr<client_entry> c;
  {
    std::lock_guard lk(clients_mu_);
    auto it = clients_.find(client_id);
    if (it == clients_.end()) return fail(errc::client_not_found);
    c = it->second;
  }
  auto& s = shard_for(key);
  std::lock_guard lk(s.mu);
  auto& e = s.map[key];
  if (e.size != size && !e.holders.empty()) {
    // A new value of another size replaces the key: older replicas are stale.
    for (auto& h : e.holders)
      if (h != client_id) {
        std::lock_guard clk(clients_mu_);
        if (auto it = clients_.find(h); it != clients_.end()) it->second->keys.fetch_sub(1);
      }
    std::erase_if(e.holders, [&](const std::string& h) { return h != client_id; });
  }
  e.size = size;
  if (std::find(e.holders.begin(), e.holders.end(), client_id) == e.holders.end()) {
    e.holders.push_back(client_id);
    c->keys.fetch_add(1);
  }
  return {};
}

result<void> metadata::remove_replica(const std::string& key, const std::string& client_id) {
  if (auto r = check_key(key); !r) return r;
  auto& s = shard_for(key);
  {
    std::lock_guard lk(s.mu);
    auto it = s.map.find(key);
    if (it == s.map.end()) return fail(errc::object_not_found);
    auto& h = it->second.holders;
    auto pos = std::find(h.begin(), h.end(), client_id);
    if (pos == h.end()) return fail(errc::object_not_found);
    h.erase(pos);
    if (h.empty()) s.map.erase(it);
  }
  std::lock_guard clk(clients_mu_);
  if (auto it = clients_.find(client_id); it != clients_.end()) it->second->keys.fetch_sub(1);
  return {};
}

result<std::vector<replica>> metadata::remove_key(const std::string& key) {
  if (auto r = check_key(key); !r) return r.error();
  std::vector<std::string> holders;
  {
    auto& s = shard_for(key);
    std::lock_guard lk(s.mu);
    auto it = s.map.find(key);
    if (it == s.map.end()) return fail(errc::object_not_found);
    holders = std::move(it->second.holders);
    s.map.erase(it);
  }
  std::vector<replica> out;
  std::lock_guard clk(clients_mu_);
  for (auto& h : holders)
    if (auto it = clients_.find(h); it != clients_.end()) {
      it->second->keys.fetch_sub(1);
      out.push_back({h, it->second->info.rpc_endpoint, it->second->info.transfer_endpoint});
    }
  return out;
}

result<key_info> metadata::lookup(const std::string& key) const {
  if (auto r = check_key(key); !r) return r.error();
  key_info out;
  std::vector<std::string> holders;
  {
    auto& s = shard_for(key);
    std::lock_guard lk(s.mu);
    auto it = s.map.find(key);
    if (it == s.map.end()) return fail(errc::object_not_found);
    out.size = it->second.size;
    holders = it->second.holders;
  }
  auto now = clock::now();
  std::lock_guard clk(clients_mu_);
  for (auto& h : holders) {
    auto it = clients_.find(h);
    if (it == clients_.end() || health_of(*it->second, now) != health::healthy) continue;
    out.replicas.push_back({h, it->second->info.rpc_endpoint, it->second->info.transfer_endpoint});
  }
  if (out.replicas.empty()) return fail(errc::object_not_found);
  return out;
}

bool metadata::exists(const std::string& key) const { return lookup(key).has_value(); }

result<replica> metadata::write_route(std::uint64_t size, const std::string& exclude) const {
  auto now = clock::now();
  std::lock_guard clk(clients_mu_);
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
  auto now = clock::now();
  {
    std::lock_guard clk(clients_mu_);
    for (auto it = clients_.begin(); it != clients_.end();) {
      if (health_of(*it->second, now) == health::dead) {
        dropped.push_back(it->first);
        it = clients_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& id : dropped) drop_client_replicas(id);
  return dropped;
}

std::vector<client_status> metadata::clients() const {
  auto now = clock::now();
  std::vector<client_status> out;
  std::lock_guard clk(clients_mu_);
  for (auto& [id, c] : clients_)
    out.push_back({c->info, health_of(*c, now), now - c->last_heartbeat, c->keys.load()});
  std::sort(out.begin(), out.end(),
            [](const client_status& a, const client_status& b) { return a.info.client_id < b.info.client_id; });
  return out;
}

std::vector<std::pair<std::string, key_info>> metadata::keys(const std::string& prefix, std::size_t limit) const {
  std::vector<std::pair<std::string, std::vector<std::string>>> raw;
  std::vector<std::uint64_t> sizes;
  for (auto& s : shards_) {
    std::lock_guard lk(s->mu);
    for (auto& [k, e] : s->map) {
      if (raw.size() >= limit) break;
      if (k.compare(0, prefix.size(), prefix) != 0) continue;
      raw.emplace_back(k, e.holders);
      sizes.push_back(e.size);
    }
  }
  std::vector<std::pair<std::string, key_info>> out;
  std::lock_guard clk(clients_mu_);
  for (std::size_t i = 0; i < raw.size(); ++i) {
    key_info ki;
    ki.size = sizes[i];
    for (auto& h : raw[i].second)
      if (auto it = clients_.find(h); it != clients_.end())
        ki.replicas.push_back({h, it->second->info.rpc_endpoint, it->second->info.transfer_endpoint});
    out.emplace_back(std::move(raw[i].first), std::move(ki));
  }
  return out;
}

std::uint64_t metadata::key_count() const {
  std::uint64_t n = 0;
  for (auto& s : shards_) {
    std::lock_guard lk(s->mu);
    n += s->map.size();
  }
  return n;
}

std::uint64_t metadata::replica_count() const {
  std::uint64_t n = 0;
  for (auto& s : shards_) {
    std::lock_guard lk(s->mu);
    for (auto& [k, e] : s->map) n += e.holders.size();
  }
  return n;
}

}  // namespace mc::master
