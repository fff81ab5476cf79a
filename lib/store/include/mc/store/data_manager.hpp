#pragma once
/// DataManager: the one entry point for local and remote data operations of a
/// P2P client, with key-level read-write locks (lock striping).
///
/// Reads (get, remote read) take the shared side of the key's shard lock
/// only to take the tier's pinned handle, then copy or transfer without it;
/// put and remote write allocate and copy/transfer without any key lock (the
/// allocation is invisible until commit) and take the exclusive side only to
/// commit; remove takes it to erase. No key lock is ever held across network
/// or master I/O: the commit hook (publish) runs after the lock is released.
/// Locks are coroutine locks: no thread ever blocks on a key lock.
///
/// Cancellation: once a put's or a remote write's bytes are in, commit and
/// the commit hook run to completion even if the caller is cancelled (they
/// run in their own coroutine on the caller's executor, tracked by a gate
/// that close() waits for): a value is never committed without its hook.
#include "mc/runtime/async_mutex.hpp"
#include "mc/runtime/async_semaphore.hpp"
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/error.hpp"
#include "mc/runtime/gate.hpp"
#include "mc/runtime/task.hpp"
#include "mc/transfer/types.hpp"

#include "mc/tiered/tiered_backend.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mc::transfer {
class engine;
}

namespace mc::store {

/// Default and bounds of MOONCAKE_DM_LOCK_SHARD_COUNT.
inline constexpr std::size_t default_lock_shard_count = 1024;
inline constexpr std::size_t max_lock_shard_count = 1 << 20;

/// Parses MOONCAKE_DM_LOCK_SHARD_COUNT's value (1 .. 1048576).
result<std::size_t> parse_lock_shard_count(std::string_view text);

/// Longest key accepted anywhere in the store.
inline constexpr std::size_t max_key_bytes = 4096;
/// Most pieces one value may be scattered into / gathered from.
inline constexpr std::size_t max_value_pieces = 4096;
/// A put's version (see data_manager::put) may lie at most this far ahead of
/// the committing node's clock (versions are hybrid-clock nanoseconds).
inline constexpr std::chrono::seconds max_version_lead{60};

/// A value's bytes in a peer's registered memory, in order, piece after piece
/// (scatter-gather). One piece is the plain case.
using remote_pieces = std::vector<mc::transfer::remote_buffer>;

/// Sum of the pieces' lengths; nullopt when it overflows or a piece is empty.
std::optional<std::uint64_t> total_length(const remote_pieces& pieces) noexcept;

/// One item of read_remote_batch().
struct remote_read_item {
  std::string key;
  /// Where the value goes (the requester's memory, already checked by the
  /// caller); may be empty when inline_max > 0.
  remote_pieces dest;
  /// > 0: the value may instead be returned inline (pinned, see
  /// remote_read_outcome::inline_value) when its size is at most this.
  std::uint64_t inline_max = 0;
};

/// The outcome of one item of read_remote_batch().
struct remote_read_outcome {
  /// The value's size, or the item's error.
  result<std::uint64_t> value = std::uint64_t{0};
  /// The value's actual size whenever it was found (also on invalid_params).
  std::uint64_t size = 0;
  /// Set when the value is answered inline: the pinned value (the caller
  /// copies it into the reply with read_into); nothing was transferred.
  std::optional<tiered::read_handle> inline_value;
};

/// One item of write_remote_batch(): a key and its value's bytes in the
/// requester's memory, in order (already checked by the caller).
struct remote_write_item {
  std::string key;
  remote_pieces src;
  tiered::value_tag tag = 0;  ///< stored with the value, given to the commit hook
  /// The put's version (taken on the node that started it, when it started;
  /// see data_manager::put); 0 = issued here at the commit.
  std::uint64_t version = 0;
};

struct data_manager_stats {
  std::uint64_t remote_reads = 0;
  std::uint64_t remote_read_bytes = 0;
  std::uint64_t remote_writes = 0;
  std::uint64_t remote_write_bytes = 0;
  std::uint64_t remote_errors = 0;
  std::uint64_t lock_waits = 0;    ///< acquisitions that had to wait
  std::uint64_t lock_wait_ns = 0;  ///< total time spent waiting for key locks
  /// Batches served (read_remote_batch / write_remote_batch calls) and the
  /// wall-clock time they spent in each stage, summed over batches: where a
  /// batch's time goes on the owner, next to the requester's end-to-end
  /// latency (mc_rpc_latency_seconds). Reads: `prepare` pins the values and
  /// checks the destinations, `transfer` moves the bytes (the transfer batch
  /// and the sends out of other tiers). Writes: `prepare` checks the items
  /// and allocates their space, `transfer` pulls the bytes, `commit` commits
  /// them and publishes them to the master.
  std::uint64_t read_batches = 0;
  std::uint64_t read_batch_prepare_ns = 0;
  std::uint64_t read_batch_transfer_ns = 0;
  std::uint64_t write_batches = 0;
  std::uint64_t write_batch_prepare_ns = 0;
  std::uint64_t write_batch_transfer_ns = 0;
  std::uint64_t write_batch_commit_ns = 0;
};

/// Thread-safe; every coroutine may run on any runtime thread. The backend and
/// the engine must outlive it.
class data_manager {
 public:
  /// Called after a value was committed under `key` (local put or remote
  /// write), after the key lock was released, before put()/write_remote()
  /// return; never abandoned half-way by a cancellation of their caller.
  /// `version` is the value's version: the one its put started with, or
  /// issued by the backend's commit (publishes and removals are ordered by it
  /// at the master, so a publish that overtakes another of the same key —
  /// or arrives after the put gave up — cannot leave the older one routed).
  /// `tag` is the one the value was committed with (its replication, see
  /// mc::master::replication; 0 = a single copy).
  using commit_hook = std::function<task<result<void>>(const std::string& key, std::uint64_t size,
                                                       std::uint64_t version, tiered::value_tag tag)>;

