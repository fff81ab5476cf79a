#pragma once
// Internals of mc::master::metadata (not a public header): the client entries,
// the interned client slots and the sharded key table.
// Lock order: a shard's mu before clients_mu_.
#include "mc/master/metadata.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace mc::master {

struct metadata::client_entry {
  client_info info;
  clock::time_point last_heartbeat;
  std::uint32_t slot = 0;              ///< its slot in slot_table (constant)
  std::atomic<std::uint64_t> keys{0};  ///< live (routable) entries
  // Guarded by clients_mu_: drop notices for superseded copies, bounded by
  // metadata_options::max_pending_drops; `resync` once they overflowed.
  std::deque<key_version> drops;
  bool resync = false;
  // Guarded by clients_mu_: acknowledged delivery (take_notices with an ack).
  // The drops and resync flag of the last reply, sent again until the holder
  // acknowledges (notice_epoch, sent_id); sent_id 0: none outstanding.
  std::uint64_t notice_epoch = 0;  ///< distinct per entry (slot_table::next_notice_epoch)
  std::uint64_t sent_id = 0;
  std::uint64_t last_id = 0;
  std::vector<key_version> sent_drops;
  bool sent_resync = false;
  // Guarded by clients_mu_: repairs to run (bounded by max_repairs_queued).
  std::deque<repair_task> repairs;
  static constexpr std::size_t max_repairs_queued = 1024;
};

/// Interned client ids: key entries name a holder by a u32 slot instead of a
/// string. A slot stays bound to one id while any entry (or an operation in
/// flight: a pin) refers to it, so a slot is never reused under an entry that
/// still names it (no ABA: a new client never inherits another's entries). A
/// slot is freed once its client is gone (unregistered or swept) and nothing
/// refers to it; a client registering again under the same id while its slot
/// is still bound gets that slot back (its entries were keyed by its id
/// before interning too). Bounded by the registered clients plus the gone
/// ones with entries left. Guarded by clients_mu_: `refs` may change under a
/// shared lock (atomic), everything else under the exclusive lock.
struct metadata::slot_table {
  struct slot {
    std::string id;                      ///< "" while free
    client_entry* client = nullptr;      ///< the registered client, nullptr when gone
    std::atomic<std::uint64_t> refs{0};  ///< entries naming the slot + pins
    /// A lower bound of the epochs of the entries naming the slot: lowered
    /// by every publish when it pins the slot (before its entry exists),
    /// raised by a finish_republish whose scan no publish overlapped. A
    /// finish_republish(epoch) with min_epoch >= epoch has nothing to drop
    /// and skips its scan of the table (after a failover every entry came
    /// from the re-publish). Lowered under the shared lock, raised under the
    /// exclusive one.
    std::atomic<std::uint64_t> min_epoch{no_epoch};
    std::atomic<std::uint64_t> adds{0};        ///< publishes that pinned the slot
    std::atomic<std::uint64_t> publishing{0};  ///< publishes pinned and not done with their shard

    static constexpr std::uint64_t no_epoch = ~std::uint64_t{0};
    /// Lowers min_epoch to `epoch` (shared lock at least).
    void lower_epoch(std::uint64_t epoch) noexcept {
      auto cur = min_epoch.load(std::memory_order_relaxed);
      while (epoch < cur && !min_epoch.compare_exchange_weak(cur, epoch, std::memory_order_relaxed)) {}
    }
  };
  std::deque<slot> slots;  // a deque: slots never move
  /// Notice epochs of new client entries: random start (a holder's ack from
  /// an earlier master or registration never matches), then counted.
  std::uint64_t next_notice_epoch = std::random_device{}() | (std::uint64_t{std::random_device{}()} << 32) | 1;
  std::vector<std::uint32_t> free;
  std::unordered_map<std::string, std::uint32_t> by_id;

  /// The slot of `id`, bound anew when it has none. Exclusive lock.
  std::uint32_t bind(const std::string& id) {
    if (auto it = by_id.find(id); it != by_id.end()) return it->second;
    std::uint32_t s;
    if (!free.empty()) {
      s = free.back();
      free.pop_back();
    } else {
      s = static_cast<std::uint32_t>(slots.size());
      slots.emplace_back();
    }
    slots[s].id = id;
    by_id.emplace(id, s);
    return s;
  }
  /// Frees `s` when its client is gone and nothing refers to it. Exclusive lock.
  void try_free(std::uint32_t s) {
    auto& x = slots[s];
    if (x.client || x.refs.load(std::memory_order_relaxed) != 0 || x.id.empty()) return;
    by_id.erase(x.id);
    x.min_epoch.store(slot::no_epoch, std::memory_order_relaxed);  // no entry names it
    x.id.clear();
    x.id.shrink_to_fit();
    free.push_back(s);
  }
};

