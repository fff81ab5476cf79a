// mc::master::metadata: the key -> holder map, ordered per (key, holder) by
// the holders' versions; supersede across holders; drop notices; republish.
#include "metadata_state.hpp"

#include <boost/regex.hpp>

#include <algorithm>
#include <limits>
#include <optional>
#include <unordered_set>

namespace mc::master {
namespace {
using std::memory_order::relaxed;
}  // namespace

void metadata::queue_drop(std::uint32_t holder, const std::string& key, std::uint64_t version, bool best_effort) {
  // Caller holds clients_mu_ exclusively.
  auto* cp = slots_->slots[holder].client;
  if (!cp) return;
  auto& c = *cp;
  if (best_effort && c.drops.size() >= opts_.max_pending_drops) return;
  if (c.drops.size() >= opts_.max_pending_drops) {
    c.drops.clear();  // bounded: the holder re-publishes everything instead
    c.resync = true;
    counters_->notice_overflows.fetch_add(1, relaxed);
  }
  if (!c.resync) c.drops.push_back({key, version});
}

result<void> metadata::add_replica(const std::string& key, const std::string& client_id, std::uint64_t size,
                                   std::uint64_t version, publish_kind kind, std::uint64_t epoch,
                                   std::uint64_t replication_tag) {
  if (auto r = check_key(key); !r) return r;
  if (version == 0) return fail(errc::invalid_version);
  const auto repl = replication::of(replication_tag);  // normalised: the tag came from a peer
  const auto tag = repl.tag();
  std::shared_ptr<client_entry> c;
  std::uint32_t self = 0;
  slot_table::slot* sl = nullptr;
  {
    std::shared_lock lk(clients_mu_);
    auto it = clients_.find(client_id);
    if (it == clients_.end()) return fail(errc::client_not_found);
    c = it->second;
    self = c->slot;
    // A pin: the slot stays bound to this id until released (or it becomes
    // the reference of the entry this publish adds). Its address is stable
    // (a deque) while pinned.
    sl = &slots_->slots[self];
    sl->refs.fetch_add(1, relaxed);
    sl->adds.fetch_add(1, relaxed);
    sl->publishing.fetch_add(1, relaxed);
    sl->lower_epoch(epoch);  // before the entry exists (finish_republish's skip)
  }
  bool pinned = true, stale = false, became_live = false, trimmed = false, full = false, older = false;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> superseded;  // (holder, version)
  auto [sp, hash] = shard_for(key);
  {
    std::lock_guard lk(sp->mu);
    auto& t = sp->map;
    const auto i = t.find_or_slot(key, hash);
    auto* n = t.at(i);
    const auto buried = n ? 0 : sp->grave_of(key);
    if (!n && version <= buried) {
      // The key was removed after a value at least this new: this is an
      // older write arriving late (or the removed copy re-published).
      stale = older = true;
    } else if (!n) {
      sp->unbury(key);  // a removal older than this write, or an orphan
      n = shard::node::make(key, hash);
      n->size = size;
      n->repl = tag;
      n->first = {version, epoch, self, true};
      t.put(i, n);
      ++t.size;
      became_live = true;
      pinned = false;
      counters_->changed({}, counters::of(n));
    } else {
      const auto before = counters::of(n);
      constexpr auto none = std::numeric_limits<std::size_t>::max();
      std::size_t pos = none, others_live = 0;
      std::uint64_t others_max = 0, others_live_max = 0;  // the other holders' newest versions
      bool idempotent = false;
      for (std::size_t j = 0, cnt = n->count(); j < cnt; ++j) {
        auto& h = n->at(j);
        if (h.slot == self) {
          pos = j;
          continue;
        }
        others_max = std::max(others_max, h.version);
        if (h.live) {
          ++others_live;
          others_live_max = std::max(others_live_max, h.version);
        }
      }
      // A copy of the live group's value: joins the other copies.
      const bool joins = tag != 0 && n->repl == tag && others_live > 0;
      if (pos != none) {
        auto& h = n->at(pos);
        if (version < h.version || (version == h.version && !h.live)) {
          stale = true;
        } else if (version == h.version) {  // the same copy again: idempotent
          h.epoch = std::max(h.epoch, epoch);
          idempotent = true;
        }
      }
      // Across holders a key's values are ordered by version (taken when
      // their put started): an older one never replaces a newer one, however
      // late it arrives. A republish also yields to an equal live one.
      if (!stale && !idempotent && !joins &&
          (version < others_max || (kind == publish_kind::republish && others_live > 0 && version <= others_live_max)))
        stale = older = true;
      if (!stale && !idempotent && joins && others_live >= repl.copies) {
        // The group has its copies: this one is surplus (trimmed by its holder).
        stale = true;
        trimmed = true;
      }
      if (!stale && !idempotent) {
        if (pos == none) {
          n->push({version, epoch, self, true});
          became_live = true;
          pinned = false;
        } else {
          auto& h = n->at(pos);
          became_live = !h.live;
          h = {version, std::max(h.epoch, epoch), self, true};
        }
        n->size = size;
        if (!joins) {
          n->repl = tag;
          for (std::size_t j = 0, cnt = n->count(); j < cnt; ++j) {
            auto& h = n->at(j);
            if (h.live && h.slot != self) {
              h.live = false;
              superseded.emplace_back(h.slot, h.version);
            }
          }
        }
        // A put that committed fewer copies than asked is found by the
        // background scan (not queued here: its other copies may be on the way).
        full = joins && others_live + 1 >= repl.copies;
      }
      counters_->changed(before, counters::of(n));
    }
  }
  // Release: a finish_republish that reads 0 sees this publish's entry.
  sl->publishing.fetch_sub(1, std::memory_order_release);
  if (full) repair_done(key);
  if (trimmed) repair_->trimmed.fetch_add(1, relaxed);
  if (became_live) c->keys.fetch_add(1, relaxed);
  if (!superseded.empty()) {
    counters_->superseded.fetch_add(superseded.size(), relaxed);
    std::lock_guard clk(clients_mu_);
    for (auto& [slot, v] : superseded) {
      if (auto* h = slots_->slots[slot].client) h->keys.fetch_sub(1, relaxed);
      queue_drop(slot, key, v);
    }
    if (pinned) unref(self, 1);
  } else if (pinned) {
    // The client is registered (c): its slot is not freed now, but it may
    // have left since; the exclusive lock is taken only then.
    bool gone = false;
    {
      std::shared_lock clk(clients_mu_);
      auto& s = slots_->slots[self];
      gone = s.refs.fetch_sub(1, relaxed) == 1 && !s.client;
    }
    if (gone) {
      std::lock_guard clk(clients_mu_);
      slots_->try_free(self);
    }
  }
  if (stale) {
    counters_->stale_publishes.fetch_add(1, relaxed);
    return fail(older ? errc::superseded : errc::invalid_version);
  }
  return {};
}

result<void> metadata::remove_replica(const std::string& key, const std::string& client_id, std::uint64_t version) {
  if (auto r = check_key(key); !r) return r;
  std::uint32_t slot = 0;
  {
    // Also a gone client's entries (left by a publish racing its departure)
    // can be removed: by its id's slot while it is bound.
    std::shared_lock lk(clients_mu_);
    auto it = slots_->by_id.find(client_id);
    if (it == slots_->by_id.end()) return fail(errc::object_not_found);
    slot = it->second;
    slots_->slots[slot].refs.fetch_add(1, relaxed);  // pinned until the end
  }
  auto [sp, hash] = shard_for(key);
  bool found = false, newer = false, was_live = false;
  {
    std::lock_guard lk(sp->mu);
    auto& t = sp->map;
    const auto i = t.index_of(key, hash);
    if (i != shard::table::npos) {
      auto* n = t.at(i);
      for (std::size_t j = 0, cnt = n->count(); j < cnt; ++j) {
        auto& h = n->at(j);
        if (h.slot != slot) continue;
        found = true;
        if (h.version > version) {  // a fresher copy was published since: keep it
          newer = true;
        } else {
          was_live = h.live;
          const auto before = counters::of(n);
          const auto last_version = h.version;  // the key's newest when it is the last entry
          if (!n->erase(j)) {
            sp->bury(key, last_version, grave_budget());
            t.erase_at(i);
            counters_->changed(before, {});
          } else {
            counters_->changed(before, counters::of(n));
            if (was_live && n->copies() > 1 && n->any_live()) note_under_replicated(key);  // e.g. an evicted replica
          }
        }
        break;
      }
    }
  }
  {
    std::lock_guard clk(clients_mu_);
    if (was_live)
      if (auto* c = slots_->slots[slot].client) c->keys.fetch_sub(1, relaxed);
    unref(slot, found && !newer ? 2 : 1);
  }
  if (!found) return fail(errc::object_not_found);
  if (newer) {
    counters_->stale_removals.fetch_add(1, relaxed);
    return fail(errc::invalid_version);
  }
  return {};
}

result<std::vector<replica>> metadata::remove_key(const std::string& key) {
  if (auto r = check_key(key); !r) return r.error();
  std::vector<holder_ref> holders;
  {
    auto [sp, hash] = shard_for(key);
    std::lock_guard lk(sp->mu);
    auto& t = sp->map;
    const auto i = t.index_of(key, hash);
    if (i == shard::table::npos) {
      sp->bury_orphan(key);  // its last holder, dropped as silent, must not bring it back
      return fail(errc::object_not_found);
    }
    auto* n = t.at(i);
    for (std::size_t j = 0, cnt = n->count(); j < cnt; ++j)
      holders.push_back({n->at(j).slot, n->at(j).live, n->at(j).version});
    sp->bury(key, n->newest_version(), grave_budget());
    counters_->changed(counters::of(n), {});
    t.erase_at(i);
  }
  // Superseded holders are returned too: they may still hold an old copy.
  // Each is also sent a drop notice: a holder the caller cannot reach now
  // (partitioned) drops its copy at its next heartbeat instead of serving
  // it to its local readers.
  return release_holders(holders, key);
}

std::vector<replica> metadata::release_holders(const std::vector<holder_ref>& holders, const std::string& key) {
  std::vector<replica> out;
  std::lock_guard clk(clients_mu_);
  for (auto& h : holders) {
    if (auto* c = slots_->slots[h.slot].client) {
      if (h.live) c->keys.fetch_sub(1, relaxed);
      out.push_back({c->info.client_id, c->info.rpc_endpoint, c->info.transfer_endpoint});
      queue_drop(h.slot, key, h.version, true);
    }
    unref(h.slot, 1);
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
      auto& t = sp->map;
      // erase_at moves later entries back into i: i is looked at again.
      for (std::size_t i = 0; i < t.capacity();) {
        auto* n = t.at(i);
        if (!n) {
          ++i;
          continue;
        }
        ++scanned;
        bool match = all;
        if (!all) {
          try {
            // Boost.Regex bounds backtracking: a pathological pattern throws
            // instead of stalling the master.
            match = boost::regex_search(n->key_data(), n->key_data() + n->key_len, *re);
          } catch (const std::exception&) {
            too_complex = true;
            break;
          }
        }
        if (!match) {
          ++i;
          continue;
        }
        if (page.removed.size() >= limit) {
          full = true;  // this shard again next call
          break;
        }
        std::vector<holder_ref> hs;
        for (std::size_t j = 0, cnt = n->count(); j < cnt; ++j)
          hs.push_back({n->at(j).slot, n->at(j).live, n->at(j).version});
        sp->bury(n->key(), n->newest_version(), grave_budget());
        page.removed.push_back({std::string(n->key()), {}});
        refs.push_back(std::move(hs));
        counters_->changed(counters::of(n), {});
        t.erase_at(i);
      }
    }
    if (too_complex || full) break;
    ++shard;
    if (scanned >= scan_budget) break;
  }
  for (std::size_t i = 0; i < page.removed.size(); ++i)
    page.removed[i].holders = release_holders(refs[i], page.removed[i].key);
  if (too_complex && page.removed.empty()) return fail(errc::invalid_params);
  page.next_shard = shard;
  return page;
}