  /// A value of a batch committed by write_remote_batch, for the batch hook.
  struct committed_value {
    std::string key;
    std::uint64_t size = 0;
    std::uint64_t version = 0;
    tiered::value_tag tag = 0;
  };
  /// As commit_hook, for the values a write_remote_batch committed: one
  /// call after all of them, one result per value in order (a result list of
  /// another length fails every value with rpc_fail). Unset: commit_hook per
  /// value. The same rules: no key lock held, never abandoned half-way.
  using commit_batch_hook = std::function<task<std::vector<result<void>>>(std::vector<committed_value>)>;

  data_manager(tiered::tiered_backend& backend, mc::transfer::engine& engine,
               std::size_t lock_shards = default_lock_shard_count);
  ~data_manager();
  data_manager(const data_manager&) = delete;
  data_manager& operator=(const data_manager&) = delete;

  void set_commit_hook(commit_hook hook) { on_commit_ = std::move(hook); }
  /// Not thread-safe: set before any write, like set_commit_hook.
  void set_commit_batch_hook(commit_batch_hook hook) { on_commit_batch_ = std::move(hook); }
  std::size_t lock_shard_count() const noexcept { return shards_.size(); }

  /// Local put: allocate, copy, then commit under the exclusive lock (replaces
  /// atomically) and run the commit hook. Errors: invalid_key, invalid_params
  /// (empty value), no_available_handle, too_large, shutting_down (after
  /// close(); nothing stored), and the commit hook's error (the value then
  /// stays stored).
  /// `tag` is stored with the value (tiered::value_tag) and given to the hook.
  /// `version` (non-zero) orders this put against others of the key: the
  /// version the put started with (tiered_backend::issue_version() on the
  /// node that started it, carried by remote writes); 0 = issued at the
  /// commit. errc::superseded when the held value is newer (nothing
  /// replaced); invalid_params when it lies more than max_version_lead ahead
  /// of this node's clock (a peer's clock or a hostile peer: it would drag
  /// this node's versions into the future).
  task<result<void>> put(const std::string& key, std::span<const std::byte> value, tiered::value_tag tag = 0,
                         std::uint64_t version = 0);
  /// One value of put_batch: `value` must stay valid until put_batch ends.
  struct put_item {
    std::string key;
    std::span<const std::byte> value;
    tiered::value_tag tag = 0;
    std::uint64_t version = 0;
  };
  /// Local puts of several values, result per item in order, each as put()
  /// (same errors; one item's failure leaves the others alone). The values
  /// are allocated and copied one after the other, then committed in item
  /// order (the same key twice: the later item wins) and published with one
  /// call of the batch commit hook when one is set (else the commit hook per
  /// value): one coroutine for the batch, not one per value. Runs on the
  /// caller's executor; commit and publish are shielded from cancellation.
  task<std::vector<result<void>>> put_batch(std::vector<put_item> items);
  /// Local put of a value gathered from `pieces` (in order; any sizes, any
  /// addresses). Errors as put() (invalid_params also for no piece, more than
  /// max_value_pieces, or an empty total).
  task<result<void>> put_parts(const std::string& key, std::vector<std::span<const std::byte>> pieces,
                               tiered::value_tag tag = 0, std::uint64_t version = 0);
  /// Local get into `dst` (must hold the value). Returns the value's size.
  /// Errors: object_not_found, buffer_overflow (dst too small; nothing copied).
  task<result<std::size_t>> get(const std::string& key, std::span<std::byte> dst);
  /// Local get scattered into `pieces` in order (the value fills them from the
  /// first; bytes past the value stay untouched). Returns the value's size.
  /// Errors: object_not_found, buffer_overflow (the pieces hold less than the
  /// value; nothing copied), invalid_params (more than max_value_pieces).
  task<result<std::size_t>> get_parts(const std::string& key, std::vector<std::span<std::byte>> pieces);
  /// Size of a locally held value.
  result<std::uint64_t> size_of(const std::string& key) const;
  bool exists(const std::string& key) const;
  /// Local remove under the exclusive lock. object_not_found if absent.
  task<result<void>> remove(const std::string& key);
  /// Drops the local copy under the exclusive lock as a superseded one, so
  /// that the backend observer queues a removal notice for the master (unlike
  /// remove(), whose caller tells the master itself). object_not_found if absent.
  task<result<void>> drop_local(const std::string& key);