struct metadata::shard {
  /// One holder's entry for a key. At most one holder of a key is live; the
  /// others are superseded copies, kept so that their stale publishes are
  /// refused, until the holder confirms the drop (remove_replica), re-publishes
  /// without it (finish_republish) or leaves.
  struct holder {
    std::uint64_t version = 0;
    std::uint64_t epoch = 0;
    std::uint32_t slot = 0;  ///< slot_table index of the holder
    bool live = true;
  };
  /// One key: a single allocation holding the key's bytes, its size and its
  /// first holder; further holders (superseded copies, rare) in `rest`.
  struct node {
    std::uint64_t size = 0;  ///< of the last accepted publish
    std::uint64_t repl = 0;  ///< replication::tag() of the live copies' group (0 = single copy)
    holder first;
    std::vector<holder>* rest = nullptr;
    std::uint32_t hash = 0;  ///< low bits of the key's hash
    std::uint32_t key_len = 0;

    const char* key_data() const noexcept { return reinterpret_cast<const char*>(this + 1); }
    std::string_view key() const noexcept { return {key_data(), key_len}; }
    std::size_t count() const noexcept { return 1 + (rest ? rest->size() : 0); }
    holder& at(std::size_t i) noexcept { return i == 0 ? first : (*rest)[i - 1]; }
    const holder& at(std::size_t i) const noexcept { return i == 0 ? first : (*rest)[i - 1]; }
    void push(const holder& h) {
      if (!rest) rest = new std::vector<holder>();
      rest->push_back(h);
    }
    /// Removes holder i, keeping the order of the others; false when it was
    /// the last one (the node must then be removed).
    bool erase(std::size_t i) {
      if (!rest || rest->empty()) return false;
      if (i == 0) {
        first = rest->front();
        rest->erase(rest->begin());
      } else {
        rest->erase(rest->begin() + static_cast<std::ptrdiff_t>(i - 1));
      }
      if (rest->empty()) {
        delete rest;
        rest = nullptr;
      }
      return true;
    }
    bool any_live() const noexcept {
      for (std::size_t i = 0, n = count(); i < n; ++i)
        if (at(i).live) return true;
      return false;
    }
    /// The newest version among the key's entries (live or superseded).
    std::uint64_t newest_version() const noexcept {
      std::uint64_t v = 0;
      for (std::size_t i = 0, n = count(); i < n; ++i) v = std::max(v, at(i).version);
      return v;
    }
    std::size_t live_count() const noexcept {
      std::size_t k = 0;
      for (std::size_t i = 0, n = count(); i < n; ++i) k += at(i).live ? 1 : 0;
      return k;
    }
    /// Copies the live group asked for (1 = not replicated).
    std::uint32_t copies() const noexcept { return replication::of(repl).copies; }

    static node* make(std::string_view key, std::uint32_t hash) {
      void* p = ::operator new(sizeof(node) + key.size());
      auto* n = new (p) node();
      n->hash = hash;
      n->key_len = static_cast<std::uint32_t>(key.size());
      std::memcpy(reinterpret_cast<char*>(n + 1), key.data(), key.size());
      return n;
    }
    static void destroy(node* n) noexcept {
      delete n->rest;
      n->~node();
      ::operator delete(n);
    }
  };
  static_assert(sizeof(node) == 56);

  /// Open addressing with linear probing over node pointers; removal shifts
  /// the following entries back (no tombstones). Load factor <= 3/4. Beside
  /// each slot a 16-bit tag of its key's hash (a parallel array: pointers
  /// stay plain, so leak checkers and debuggers see them), so probing past
  /// other keys rarely touches their nodes: a lookup costs about one table
  /// and one node cache miss.
  struct table {
    std::vector<node*> slots;         ///< nullptr: empty
    std::vector<std::uint16_t> tags;  ///< tag_of(hash) of slots[i]'s key
    std::size_t size = 0;