holder_notices metadata::take_notices(const std::string& client_id, std::size_t max, std::size_t max_repairs,
                                      std::optional<notice_ack> ack) {
  holder_notices out;
  std::lock_guard lk(clients_mu_);
  auto it = clients_.find(client_id);
  if (it == clients_.end()) return out;
  auto& c = *it->second;
  // The next (up to `max`) drops and the resync flag leave the queue.
  auto take = [&](std::vector<key_version>& drops, bool& resync) {
    auto n = std::min(max, c.drops.size());
    drops.assign(std::make_move_iterator(c.drops.begin()), std::make_move_iterator(c.drops.begin() + n));
    c.drops.erase(c.drops.begin(), c.drops.begin() + n);
    resync = std::exchange(c.resync, false);
  };
  if (!ack) {
    take(out.drops, out.resync);
  } else {
    if (c.sent_id != 0 && ack->epoch == c.notice_epoch && ack->id == c.sent_id) {
      c.sent_id = 0;  // delivered and applied
      c.sent_drops.clear();
      c.sent_resync = false;
    }
    if (c.sent_id == 0) {
      take(c.sent_drops, c.sent_resync);
      if (!c.sent_drops.empty() || c.sent_resync) c.sent_id = ++c.last_id;
    } else {
      counters_->notices_resent.fetch_add(c.sent_drops.size(), relaxed);
    }
    out.drops = c.sent_drops;
    out.resync = c.sent_resync;
    out.notice_epoch = c.notice_epoch;
    out.notice_id = c.sent_id;
  }
  auto r = std::min(max_repairs, c.repairs.size());
  out.repairs.assign(std::make_move_iterator(c.repairs.begin()), std::make_move_iterator(c.repairs.begin() + r));
  c.repairs.erase(c.repairs.begin(), c.repairs.begin() + r);
  return out;
}