  /// The spec's remote read (steps 2-6): tier handle (taken under the shared
  /// lock, which is released before any I/O), staging copy when the value is
  /// not in DRAM, TransferEngine WRITE into `dest` (transferred exactly as
  /// given: the caller decides that `dest` is legitimate).
  /// `dest.length` must equal the value's size (invalid_params otherwise;
  /// the size is still returned through `actual_size`). Returns the size.
  task<result<std::uint64_t>> read_remote(const std::string& key, mc::transfer::remote_buffer dest,
                                          mc::duration timeout, std::uint64_t* actual_size = nullptr);
  /// The batch form of the remote read, one result per item in order. Values
  /// answered inline (size <= the item's inline_max, <= `inline_limit` each,
  /// while their running total stays <= `inline_budget`; decided in item
  /// order) are returned pinned, untransferred. Every DRAM-resident value
  /// goes out in ONE TransferEngine batch (all pieces of all items, sliced
  /// over the pooled connections); values in other tiers stream through two
  /// staging buffers each (the SSD read of chunk k+1 overlaps the send of
  /// chunk k). Per item: object_not_found, invalid_params (no destination for
  /// a non-inline value, or the destination's total length differs from the
  /// value's size: `size` tells it), and the transfer's errors.
  /// Counts one served remote read (its size, or its error) in stats(); the
  /// ClientRpcService calls it for values it answers inline (read_remote_batch
  /// counts the transferred ones itself). Thread-safe.
  void count_read(const result<std::uint64_t>& r);
  task<std::vector<remote_read_outcome>> read_remote_batch(std::vector<remote_read_item> items, mc::duration timeout,
                                                           std::uint64_t inline_limit, std::uint64_t inline_budget);
  /// The spec's remote write with the value gathered from `src` pieces (in
  /// order). Errors as write_remote().
  task<result<void>> write_remote_parts(const std::string& key, remote_pieces src, mc::duration timeout,
                                        tiered::value_tag tag = 0, std::uint64_t version = 0);
  /// The batch form of the remote write, one result per item in order: every
  /// item is allocated, then every DRAM-bound value comes in through ONE
  /// TransferEngine batch (values for other tiers through staging buffers,
  /// concurrently), then each is committed and published. Per item the
  /// errors of write_remote() and of put() (superseded, a version too far
  /// ahead); a failed item leaves its key's old value. An item whose bytes
  /// arrived after the deadline is not committed (timeout): its requester
  /// has given up on it.
  task<std::vector<result<void>>> write_remote_batch(std::vector<remote_write_item> items, mc::duration timeout);
  /// The spec's remote write (steps 2-9): allocate, TransferEngine READ from
  /// `src` (through staging for non-DRAM tiers), then commit under the
  /// exclusive lock and run the commit hook (shielded from cancellation). On
  /// a failure before the commit the allocation is released and the old
  /// value stays untouched.
  task<result<void>> write_remote(const std::string& key, mc::transfer::remote_buffer src, mc::duration timeout);