    static constexpr std::size_t npos = static_cast<std::size_t>(-1);

    table() = default;
    table(const table&) = delete;
    table& operator=(const table&) = delete;
    ~table() {
      for (auto* n : slots)
        if (n) node::destroy(n);
    }
    static std::uint16_t tag_of(std::uint32_t hash) noexcept {
      // Mixed, so that it differs between keys of one run (same low bits).
      return static_cast<std::uint16_t>((hash * 2654435769u) >> 16);
    }
    std::size_t capacity() const noexcept { return slots.size(); }
    void swap(table& o) noexcept {
      slots.swap(o.slots);
      tags.swap(o.tags);
      std::swap(size, o.size);
    }
    std::size_t mask() const noexcept { return slots.size() - 1; }
    node* at(std::size_t i) const noexcept { return slots[i]; }
    void put(std::size_t i, node* n) noexcept {
      slots[i] = n;
      tags[i] = tag_of(n->hash);
    }
    /// The index of `key`, or of the empty slot where it would go.
    std::size_t probe(std::string_view key, std::uint32_t hash) const noexcept {
      const auto tag = tag_of(hash);
      auto i = hash & mask();
      for (;; i = (i + 1) & mask()) {
        const auto* n = slots[i];
        if (!n) return i;
        if (tags[i] != tag) continue;
        if (n->hash == hash && n->key() == key) return i;
      }
    }
    /// The index of `key`'s node, npos when absent.
    std::size_t index_of(std::string_view key, std::uint32_t hash) const noexcept {
      if (slots.empty()) return npos;
      auto i = probe(key, hash);
      return slots[i] ? i : npos;
    }
    node* find(std::string_view key, std::uint32_t hash) const noexcept {
      auto i = index_of(key, hash);
      return i == npos ? nullptr : slots[i];
    }
    /// Makes room for one more node, then the index of `key`'s node or of
    /// the empty slot to put it in (the caller puts it and counts it).
    std::size_t find_or_slot(std::string_view key, std::uint32_t hash) {
      if ((size + 1) * 4 > slots.size() * 3) grow();
      return probe(key, hash);
    }
    void grow() {
      const std::size_t n = slots.empty() ? 16 : slots.size() * 2;
      std::vector<node*> old(n, nullptr);
      std::vector<std::uint16_t> old_tags(n, 0);
      old.swap(slots);
      old_tags.swap(tags);
      for (std::size_t k = 0; k < old.size(); ++k)
        if (auto* x = old[k]) {
          auto i = x->hash & mask();
          while (slots[i]) i = (i + 1) & mask();
          slots[i] = x;
          tags[i] = old_tags[k];
        }
    }
    /// Removes (and destroys) the node at i; the entries after it may move
    /// back, into i at most (never to an index before i, except from a
    /// wrapped-around run: index order scans may see such an entry twice).
    void erase_at(std::size_t i) noexcept {
      node::destroy(slots[i]);
      --size;
      auto hole = i;
      for (auto j = (i + 1) & mask(); slots[j]; j = (j + 1) & mask()) {
        auto home = slots[j]->hash & mask();
        // Move j into the hole unless its home lies cyclically in (hole, j].
        bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (stays) continue;
        slots[hole] = slots[j];
        tags[hole] = tags[j];
        hole = j;
      }
      slots[hole] = nullptr;
    }
  };

  /// Removed keys with the newest version they had (metadata_options::
  /// removed_key_bytes), oldest removal first. Guarded by mu. An *orphan*
  /// is a key whose last holder was dropped as silent rather than removed:
  /// it refuses nothing, but a remove_key of the absent key turns it into a
  /// removal at that version, so the holder's re-publish when it comes back
  /// cannot bring the removed value back.
  struct grave {
    std::string key;
    std::uint64_t version = 0;
    bool orphan = false;
  };
  static constexpr std::size_t grave_overhead = 64;
  std::list<grave> graves;
  std::unordered_map<std::string_view, std::list<grave>::iterator> grave_index;  // views into graves
  std::size_t grave_bytes = 0;

