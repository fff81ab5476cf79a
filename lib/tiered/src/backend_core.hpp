#pragma once
// Internals of the TieredBackend (not a public header).
#include "mc/runtime/async_mutex.hpp"
#include "mc/runtime/waiter_queue.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/runtime/uring_file.hpp"
#include "mc/store/offset_allocator.hpp"
#include "mc/store/tiered_backend.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include <deque>

#include <atomic>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>

namespace mc::store::detail {

inline constexpr std::uint64_t dram_alignment = 64;
inline constexpr std::uint64_t ssd_alignment = mc::runtime::direct_io_alignment;

/// One tier: an arena (DRAM) or a cache file (SSD) plus its allocator.
class tier {
 public:
  tier(tier_config cfg, std::size_t index);
  ~tier();
  /// Maps the arena / creates the file. Errors carry a message.
  config_result<void> open();

  std::optional<std::uint64_t> try_alloc(std::uint64_t size);
  void release(std::uint64_t offset, std::uint64_t size) noexcept;
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
  // LRU of committed keys in this tier, most recent first. Guarded by core's m_.
  std::list<std::string> lru;
  std::uint64_t values = 0;  // guarded by core's m_

 private:
  mutable std::mutex m_;
  offset_allocator alloc_;
};

/// A stored value's space. Shared: the index and every read handle own it;
/// the space is freed when the last owner lets go.
struct value {
  value(tier* t, std::uint64_t off, std::size_t n) : t(t), offset(off), size(n) {}
  ~value() { t->release(offset, size); }
  value(const value&) = delete;
  value& operator=(const value&) = delete;
  std::byte* dram() const noexcept { return t->arena + offset; }
  tier* const t;
  const std::uint64_t offset;
  const std::size_t size;
  backend_core* core = nullptr;
  std::atomic<bool> moving{false};  // picked for demotion/eviction
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
  result<value_version> commit(std::string key, std::shared_ptr<value> v);
  value_version issue_version() noexcept;
  result<value_version> version_of(std::string_view key) const;
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
  task<result<void>> ssd_write(const value& v, std::uint64_t at, std::span<const std::byte> src,
                               bool reserved = false);
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
    std::list<std::string>::iterator lru_it;
    value_version version = 0;
  };
  struct victim {
    std::string key;
    std::shared_ptr<value> v;
    value_version version = 0;
  };
  using index_map = std::unordered_map<std::string, entry, string_hash, std::equal_to<>>;
  task<result<std::shared_ptr<value>>> allocate_in(tier& t, std::size_t size);
  std::optional<victim> pick_victim(tier& t);
  enum class demote_result { moved, failed, cancelled };
  task<demote_result> demote(victim& vic, tier& to);
  void evict(victim& vic);
  void notify(const std::string& key, value_version version, removal_reason why);
  /// Unindexes `it` (caller holds m_); returns the value and its version.
  std::pair<std::shared_ptr<value>, value_version> unindex(index_map::iterator it);
  tier* lower_tier(const tier& t) const;
  std::size_t direct_len(const std::byte* p, std::size_t len) const noexcept;

  mc::runtime::runtime& rt_;
  mutable std::mutex m_;
  index_map index_;
  tiered_backend::observer observer_;
  std::atomic<value_version> last_version_{0};  // the hybrid clock
  // Staging pool: free buffer indices and FIFO waiters (any thread).
  mc::waiter_queue staging_q_;  // its lock guards free_staging_ too
  mc::async_mutex demote_m_;  // guards the reserved demotion buffer (the last chunk)
  std::vector<unsigned> free_staging_;
};

}  // namespace mc::store::detail