ordering_stats metadata::ordering() const {
  return {counters_->stale_publishes.load(relaxed), counters_->stale_removals.load(relaxed),
          counters_->superseded.load(relaxed), counters_->notice_overflows.load(relaxed),
          counters_->notices_resent.load(relaxed)};
}

void metadata::forget_removals() {
  for (auto& s : shards_) {
    std::lock_guard lk(s->mu);
    s->graves.clear();
    s->grave_index.clear();
    s->grave_bytes = 0;
  }
}

namespace {

std::uint32_t reverse_bits(std::uint32_t v) noexcept {
  v = ((v >> 1) & 0x55555555u) | ((v & 0x55555555u) << 1);
  v = ((v >> 2) & 0x33333333u) | ((v & 0x33333333u) << 2);
  v = ((v >> 4) & 0x0F0F0F0Fu) | ((v & 0x0F0F0F0Fu) << 4);
  v = ((v >> 8) & 0x00FF00FFu) | ((v & 0x00FF00FFu) << 8);
  return (v >> 16) | (v << 16);
}

/// The home slot after `c` in reverse-binary order for a table with `mask`
/// (Redis' SCAN cursor): the bits above the mask are set before the
/// reversed increment, so a cursor stays valid when the table grows (the
/// slots that split from already visited ones are skipped or visited
/// again, never missed). 0 when the table has been walked.
std::uint32_t next_home(std::uint32_t c, std::uint32_t mask) noexcept {
  c |= ~mask;
  return reverse_bits(reverse_bits(c) + 1);
}

}  // namespace

