#pragma once
// Internals of the TieredBackend (not a public header).
#include "mc/runtime/async_mutex.hpp"
#include "mc/runtime/waiter_queue.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/runtime/uring_file.hpp"
#include "mc/tiered/offset_allocator.hpp"
#include "mc/tiered/tiered_backend.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include <deque>

#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>

namespace mc::tiered::detail {

inline constexpr std::uint64_t dram_alignment = 64;
inline constexpr std::uint64_t ssd_alignment = mc::runtime::direct_io_alignment;

struct value;

/// One tier: an arena (DRAM) or a cache file (SSD) plus its allocator.
class tier {
 public:
  tier(tier_config cfg, std::size_t index);
  ~tier();
  /// Maps the arena / creates the file. Errors carry a message.
  config_result<void> open();

  std::optional<allocation> try_alloc(std::uint64_t size);
  void release(const allocation& a) noexcept;
  offset_allocator::stats stats() const;

  const tier_config cfg;
  const std::size_t index;  // position in priority order
  // DRAM
  std::byte* arena = nullptr;
  std::size_t arena_len = 0;
  // SSD
  mc::runtime::uring_file file;
  int lock_fd = -1;
  // Counters.
  std::atomic<std::uint64_t> evictions{0}, demotions{0}, failures{0};
  // The CLOCK queue of the values indexed in this tier, newest at q_head,
  // intrusive through value::q_prev/q_next. A get only sets
  // value::referenced; the victim scan gives referenced values a second
  // chance. Lock order: an index shard's mutex, then q_m.
  std::mutex q_m;
  value* q_head = nullptr;   // guarded by q_m
  value* q_tail = nullptr;   // guarded by q_m
  std::uint64_t values = 0;  // guarded by q_m
  /// Queue operations; the caller holds q_m.
  void enqueue(value* v) noexcept;
  void dequeue(value* v) noexcept;

 private:
  mutable std::mutex m_;
  offset_allocator alloc_;
};

/// A stored value's space. Shared: the index and every read handle own it;
/// the space is freed when the last owner lets go.
struct value : std::enable_shared_from_this<value> {
  value(tier* t, const allocation& a, std::size_t n) : t(t), offset(a.offset), size(n), space(a) {}
  ~value() { t->release(space); }
  value(const value&) = delete;
  value& operator=(const value&) = delete;
  std::byte* dram() const noexcept { return t->arena + offset; }
  tier* const t;
  const std::uint64_t offset;
  const std::size_t size;
  const allocation space;  ///< the tier allocator's handle
  backend_core* core = nullptr;
  std::atomic<bool> moving{false};      // picked for demotion/eviction
  std::atomic<bool> referenced{false};  // read since the CLOCK hand last passed
  // Guarded by t->q_m: the queue links and the index's key (set while queued).
  value* q_prev = nullptr;
  value* q_next = nullptr;
  const std::string* key = nullptr;
};

struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

class backend_core {
 public:
  backend_core(mc::runtime::runtime& rt, backend_options opts);
  ~backend_core();

  config_result<void> open(std::vector<tier_config> tiers);

  // ---- index (backend.cpp)
  task<result<std::shared_ptr<value>>> allocate(std::size_t size, std::optional<tier_type> preferred);
  result<value_version> commit(std::string key, std::shared_ptr<value> v, value_tag tag, value_version version);
  value_version issue_version() noexcept;
  /// Moves the hybrid clock to at least `version` (issue_version() then
  /// answers larger ones).
  void observe_version(value_version version) noexcept;
  result<value_version> version_of(std::string_view key) const;
  result<value_stamp> stamp_of(std::string_view key) const;
  result<std::shared_ptr<const value>> get(std::string_view key);
  result<void> remove(std::string_view key);
  result<void> drop_superseded(std::string_view key, value_version version);
  bool exists(std::string_view key) const;
  std::size_t count() const;
  void for_each(const std::function<void(const key_info&)>& fn) const;
  std::vector<tier_usage> usage() const;
  void set_observer(tiered_backend::observer fn);

  // ---- I/O (io.cpp)
  /// `reserved`: use the demotion buffer (outside the pool) instead of the
  /// pool, so demotion never waits for buffers held by callers of allocate().
  task<result<void>> ssd_write(const value& v, std::uint64_t at, std::span<const std::byte> src, bool reserved = false);
  task<result<void>> ssd_read(const value& v, std::uint64_t at, std::span<std::byte> dst);
  task<result<staging_buffer>> acquire_staging(std::size_t size);
  void release_staging(unsigned index) noexcept;

  std::vector<std::unique_ptr<tier>> tiers;  // descending priority
  std::byte* staging = nullptr;
  std::size_t staging_len = 0;
  backend_options opts;
  mc::runtime::fixed_buffer_registration staging_reg;

 private:
  struct entry {
    std::shared_ptr<value> v;
    value_version version = 0;
    value_tag tag = 0;
  };
  struct victim {
    std::string key;
    std::shared_ptr<value> v;
    value_version version = 0;
  };
  using index_map = std::unordered_map<std::string, entry, string_hash, std::equal_to<>>;
  /// The index is sharded by key hash: operations on different keys rarely
  /// share a mutex. A key's commits, gets and removals take its shard's.
  struct alignas(64) shard {
    mutable std::mutex m;
    index_map map;
  };
  static constexpr std::size_t shard_count = 64;
  shard& shard_of(std::string_view key) const noexcept { return shards_[string_hash{}(key) & (shard_count - 1)]; }
  task<result<std::shared_ptr<value>>> allocate_in(tier& t, std::size_t size);
  std::optional<victim> pick_victim(tier& t);
  enum class demote_result { moved, failed, cancelled };
  task<demote_result> demote(victim& vic, tier& to);
  void evict(victim& vic);
  void notify(const std::string& key, value_version version, removal_reason why);
  /// Unindexes `it` of `sh` (caller holds sh.m); returns the value and its version.
  std::pair<std::shared_ptr<value>, value_version> unindex(shard& sh, index_map::iterator it);
  /// Queues `v` in its tier under the index's key `k` (caller holds the key's shard).
  static void link(value& v, const std::string& k) noexcept;
  static void unlink(value& v) noexcept;
  tier* lower_tier(const tier& t) const;
  std::size_t direct_len(const std::byte* p, std::size_t len) const noexcept;

  mc::runtime::runtime& rt_;
  mutable std::array<shard, shard_count> shards_;
  std::atomic<std::size_t> count_{0};
  mutable std::mutex observer_m_;
  tiered_backend::observer observer_;
  std::atomic<value_version> last_version_{0};  // the hybrid clock
  // Staging pool: free buffer indices and FIFO waiters (any thread).
  mc::waiter_queue staging_q_;  // its lock guards free_staging_ too
  mc::async_mutex demote_m_;    // guards the reserved demotion buffer (the last chunk)
  std::vector<unsigned> free_staging_;
};

}  // namespace mc::tiered::detail
