// mc::master::metadata: the key -> holder map, ordered per (key, holder) by
// the holders' versions; supersede across holders; drop notices; republish.
#include "metadata_state.hpp"

#include <boost/regex.hpp>

#include <algorithm>
#include <optional>
#include <limits>

namespace mc::master {
namespace {
constexpr auto relaxed = std::memory_order_relaxed;
}  // namespace

void metadata::queue_drop(const std::string& holder, const std::string& key, std::uint64_t version) {
  // Caller holds clients_mu_.
  auto it = clients_.find(holder);
  if (it == clients_.end()) return;
  auto& c = *it->second;
  if (c.drops.size() >= opts_.max_pending_drops) {
    c.drops.clear();  // bounded: the holder re-publishes everything instead
    c.resync = true;
    counters_->notice_overflows.fetch_add(1, relaxed);
  }
  if (!c.resync) c.drops.push_back({key, version});
}

result<void> metadata::add_replica(const std::string& key, const std::string& client_id, std::uint64_t size,
                                   std::uint64_t version, publish_kind kind, std::uint64_t epoch) {
  if (auto r = check_key(key); !r) return r;
  if (version == 0) return fail(errc::invalid_version);
  std::shared_ptr<client_entry> c;
  {
    std::lock_guard lk(clients_mu_);
    auto it = clients_.find(client_id);
    if (it == clients_.end()) return fail(errc::client_not_found);
    c = it->second;
  }
  auto stale = [&] {
    counters_->stale_publishes.fetch_add(1, relaxed);
    return fail(errc::invalid_version);
  };
  auto& s = shard_for(key);
  std::vector<shard::holder> superseded;
  bool became_live = false;
  {
    std::lock_guard lk(s.mu);
    auto& e = s.map[key];
    auto self = std::find_if(e.holders.begin(), e.holders.end(),
                             [&](const shard::holder& h) { return h.client_id == client_id; });
    bool others_live = std::any_of(e.holders.begin(), e.holders.end(),
                                   [&](const shard::holder& h) { return h.live && h.client_id != client_id; });
    if (self != e.holders.end()) {
      if (version < self->version || (version == self->version && !self->live)) return stale();
      if (version == self->version) {  // the same copy again: idempotent
        self->epoch = std::max(self->epoch, epoch);
        return {};
      }
    }
    if (kind == publish_kind::republish && others_live) return stale();
    if (self == e.holders.end()) {
      e.holders.push_back({client_id, version, epoch, true});
      became_live = true;
    } else {
      became_live = !self->live;
      *self = {client_id, version, std::max(self->epoch, epoch), true};
    }
    e.size = size;
    for (auto& h : e.holders)
      if (h.live && h.client_id != client_id) {
        h.live = false;
        superseded.push_back(h);
      }
  }
  if (became_live) c->keys.fetch_add(1, relaxed);
  if (superseded.empty()) return {};
  counters_->superseded.fetch_add(superseded.size(), relaxed);
  std::lock_guard clk(clients_mu_);
  for (auto& h : superseded) {
    if (auto it = clients_.find(h.client_id); it != clients_.end()) it->second->keys.fetch_sub(1, relaxed);
    queue_drop(h.client_id, key, h.version);
  }
  return {};
}

result<void> metadata::remove_replica(const std::string& key, const std::string& client_id, std::uint64_t version) {
  if (auto r = check_key(key); !r) return r;
  auto& s = shard_for(key);
  bool was_live = false;
  {
    std::lock_guard lk(s.mu);
    auto it = s.map.find(key);
    if (it == s.map.end()) return fail(errc::object_not_found);
    auto& h = it->second.holders;
    auto pos = std::find_if(h.begin(), h.end(), [&](const shard::holder& x) { return x.client_id == client_id; });
    if (pos == h.end()) return fail(errc::object_not_found);
    if (pos->version > version) {  // a fresher copy was published since: keep it
      counters_->stale_removals.fetch_add(1, relaxed);
      return fail(errc::invalid_version);
    }
    was_live = pos->live;
    h.erase(pos);
    if (h.empty()) s.map.erase(it);
  }
  if (!was_live) return {};
  std::lock_guard clk(clients_mu_);
  if (auto it = clients_.find(client_id); it != clients_.end()) it->second->keys.fetch_sub(1, relaxed);
  return {};
}

result<std::vector<replica>> metadata::remove_key(const std::string& key) {
  if (auto r = check_key(key); !r) return r.error();
  std::vector<holder_ref> holders;
  {
    auto& s = shard_for(key);
    std::lock_guard lk(s.mu);
    auto it = s.map.find(key);
    if (it == s.map.end()) return fail(errc::object_not_found);
    for (auto& h : it->second.holders) holders.push_back({std::move(h.client_id), h.live});
    s.map.erase(it);
  }
  // Superseded holders are returned too: they may still hold an old copy.
  return release_holders(holders);
}

std::vector<replica> metadata::release_holders(const std::vector<holder_ref>& holders) {
  std::vector<replica> out;
  std::lock_guard clk(clients_mu_);
  for (auto& h : holders)
    if (auto it = clients_.find(h.client_id); it != clients_.end()) {
      if (h.live) it->second->keys.fetch_sub(1, relaxed);
      out.push_back({h.client_id, it->second->info.rpc_endpoint, it->second->info.transfer_endpoint});
    }
  return out;
}

result<metadata::removal_page> metadata::remove_matching(const std::string& pattern, bool all, std::size_t limit,
                                                         std::size_t from_shard) {
  if (from_shard > shards_.size()) return fail(errc::out_of_range);
  std::optional<boost::regex> re;
  if (!all) {
    if (pattern.empty() || pattern.size() > max_pattern_bytes) return fail(errc::invalid_params);
    try {
      re.emplace(pattern, boost::regex::ECMAScript);
    } catch (const std::exception&) {
      return fail(errc::invalid_params);
    }
  }
  removal_page page;
  std::vector<std::vector<holder_ref>> refs;
  std::size_t shard = from_shard, scanned = 0;
  bool too_complex = false;
  while (shard < shards_.size()) {
    bool full = false;
    {
      auto& sp = shards_[shard];
      std::lock_guard lk(sp->mu);
      for (auto it = sp->map.begin(); it != sp->map.end();) {
        ++scanned;
        bool match = all;
        if (!all) {
          try {
            // Boost.Regex bounds backtracking: a pathological pattern throws
            // instead of stalling the master.
            match = boost::regex_search(it->first, *re);
          } catch (const std::exception&) {
            too_complex = true;
            break;
          }
        }
        if (!match) {
          ++it;
          continue;
        }
        if (page.removed.size() >= limit) {
          full = true;  // this shard again next call
          break;
        }
        std::vector<holder_ref> hs;
        for (auto& h : it->second.holders) hs.push_back({std::move(h.client_id), h.live});
        page.removed.push_back({it->first, {}});
        refs.push_back(std::move(hs));
        it = sp->map.erase(it);
      }
    }
    if (too_complex || full) break;
    ++shard;
    if (scanned >= scan_budget) break;
  }
  for (std::size_t i = 0; i < page.removed.size(); ++i) page.removed[i].holders = release_holders(refs[i]);
  if (too_complex && page.removed.empty()) return fail(errc::invalid_params);
  page.next_shard = shard;
  return page;
}

std::pair<std::uint64_t, std::uint64_t> metadata::drop_holder_entries(const std::string& client_id,
                                                                      std::optional<std::uint64_t> below_epoch) {
  std::uint64_t removed = 0, live = 0;
  for (auto& s : shards_) {
    std::lock_guard lk(s->mu);
    for (auto it = s->map.begin(); it != s->map.end();) {
      auto& h = it->second.holders;
      for (auto pos = h.begin(); pos != h.end();) {
        if (pos->client_id != client_id || (below_epoch && pos->epoch >= *below_epoch)) {
          ++pos;
          continue;
        }
        ++removed;
        live += pos->live ? 1 : 0;
        pos = h.erase(pos);
      }
      it = h.empty() ? s->map.erase(it) : std::next(it);
    }
  }
  return {removed, live};
}

// Every entry, also those published with epoch UINT64_MAX (a bound of
// "older than UINT64_MAX" left them behind for a client that was gone).
void metadata::drop_client_replicas(const std::string& client_id) {
  (void)drop_holder_entries(client_id, std::nullopt);
}

result<std::uint64_t> metadata::finish_republish(const std::string& client_id, std::uint64_t epoch) {
  std::shared_ptr<client_entry> c;
  {
    std::lock_guard lk(clients_mu_);
    auto it = clients_.find(client_id);
    if (it == clients_.end()) return fail(errc::client_not_found);
    c = it->second;
  }
  auto [removed, live] = drop_holder_entries(client_id, epoch);
  c->keys.fetch_sub(std::min<std::uint64_t>(live, c->keys.load(relaxed)), relaxed);
  return removed;
}

holder_notices metadata::take_notices(const std::string& client_id, std::size_t max) {
  holder_notices out;
  std::lock_guard lk(clients_mu_);
  auto it = clients_.find(client_id);
  if (it == clients_.end()) return out;
  auto& c = *it->second;
  auto n = std::min(max, c.drops.size());
  out.drops.assign(std::make_move_iterator(c.drops.begin()), std::make_move_iterator(c.drops.begin() + n));
  c.drops.erase(c.drops.begin(), c.drops.begin() + n);
  out.resync = std::exchange(c.resync, false);
  return out;
}

ordering_stats metadata::ordering() const {
  return {counters_->stale_publishes.load(relaxed), counters_->stale_removals.load(relaxed),
          counters_->superseded.load(relaxed), counters_->notice_overflows.load(relaxed)};
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
    for (auto& h : it->second.holders)
      if (h.live) holders.push_back(h.client_id);
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

std::vector<std::pair<std::string, key_info>> metadata::keys(const std::string& prefix, std::size_t limit) const {
  std::vector<std::pair<std::string, std::vector<std::string>>> raw;
  std::vector<std::uint64_t> sizes;
  for (auto& s : shards_) {
    std::lock_guard lk(s->mu);
    for (auto& [k, e] : s->map) {
      if (raw.size() >= limit) break;
      if (k.compare(0, prefix.size(), prefix) != 0 || !e.any_live()) continue;
      std::vector<std::string> live;
      for (auto& h : e.holders)
        if (h.live) live.push_back(h.client_id);
      raw.emplace_back(k, std::move(live));
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
    for (auto& [k, e] : s->map) n += e.any_live() ? 1 : 0;
  }
  return n;
}

std::uint64_t metadata::replica_count() const {
  std::uint64_t n = 0;
  for (auto& s : shards_) {
    std::lock_guard lk(s->mu);
    for (auto& [k, e] : s->map)
      for (auto& h : e.holders) n += h.live ? 1 : 0;
  }
  return n;
}

}  // namespace mc::master