  data_manager_stats stats() const;

  /// Refuses new commits (shutting_down) and waits for those in flight
  /// (commit + hook). Idempotent.
  task<void> close();

 private:
  /// put()'s first half: checks the key and the value (invalid_key,
  /// invalid_params when empty), allocates and copies the value in; the
  /// allocation stays invisible until committed.
  task<result<tiered::write_handle>> stage(const std::string& key, std::span<const std::byte> value);
  task<result<void>> commit_and_publish(const std::string& key, tiered::write_handle h, std::uint64_t size,
                                        tiered::value_tag tag, std::uint64_t version);
  /// The version check, then the commit under the key's exclusive lock
  /// (released on return); the committed version.
  task<result<std::uint64_t>> commit_locked(const std::string& key, tiered::write_handle h, tiered::value_tag tag,
                                            std::uint64_t version);
  task<result<void>> finish_commit(std::string key, tiered::write_handle h, std::uint64_t size, tiered::value_tag tag,
                                   std::uint64_t version, gate_holder g);
  /// One value of commit_batch's batch path.
  struct batch_commit {
    std::string key;
    tiered::write_handle handle;
    std::uint64_t size = 0;
    tiered::value_tag tag = 0;
    std::uint64_t version = 0;
  };
  task<std::vector<result<void>>> finish_commit_batch(std::vector<batch_commit> values, gate_holder g);
  /// Commits and publishes a batch's prepared values: with a batch hook,
  /// `values` in one shielded finish_commit_batch (shutting_down for each
  /// after close()); without one, `singles` (commit_and_publish tasks)
  /// together. One result per value of the list used, in order.
  task<std::vector<result<void>>> commit_all(std::vector<batch_commit> values, std::vector<task<result<void>>> singles);
  task<result<tiered::read_handle>> pin(const std::string& key);
  task<result<void>> send_staged(const tiered::read_handle& h, const remote_pieces& dest,
                                 std::chrono::steady_clock::time_point deadline);
  task<result<void>> receive_staged(tiered::write_handle& h, const remote_pieces& src,
                                    std::chrono::steady_clock::time_point deadline);
  task<void> commit_batch(const std::vector<remote_write_item>& items, std::vector<tiered::write_handle>& handles,
                          const std::vector<std::uint64_t>& sizes, std::vector<result<void>>& out,
                          std::chrono::steady_clock::time_point deadline);
  void count_write(const result<void>& r, std::uint64_t bytes);
  /// Counts one served batch and its stages in stats() (commit: `write` only).
  void count_batch(bool write, std::chrono::steady_clock::time_point start,
                   std::chrono::steady_clock::time_point prepared, std::chrono::steady_clock::time_point transferred,
                   std::chrono::steady_clock::time_point end) noexcept;

  struct shard;
  struct counters;
  async_shared_mutex& lock_for(const std::string& key);
  task<result<shared_lock_guard>> lock_shared(const std::string& key);
  task<result<unique_lock_guard>> lock_exclusive(const std::string& key);

  tiered::tiered_backend& backend_;
  mc::transfer::engine& engine_;
  std::vector<std::unique_ptr<shard>> shards_;
  std::unique_ptr<counters> counters_;
  commit_hook on_commit_;
  commit_batch_hook on_commit_batch_;
  gate gate_;
  // Values streamed from a non-DRAM tier use two staging buffers each: at
  // most half the staging pool's buffers run such pipelines at once (so a
  // pipeline waiting for its second buffer always gets one); with one
  // staging buffer in all, pipelines run single-buffered.
  std::size_t staging_count_ = 1;
  std::unique_ptr<async_semaphore> pipelines_;
};

/// Validates a key: non-empty, at most max_key_bytes, no NUL byte
/// (invalid_key otherwise). Keys travel between nodes as Cap'n Proto Text,
/// and KJ's std::string interop cuts a Text at its first NUL: "k\0x" would
/// reach its owner as "k" (another key's value).
result<void> check_key(std::string_view key);

}  // namespace mc::store
