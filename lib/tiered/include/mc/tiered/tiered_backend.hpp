#pragma once
/// TieredBackend: the client's local storage. Values live in tiers ordered by
/// priority (DRAM arenas, SSD cache files); handles are RAII; eviction is LRU
/// with demotion DRAM -> SSD. See lib/tiered/README.md.
///
/// Thread-safety: every member function of tiered_backend and of the handles'
/// const members may be called from any runtime thread concurrently. Internal
/// locks are short and never held across I/O. The backend must outlive every
/// handle and staging buffer it returned.
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"
#include "mc/tiered/tier_config.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mc::runtime {
class runtime;
}

namespace mc::tiered {

namespace detail {
struct value;
class backend_core;
struct staging_slot;
}  // namespace detail

/// Why the observer is told that a key left this backend.
enum class removal_reason {
  removed,     ///< remove(key)
  evicted,     ///< dropped to make room (not demoted)
  superseded,  ///< drop_superseded(key, version): a newer value of the key lives elsewhere
};

/// Versions of committed values. Issued by a backend's hybrid clock (the
/// holder's, or the one of the node that started the put: commit() takes
/// one): max(last issued + 1, CLOCK_REALTIME in ns). Strictly
/// increasing within a process; across restarts of the process they keep
/// increasing as long as the wall clock does not step back by more than the
/// restart took (NTP slewing is fine; a manual step backwards is not). Never 0.
using value_version = std::uint64_t;
/// The wall clock (CLOCK_REALTIME) in ns: the hybrid clock's physical part.
value_version wall_clock_version() noexcept;
/// An opaque 64-bit word stored with a committed value and reported with it
/// (key_info, stamp_of); the store keeps a value's replication group in it.
/// The backend never interprets it.
using value_tag = std::uint64_t;
/// A committed value's version and tag.
struct value_stamp {
  value_version version = 0;
  value_tag tag = 0;
};

/// A value being written. Move-only. Destroying it without commit() frees the
/// space. Not thread-safe (one writer).
class [[nodiscard]] write_handle {
 public:
  write_handle() = default;
  write_handle(write_handle&&) noexcept = default;
  write_handle& operator=(write_handle&&) noexcept = default;
  ~write_handle();

  explicit operator bool() const noexcept { return v_ != nullptr; }
  std::size_t size() const noexcept;
  tier_type tier() const noexcept;

  /// DRAM: the value's memory, size() bytes, writable directly (e.g. by the
  /// TransferEngine: it lies inside dram_regions()). SSD: empty span.
  std::span<std::byte> data() const noexcept;

  /// Appends `src` at the write cursor (any tier). For SSD values every piece
  /// but the last must end at a multiple of 4096 bytes of the value (staging
  /// chunks and whole values always do); otherwise errc::invalid_params. An
  /// SSD write goes through a staging buffer unless `src` is 4096-aligned in
  /// address and length. Errors: errc::buffer_overflow (past size()),
  /// errc::io_error / no_space, errc::cancelled (what was written stays
  /// uncommitted; commit() then fails for SSD).
  task<result<void>> write(std::span<const std::byte> src);
  /// Bytes appended by write() so far.
  std::size_t written() const noexcept { return cursor_; }

 private:
  friend class tiered_backend;
  std::shared_ptr<detail::value> v_;
  std::size_t cursor_ = 0;
};

/// A committed value, pinned while any copy of the handle lives: remove(),
/// replacement and eviction only free the space once the last handle is gone.
/// Copyable; const members are thread-safe.
class read_handle {
 public:
  read_handle() = default;
  explicit operator bool() const noexcept { return v_ != nullptr; }
  std::size_t size() const noexcept;
  tier_type tier() const noexcept;
  /// DRAM: the value's bytes (inside dram_regions()); SSD: empty span.
  std::span<const std::byte> data() const noexcept;
  /// Copies dst.size() bytes starting at `offset` of the value into `dst`
  /// (any tier; SSD through staging buffers or directly when dst, offset and
  /// length are 4096-aligned). errc::out_of_range if past size().
  /// Cancellable: SSD I/O already submitted completes before this returns.
  task<result<void>> read_into(std::span<std::byte> dst, std::uint64_t offset = 0) const;

 private:
  friend class tiered_backend;
  std::shared_ptr<const detail::value> v_;
};

/// One DRAM staging buffer (registered with io_uring, inside dram_regions()).
/// Move-only; returns to the pool on destruction (from any thread).
class [[nodiscard]] staging_buffer {
 public:
  staging_buffer() = default;
  staging_buffer(staging_buffer&& o) noexcept;
  staging_buffer& operator=(staging_buffer&& o) noexcept;
  ~staging_buffer();
  explicit operator bool() const noexcept { return core_ != nullptr; }
  /// min(requested, staging_chunk_size()) bytes, 4096-aligned start.
  std::span<std::byte> data() const noexcept { return data_; }
  /// The whole buffer (staging_chunk_size() bytes).
  std::span<std::byte> capacity() const noexcept { return whole_; }

