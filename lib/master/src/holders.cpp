// mc::master::metadata: dropping holders' entries. Entries are indexed by
// key only, so dropping a holder's entries is a pass over the key table; the
// code here makes as few passes as it can: one per sweep for every client it
// drops, none for a client without entries or a finish_republish with
// nothing older than its epoch, and none at all when a master stops leading
// (reset sets the tables aside; reclaim frees them a chunk at a time).
#include "metadata_state.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <unordered_map>

namespace mc::master {
namespace {
using std::memory_order::relaxed;
}  // namespace

std::vector<std::pair<std::uint64_t, std::uint64_t>> metadata::drop_holder_entries(
    std::span<const std::uint32_t> slots, std::optional<std::uint64_t> below_epoch, bool orphans) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out(slots.size());
  if (slots.empty()) return out;
  // Slot -> its index in `slots` (-1: not dropped): O(1) per entry.
  const auto top = *std::max_element(slots.begin(), slots.end());
  std::vector<std::int32_t> pos(std::size_t{top} + 1, -1);
  for (std::size_t k = 0; k < slots.size(); ++k) pos[slots[k]] = static_cast<std::int32_t>(k);
  counters_->scans.fetch_add(1, relaxed);
  for (auto& s : shards_) {
    std::lock_guard lk(s->mu);
    auto& t = s->map;
    for (std::size_t i = 0; i < t.capacity();) {
      auto* n = t.at(i);
      if (!n) {
        ++i;
        continue;
      }
      bool gone = false;
      const auto before = counters::of(n);
      for (std::size_t j = 0; j < n->count();) {
        auto& h = n->at(j);
        const auto k = h.slot <= top ? pos[h.slot] : -1;
        if (k < 0 || (below_epoch && h.epoch >= *below_epoch)) {
          ++j;
          continue;
        }
        auto& [removed, live] = out[static_cast<std::size_t>(k)];
        ++removed;
        const bool was_live = h.live;
        const auto version = h.version;
        live += was_live ? 1 : 0;
        if (!n->erase(j)) {
          // Its last holder went silent, the key was not removed: an orphan
          // (a remove while the holder is away still counts when it returns).
          if (orphans) s->bury(n->key(), version, grave_budget(), true);
          t.erase_at(i);  // entries after i may move back into i: looked at again
          gone = true;
          break;
        }
        if (was_live && n->copies() > 1 && n->any_live()) note_under_replicated(n->key());
      }
      counters_->changed(before, gone ? counters::live_state{} : counters::of(n));
      if (!gone) ++i;
    }
  }
  return out;
}

// Every entry, also those published with epoch UINT64_MAX (a bound of
// "older than UINT64_MAX" left them behind for a client that was gone).
void metadata::drop_client_replicas(std::span<const std::uint32_t> slots, bool orphans) {
  // A gone client cannot gain entries (a publish needs it registered), so a
  // slot whose only reference is forget_client's pin names no entry.
  if (slots.empty()) return;
  std::vector<std::uint32_t> scan;
  {
    std::shared_lock lk(clients_mu_);
    for (auto s : slots)
      if (slots_->slots[s].refs.load(relaxed) > 1) scan.push_back(s);
  }
  if (scan.empty()) counters_->scans_skipped.fetch_add(1, relaxed);
  auto removed = drop_holder_entries(scan, std::nullopt, orphans);
  std::lock_guard lk(clients_mu_);
  for (std::size_t k = 0; k < scan.size(); ++k) unref(scan[k], removed[k].first);
  for (auto s : slots) unref(s, 1);  // forget_client's pin
}

