#pragma once
// Internals of mc::master::metadata (not a public header): the client entries
// and the sharded key map. Lock order: a shard's mu before clients_mu_.
#include "mc/master/metadata.hpp"

#include <atomic>
#include <deque>

namespace mc::master {

struct metadata::client_entry {
  client_info info;
  clock::time_point last_heartbeat;
  std::atomic<std::uint64_t> keys{0};  ///< live (routable) entries
  // Guarded by clients_mu_: drop notices for superseded copies, bounded by
  // metadata_options::max_pending_drops; `resync` once they overflowed.
  std::deque<key_version> drops;
  bool resync = false;
};

struct metadata::shard {
  /// One holder's entry for a key. At most one holder of a key is live; the
  /// others are superseded copies, kept so that their stale publishes are
  /// refused, until the holder confirms the drop (remove_replica), re-publishes
  /// without it (finish_republish) or leaves.
  struct holder {
    std::string client_id;
    std::uint64_t version = 0;
    std::uint64_t epoch = 0;
    bool live = true;
  };
  struct entry {
    std::uint64_t size = 0;  ///< of the last accepted publish
    std::vector<holder> holders;
    bool any_live() const noexcept {
      for (auto& h : holders)
        if (h.live) return true;
      return false;
    }
  };
  mutable std::mutex mu;
  std::unordered_map<std::string, entry> map;
};

struct metadata::counters {
  std::atomic<std::uint64_t> stale_publishes{0}, stale_removals{0}, superseded{0}, notice_overflows{0};
};

}  // namespace mc::master