 private:
  friend class detail::backend_core;
  detail::backend_core* core_ = nullptr;
  unsigned index_ = 0;
  std::span<std::byte> data_;
  std::span<std::byte> whole_;
};

/// Per-tier counters (a snapshot).
struct tier_usage {
  tier_type type = tier_type::dram;
  int priority = 0;
  std::uint64_t capacity = 0;
  std::uint64_t used = 0;       ///< bytes reserved, including pinned-but-removed values
  std::uint64_t values = 0;     ///< committed values indexed in this tier
  std::uint64_t evictions = 0;  ///< values dropped from this tier to make room
  std::uint64_t demotions = 0;  ///< values moved out of this tier to a lower one
  std::uint64_t allocation_failures = 0;
  std::uint64_t largest_free = 0;
  double fragmentation = 0;
};

/// What keys() reports per value.
struct key_info {
  std::string key;
  std::size_t size = 0;
  tier_type tier = tier_type::dram;
  value_version version = 0;  ///< issued by commit()
  value_tag tag = 0;          ///< given to commit()
};

struct backend_options {
  std::size_t staging_chunk_size = 4 << 20;  ///< bytes per staging buffer (multiple of 4096)
  std::size_t staging_buffers = 8;           ///< bounded pool size
};

class tiered_backend {
 public:
  /// Told (key, version of the value that left, why).
  using observer = std::function<void(const std::string& key, value_version, removal_reason)>;

  /// Builds the tiers (sorted by descending priority). DRAM: one anonymous
  /// mmap (MAP_NORESERVE, MADV_HUGEPAGE, then populated if prefault). SSD: the
  /// file `<path>/mooncake-tier-<i>.cache` is created (path created if
  /// missing), locked (flock: one process per file), truncated — the SSD tier
  /// is a cache, its previous content is discarded — and preallocated to
  /// `capacity`. Errors name the tier: invalid_params, io_error, no_space,
  /// unsupported (no O_DIRECT), memlock_limit is NOT an error (staging then
  /// works unregistered; see staging_registered()).
  static config_result<std::unique_ptr<tiered_backend>> create(mc::runtime::runtime& rt, std::vector<tier_config> tiers,
                                                               backend_options opts = {});
  ~tiered_backend();
  tiered_backend(const tiered_backend&) = delete;
  tiered_backend& operator=(const tiered_backend&) = delete;

  /// Reserves space for a value of `size` bytes in `preferred` (if given and
  /// present) or else the highest-priority tier; when it does not fit,
  /// least-recently-used unpinned values are demoted to the next lower tier
  /// (DRAM -> SSD, as I/O) or, without one, evicted (observer told). If the
  /// tier stays full (everything pinned), lower tiers are tried.
  /// Errors: errc::no_available_handle (full, everything pinned),
  /// errc::too_large (bigger than every tier), errc::cancelled.
  task<result<write_handle>> allocate(std::size_t size, std::optional<tier_type> preferred = {});

  /// Publishes the handle's value under `key` atomically: readers see the old
  /// value (if any) or the new one, never a mix. A replaced old value is freed
  /// when its readers let go; the observer is NOT called for a replacement.
  /// Returns the value's version: `version` when given (non-zero: a version
  /// the caller took when its put started, e.g. from issue_version() on the
  /// node that started the put), else issue_version() taken under the index
  /// lock, so that a later commit of the same key gets a larger one. A given
  /// version moves the hybrid clock forward to it (later issued versions are
  /// larger). Errors: errc::superseded (a given `version` older than the
  /// held value's: nothing replaced, the handle's space freed),
  /// errc::invalid_params (empty handle), errc::invalid_write (SSD value not
  /// completely written), errc::invalid_key (empty key).
  /// `tag` is stored with the value (see value_tag).
  result<value_version> commit(std::string key, write_handle&& h, value_tag tag = 0, value_version version = 0);

  /// A fresh version from the backend's hybrid clock (see value_version);
  /// larger than every version issued before by this backend. Thread-safe.
  value_version issue_version() noexcept;
  /// The version of the value held under `key`; errc::object_not_found.
  result<value_version> version_of(std::string_view key) const;
  /// The version and tag of the value held under `key`; errc::object_not_found.
  result<value_stamp> stamp_of(std::string_view key) const;

  /// Pins and returns the value; marks it most recently used.
  /// errc::object_not_found if absent.
  result<read_handle> get(std::string_view key);
  /// Unindexes the value (freed when unpinned); observer(key, removed).
  /// errc::object_not_found if absent.
  result<void> remove(std::string_view key);
  /// Removes the value only if its version is <= `version` (an older or the
  /// same copy of a key that a newer write elsewhere superseded);
  /// observer(key, its version, superseded). Errors: errc::object_not_found
  /// (absent), errc::invalid_version (the local value is newer: kept).
  result<void> drop_superseded(std::string_view key, value_version version);
  bool exists(std::string_view key) const;
  std::size_t count() const;

  /// Snapshot of every key (for re-publishing after a master restart).
  std::vector<key_info> keys() const;
  /// Calls `fn` for every value without copying the list; `fn` must not call
  /// back into the backend (a lock is held).
  void for_each_key(const std::function<void(const key_info&)>& fn) const;

  /// Called on every removal and eviction (not on replacement or demotion),
  /// from the thread doing it, without internal locks held. Set it before
  /// concurrent use.
  void set_observer(observer fn);

  std::vector<tier_usage> usage() const;

  /// Every DRAM arena and the staging arena, for one-time registration with
  /// the TransferEngine. Stable for the backend's lifetime.
  std::vector<std::span<std::byte>> dram_regions() const;
  /// The staging arena alone (part of dram_regions()).
  std::span<std::byte> staging_region() const;
  std::size_t staging_chunk_size() const;
  /// Whether the staging arena is registered with io_uring (false when
  /// RLIMIT_MEMLOCK forbade it; I/O then works unregistered).
  bool staging_registered() const;

  /// Takes one staging buffer (data() = min(size, staging_chunk_size()) bytes),
  /// waiting while all are in use. Cancellable (errc::cancelled).
  task<result<staging_buffer>> acquire_staging(std::size_t size);

 private:
  explicit tiered_backend(std::unique_ptr<detail::backend_core> core);
  std::unique_ptr<detail::backend_core> core_;
};

}  // namespace mc::tiered