result<std::uint64_t> metadata::finish_republish(const std::string& client_id, std::uint64_t epoch) {
  std::shared_ptr<client_entry> c;
  slot_table::slot* sl = nullptr;
  std::uint64_t adds = 0;
  bool quiet = false, skip = false;
  {
    std::shared_lock lk(clients_mu_);
    auto it = clients_.find(client_id);
    if (it == clients_.end()) return fail(errc::client_not_found);
    c = it->second;
    sl = &slots_->slots[c->slot];
    sl->refs.fetch_add(1, relaxed);  // pinned until the end
    adds = sl->adds.load(relaxed);
    quiet = sl->publishing.load(std::memory_order_acquire) == 0;
    // No entry of this holder is older than `epoch`: nothing to drop.
    skip = sl->min_epoch.load(relaxed) >= epoch;
  }
  std::uint64_t removed = 0;
  if (skip) {
    counters_->scans_skipped.fetch_add(1, relaxed);
  } else {
    const std::uint32_t one[] = {c->slot};
    auto [r, live] = drop_holder_entries(one, epoch).front();
    removed = r;
    c->keys.fetch_sub(std::min<std::uint64_t>(live, c->keys.load(relaxed)), relaxed);
  }
  std::lock_guard lk(clients_mu_);
  // The scan saw every entry the holder had (no publish was between its pin
  // and its entry when it began, none pinned since): what is left is of
  // `epoch` or later. (Publishes lower the bound under the shared lock.)
  if (!skip && quiet && sl->adds.load(relaxed) == adds && sl->min_epoch.load(relaxed) < epoch)
    sl->min_epoch.store(epoch, relaxed);
  unref(c->slot, removed + 1);
  return removed;
}

void metadata::reset() {
  {
    // The clients first: from here on no publish can pin their slots. Slots
    // that still name entries stay bound until reclaim() released them (a
    // client registering again meanwhile gets its slot back).
    std::lock_guard lk(clients_mu_);
    std::vector<std::uint32_t> gone;
    for (auto& [id, c] : clients_) {
      auto& s = slots_->slots[c->slot];
      if (s.client == c.get()) s.client = nullptr;
      // No publish between its pin and its entry (those pin under the
      // shared lock): every entry naming the slot is in the tables set aside
      // below, none will be in the new ones.
      if (s.publishing.load(std::memory_order_acquire) == 0) s.min_epoch.store(slot_table::slot::no_epoch, relaxed);
      gone.push_back(c->slot);
    }
    clients_.clear();
    for (auto s : gone) slots_->try_free(s);
  }
  std::vector<std::unique_ptr<shard::table>> old;
  std::uint64_t keys = 0;
  for (auto& s : shards_) {
    auto t = std::make_unique<shard::table>();
    {
      std::lock_guard lk(s->mu);
      t->swap(s->map);
    }
    keys += t->size;
    if (t->size) old.push_back(std::move(t));
  }
  {
    std::lock_guard lk(repair_->mu);
    repair_->queue.clear();
    repair_->queued.clear();
    repair_->in_flight.clear();
    std::fill(repair_->per_shard.begin(), repair_->per_shard.end(), 0);
  }
  std::lock_guard lk(retired_->mu);
  for (auto& t : old) retired_->tables.insert(retired_->tables.begin(), std::move(t));  // the back is being freed
  retired_->nodes.fetch_add(keys, relaxed);
}

std::size_t metadata::reclaim(std::size_t max_keys) {
  std::lock_guard lk(retired_->mu);
  auto& r = *retired_;
  counters::live_state freed;
  std::unordered_map<std::uint32_t, std::uint64_t> refs;  // slot -> entries freed
  std::size_t done = 0;
  while (done < max_keys && !r.tables.empty()) {
    auto& t = *r.tables.back();
    for (; r.cursor < t.capacity() && done < max_keys; ++r.cursor) {
      auto* n = t.slots[r.cursor];
      if (!n) continue;
      const auto c = counters::of(n);
      freed.keys += c.keys;
      freed.entries += c.entries;
      freed.replicated += c.replicated;
      for (std::size_t j = 0, cnt = n->count(); j < cnt; ++j) ++refs[n->at(j).slot];
      shard::node::destroy(n);
      t.slots[r.cursor] = nullptr;
      --t.size;
      ++done;
    }
    if (r.cursor == t.capacity()) {
      r.tables.pop_back();
      r.cursor = 0;
    }
  }
  counters_->changed(freed, {});
  r.nodes.fetch_sub(done, relaxed);
  if (!refs.empty()) {
    std::lock_guard clk(clients_mu_);
    for (auto [slot, n] : refs) unref(slot, n);
  }
  return r.nodes.load(relaxed);
}

table_stats metadata::table() const {
  return {counters_->scans.load(relaxed), counters_->scans_skipped.load(relaxed), retired_->nodes.load(relaxed)};
}

}  // namespace mc::master