  /// Remembers that `key` was removed (or, `orphan`, lost its last holder
  /// to a sweep) at `version` (the newer of two; a removal stays one), then
  /// forgets the oldest entries beyond `budget` bytes.
  void bury(std::string_view key, std::uint64_t version, std::size_t budget, bool orphan = false) {
    if (budget == 0) return;
    if (auto it = grave_index.find(key); it != grave_index.end()) {
      it->second->version = std::max(it->second->version, version);
      it->second->orphan = it->second->orphan && orphan;
      return;
    }
    graves.push_back({std::string(key), version, orphan});
    grave_index.emplace(graves.back().key, std::prev(graves.end()));
    grave_bytes += key.size() + grave_overhead;
    while (grave_bytes > budget && !graves.empty()) {
      auto& f = graves.front();
      grave_bytes -= f.key.size() + grave_overhead;
      grave_index.erase(f.key);
      graves.pop_front();
    }
  }
  /// The removed value's version of `key`; 0 when not remembered (or only
  /// as an orphan).
  std::uint64_t grave_of(std::string_view key) const {
    auto it = grave_index.find(key);
    return it == grave_index.end() || it->second->orphan ? 0 : it->second->version;
  }
  /// A remove of the absent `key`: an orphan becomes a removal at its
  /// version (nothing when `key` is not an orphan).
  void bury_orphan(std::string_view key) {
    if (auto it = grave_index.find(key); it != grave_index.end()) it->second->orphan = false;
  }
  /// Forgets `key`'s removal (the key exists again).
  void unbury(std::string_view key) {
    auto it = grave_index.find(key);
    if (it == grave_index.end()) return;
    auto g = it->second;
    grave_index.erase(it);
    grave_bytes -= g->key.size() + grave_overhead;
    graves.erase(g);
  }

  mutable std::mutex mu;
  table map;
};

/// The tables reset() set aside, freed a chunk at a time by reclaim().
/// `mu` is taken before clients_mu_ (and never under another lock).
struct metadata::retired_tables {
  std::mutex mu;
  std::vector<std::unique_ptr<shard::table>> tables;  ///< the last one is being freed
  std::size_t cursor = 0;                             ///< next index of tables.back()
  std::atomic<std::uint64_t> nodes{0};                ///< keys left to free
};

struct metadata::counters {
  std::atomic<std::uint64_t> stale_publishes{0}, stale_removals{0}, superseded{0}, notice_overflows{0},
      notices_resent{0};
  /// Passes over the whole table to drop holders' entries, and those skipped
  /// (table_stats).
  std::atomic<std::uint64_t> scans{0}, scans_skipped{0};
  /// Keys with a live holder and live (key, holder) entries, kept up to date
  /// by every change under the shard locks (key_count / replica_count read
  /// them: /metrics never walks the table).
  /// Keys whose live group is replicated (the repair scan is skipped while 0).
  std::atomic<std::int64_t> live_keys{0}, live_entries{0}, replicated_keys{0};
  /// A node's contribution to them: (has a live holder, live holders, replicated).
  struct live_state {
    std::int64_t keys = 0, entries = 0, replicated = 0;
  };
  static live_state of(const shard::node* n) noexcept {
    if (!n) return {};
    const auto e = static_cast<std::int64_t>(n->live_count());
    return {e > 0 ? 1 : 0, e, n->repl != 0 ? 1 : 0};
  }
  void changed(live_state before, live_state after) noexcept {
    if (after.keys != before.keys) live_keys.fetch_add(after.keys - before.keys, std::memory_order_relaxed);
    if (after.entries != before.entries)
      live_entries.fetch_add(after.entries - before.entries, std::memory_order_relaxed);
    if (after.replicated != before.replicated)
      replicated_keys.fetch_add(after.replicated - before.replicated, std::memory_order_relaxed);
  }
};

/// Replica repair bookkeeping. `mu` is a leaf lock: nothing else is taken
/// while it is held, so it may be taken under a shard's or clients_mu_.
struct metadata::repair_state {
  std::mutex mu;
  std::deque<std::string> queue;                                   ///< keys to plan, FIFO
  std::unordered_set<std::string, std::hash<std::string>> queued;  ///< members of queue
  std::unordered_map<std::string, clock::time_point> in_flight;    ///< planned key -> deadline
  std::vector<std::uint64_t> per_shard;                            ///< under-replicated keys per shard at its last scan
  std::size_t scan_cursor = 0;
  std::atomic<std::uint64_t> scheduled{0}, completed{0}, timed_out{0}, no_target{0}, trimmed{0};
};

}  // namespace mc::master
