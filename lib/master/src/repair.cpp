// mc::master::metadata: replica repair — which replicated keys lack copies,
// which surviving holder copies them where, and the multi-node write routes
// replicated puts use.
#include "metadata_state.hpp"

#include <algorithm>

namespace mc::master {
namespace {
using std::memory_order::relaxed;
}  // namespace

void metadata::note_under_replicated(std::string_view key) {
  auto& r = *repair_;
  std::lock_guard lk(r.mu);
  std::string k(key);
  if (r.queued.contains(k) || r.in_flight.contains(k)) return;
  if (r.queue.size() >= opts_.max_repair_queue) return;  // the background scan finds it later
  r.queued.insert(k);
  r.queue.push_back(std::move(k));
}

void metadata::repair_done(std::string_view key) {
  auto& r = *repair_;
  std::lock_guard lk(r.mu);
  if (auto it = r.in_flight.find(std::string(key)); it != r.in_flight.end()) {
    r.in_flight.erase(it);
    r.completed.fetch_add(1, relaxed);
  }
}

result<std::vector<replica>> metadata::write_routes(std::uint64_t size, std::size_t count,
                                                    const std::vector<std::string>& exclude) const {
  auto now = clock::now();
  std::vector<std::pair<std::uint64_t, const client_entry*>> fit;
  {
    std::shared_lock clk(clients_mu_);
    for (auto& [id, c] : clients_) {
      if (health_of(*c, now) != health::healthy) continue;
      if (std::find(exclude.begin(), exclude.end(), id) != exclude.end()) continue;
      auto free = c->info.capacity > c->info.used ? c->info.capacity - c->info.used : 0;
      if (free < size) continue;
      fit.emplace_back(free, c.get());
    }
    if (fit.empty()) return fail(errc::no_available_handle);
    count = std::min(count, fit.size());
    std::partial_sort(fit.begin(), fit.begin() + static_cast<std::ptrdiff_t>(count), fit.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<replica> out;
    out.reserve(count);
    for (std::size_t i = 0; i < count; ++i)
      out.push_back(
          {fit[i].second->info.client_id, fit[i].second->info.rpc_endpoint, fit[i].second->info.transfer_endpoint});
    return out;
  }
}

bool metadata::plan_repair(const std::string& key, clock::time_point now) {
  // What the key has: its healthy live holders (the source is one of them)
  // and every holder entry (none of them may be the target).
  std::uint32_t source = 0;
  std::uint64_t version = 0, tag = 0, size = 0;
  std::vector<std::string> exclude;
  {
    auto [sp, hash] = shard_for(key);
    std::lock_guard lk(sp->mu);
    const auto* n = sp->map.find(key, hash);
    if (!n) return false;
    const auto copies = n->copies();
    if (copies <= 1) return false;
    // A copy counts while its holder is registered (a suspect one too: only
    // a holder declared dead and dropped loses its copies); the source must
    // be healthy.
    std::size_t live = 0;
    bool have_source = false;
    std::shared_lock clk(clients_mu_);
    for (std::size_t j = 0, cnt = n->count(); j < cnt; ++j) {
      const auto& h = n->at(j);
      const auto& s = slots_->slots[h.slot];
      exclude.push_back(s.id);
      if (!h.live || !s.client) continue;
      ++live;
      if (health_of(*s.client, now) != health::healthy) continue;
      if (!have_source) {
        have_source = true;
        source = h.slot;
        version = h.version;
      }
    }
    if (!have_source || live >= copies) return false;
    tag = n->repl;
    size = n->size;
  }
  auto targets = write_routes(size, 1, exclude);
  if (!targets) {
    repair_->no_target.fetch_add(1, relaxed);
    return false;
  }
  {
    std::lock_guard clk(clients_mu_);
    auto* c = slots_->slots[source].client;
    if (!c || c->repairs.size() >= client_entry::max_repairs_queued) return false;
    c->repairs.push_back({key, version, tag, std::move(targets->front())});
  }
  auto& r = *repair_;
  std::lock_guard lk(r.mu);
  r.in_flight[key] = now + opts_.repair_timeout;
  r.scheduled.fetch_add(1, relaxed);
  return true;
}

void metadata::scan_for_repairs() {
  auto& r = *repair_;
  if (counters_->replicated_keys.load(relaxed) <= 0) {
    // No replicated key: nothing to find (and no shard lock taken).
    std::lock_guard lk(r.mu);
    std::fill(r.per_shard.begin(), r.per_shard.end(), 0);
    return;
  }
  for (std::size_t k = 0; k < opts_.repair_scan_shards && k < shards_.size(); ++k) {
    std::size_t at = 0;
    {
      std::lock_guard lk(r.mu);
      at = r.scan_cursor;
      r.scan_cursor = (r.scan_cursor + 1) % shards_.size();
    }
    std::uint64_t under = 0;
    std::vector<std::string> found;
    {
      auto& s = *shards_[at];
      std::lock_guard lk(s.mu);
      std::shared_lock clk(clients_mu_);
      for (std::size_t i = 0; i < s.map.capacity(); ++i) {
        const auto* n = s.map.at(i);
        if (!n || n->repl == 0) continue;
        const auto copies = n->copies();
        std::size_t live = 0;
        for (std::size_t j = 0, cnt = n->count(); j < cnt; ++j) {
          const auto& h = n->at(j);
          live += h.live && slots_->slots[h.slot].client ? 1 : 0;
        }
        if (live == 0 || live >= copies) continue;
        ++under;
        if (found.size() < opts_.max_repair_queue) found.emplace_back(n->key());
      }
    }
    for (auto& key : found) note_under_replicated(key);
    std::lock_guard lk(r.mu);
    r.per_shard[at] = under;
  }
}

std::size_t metadata::schedule_repairs() {
  const auto now = clock::now();
  auto& r = *repair_;
  {
    // Repairs not published in time: planned again (the copy may have failed).
    std::lock_guard lk(r.mu);
    for (auto it = r.in_flight.begin(); it != r.in_flight.end();) {
      if (it->second > now) {
        ++it;
        continue;
      }
      r.timed_out.fetch_add(1, relaxed);
      if (!r.queued.contains(it->first) && r.queue.size() < opts_.max_repair_queue) {
        r.queued.insert(it->first);
        r.queue.push_back(it->first);
      }
      it = r.in_flight.erase(it);
    }
  }
  scan_for_repairs();
  std::size_t planned = 0;
  // Each queued key is looked at once per call at most.
  for (std::size_t budget = opts_.max_repair_queue; budget > 0; --budget) {
    std::string key;
    {
      std::lock_guard lk(r.mu);
      if (r.queue.empty() || r.in_flight.size() >= opts_.max_concurrent_repairs) break;
      key = std::move(r.queue.front());
      r.queue.pop_front();
      r.queued.erase(key);
    }
    if (plan_repair(key, now)) ++planned;
  }
  return planned;
}

repair_stats metadata::repairs() const {
  auto& r = *repair_;
  repair_stats out;
  std::lock_guard lk(r.mu);
  for (auto n : r.per_shard) out.under_replicated += n;
  out.queued = r.queue.size();
  out.in_flight = r.in_flight.size();
  out.scheduled = r.scheduled.load(relaxed);
  out.completed = r.completed.load(relaxed);
  out.timed_out = r.timed_out.load(relaxed);
  out.no_target = r.no_target.load(relaxed);
  out.trimmed = r.trimmed.load(relaxed);
  return out;
}

}  // namespace mc::master