result<metadata::key_page> metadata::scan_keys(const std::string& prefix, std::uint64_t cursor,
                                               std::size_t limit) const {
  if (limit == 0) return fail(errc::invalid_params);
  auto shard_index = static_cast<std::size_t>(cursor >> 32);
  auto c = static_cast<std::uint32_t>(cursor);
  if (shard_index >= shards_.size()) return fail(errc::out_of_range);
  const std::size_t budget =
      std::max(scan_slot_budget, std::min(limit, std::numeric_limits<std::size_t>::max() / 4) * 4);
  key_page page;
  std::vector<std::pair<std::string, key_info>> group;
  std::size_t visited = 0;
  while (shard_index < shards_.size() && page.keys.size() < limit && visited < budget) {
    auto& s = *shards_[shard_index];
    {
      std::lock_guard lk(s.mu);
      std::shared_lock clk(clients_mu_);
      const auto cap = s.map.capacity();
      if (cap == 0) {
        c = 0;
      } else {
        const auto mask = static_cast<std::uint32_t>(cap - 1);
        while (page.keys.size() < limit && visited < budget) {
          const std::uint32_t home = c & mask;
          group.clear();
          // A key with this home sits at it or after it, before the next
          // empty slot (linear probing, no tombstones).
          for (std::size_t i = home; s.map.at(i) != nullptr; i = (i + 1) & mask) {
            auto* n = s.map.at(i);
            if ((n->hash & mask) != home || !n->key().starts_with(prefix) || !n->any_live()) continue;
            key_info ki;
            ki.size = n->size;
            for (std::size_t j = 0, cnt = n->count(); j < cnt; ++j) {
              auto& h = n->at(j);
              if (!h.live) continue;
              if (auto* cl = slots_->slots[h.slot].client)
                ki.replicas.push_back({cl->info.client_id, cl->info.rpc_endpoint, cl->info.transfer_endpoint});
            }
            group.emplace_back(std::string(n->key()), std::move(ki));
          }
          // One home slot's keys stay together: the cursor can only resume
          // at a home slot.
          if (!page.keys.empty() && page.keys.size() + group.size() > limit) break;
          for (auto& k : group) page.keys.push_back(std::move(k));
          ++visited;
          c = next_home(c, mask);
          if (c == 0) break;
        }
      }
    }
    if (c != 0) break;  // stopped inside this shard: resume there
    ++shard_index;      // this shard is done
  }
  page.cursor = shard_index >= shards_.size() ? 0 : (static_cast<std::uint64_t>(shard_index) << 32) | c;
  return page;
}

std::vector<std::pair<std::string, key_info>> metadata::keys(const std::string& prefix, std::size_t limit) const {
  std::vector<std::pair<std::string, key_info>> out;
  if (limit == 0) return out;
  std::unordered_set<std::string> seen;
  std::uint64_t cursor = 0;
  do {
    auto page = scan_keys(prefix, cursor, limit - out.size());
    if (!page) break;
    for (auto& k : page->keys) {
      if (out.size() >= limit) break;
      if (seen.insert(k.first).second) out.push_back(std::move(k));
    }
    cursor = page->cursor;
  } while (cursor != 0 && out.size() < limit);
  return out;
}

std::uint64_t metadata::key_count() const {
  return static_cast<std::uint64_t>(std::max<std::int64_t>(0, counters_->live_keys.load(relaxed)));
}

std::uint64_t metadata::replica_count() const {
  return static_cast<std::uint64_t>(std::max<std::int64_t>(0, counters_->live_entries.load(relaxed)));
}

}  // namespace mc::master
