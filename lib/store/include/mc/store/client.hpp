#pragma once
/// The public co_await API of a P2P client: put / get / batch forms / exists /
/// remove / query, backed by the local tiers and, on a miss, by the owning
/// peer (master lookup + the spec's remote read).
///
///   mc::runtime::runtime rt(4); rt.start();
///   auto c = mc::store::client::start(rt, opts, &why);   // from a non-runtime thread
///   rt.block_on([&]() -> mc::task<void> {
///     co_await (*c)->put("k", bytes);
///     auto n = co_await (*c)->get("k", buffer);            // local or remote
///   }());
///   (*c)->stop(); mc::rpc::shutdown(rt); rt.stop();
///
/// Threads: every coroutine may be awaited on any thread of the runtime the
/// client was started on. Cancellation: every operation is bounded by the
/// rpc_timeout deadline per remote call; cancelling the awaiting coroutine
/// cancels the call in flight (buffers are released safely).
#include "mc/master/metadata.hpp"
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"
#include "mc/store/client_options.hpp"
#include "mc/transfer/engine.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace mc::runtime {
class runtime;
}

namespace mc::tiered {
class tiered_backend;
}  // namespace mc::tiered

namespace mc::store {

class data_manager;

/// Where put() stores a value.
enum class placement {
  local,   ///< in this client's tiers (the P2P model; default)
  remote,  ///< on another client, through the spec's remote write
};

struct put_options {
  placement where = placement::local;
  /// placement::remote: the target's RPC endpoint (host:client_rpc_port);
  /// empty = the master's write route (a healthy client with room).
  std::string target;
  /// Copies to keep on distinct nodes (1..mc::master::replication::max_copies).
  /// Above 1, the value is written to `replicas` nodes at once: this node
  /// (placement::local) or `target` first, the others chosen by the master
  /// (healthy, room, most free space first). The put succeeds when every
  /// copy committed; when at least one but not all did, it returns
  /// errc::replication_incomplete: the committed copies stay readable and
  /// the master adds the missing ones later (repair); none committed: the
  /// first copy's error. Gets spread over the copies and fall back across
  /// them. A holder declared dead is replaced by a repair (a surviving
  /// holder copies the value to another node); a surplus copy (a dead holder
  /// that came back) is trimmed.
  std::uint32_t replicas = 1;
};

/// What query() reports.
struct object_info {
  std::uint64_t size = 0;
  bool local = false;                         ///< held by this client
  std::vector<mc::master::replica> replicas;  ///< healthy holders known to the master
};

struct client_stats {
  std::uint64_t local_hits = 0;
  std::uint64_t remote_hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t fallbacks = 0;  ///< a replica failed and another was tried
  std::uint64_t route_cache_hits = 0;
  std::uint64_t master_errors = 0;
  bool registered = false;
  std::uint64_t notices_sent = 0;      ///< removal notices (evicted / superseded copies) sent to the master
  std::uint64_t notice_batches = 0;    ///< removeReplicas calls that carried them
  std::uint64_t notice_overflows = 0;  ///< the bounded notice queue overflowed (a resync followed)
  std::uint64_t resyncs = 0;           ///< full re-publishes of the key set (registration, overflow)
  std::uint64_t superseded_drops = 0;  ///< local copies dropped: a newer write elsewhere superseded them
  std::uint64_t stale_publishes = 0;   ///< publishes the master refused as older than what it had
  /// Puts whose publish failed (the put returned the error): their copy was
  /// dropped, so that no later re-publish brings it back.
  std::uint64_t failed_publishes = 0;
  /// Batches (batch_get / batch_put and their _parts forms, batch_exists).
  std::uint64_t batch_calls = 0;
  std::uint64_t batch_keys = 0;
  std::uint64_t batch_rpcs = 0;    ///< peer batch RPCs those batches sent (fan-out: per owner and split)
  std::uint64_t inline_reads = 0;  ///< remote reads answered inside the RPC reply (or a call's)
  /// Batches of small-value reads sent as TransferEngine calls instead of
  /// RPCs (one per owner per batch; counted in batch_rpcs too).
  std::uint64_t read_calls = 0;
  std::uint64_t inline_writes = 0;  ///< remote writes that carried the value inside the RPC (or a call)
  /// Batches of small-value writes sent as TransferEngine calls instead of
  /// RPCs (one per owner per wave, however many calls it took; counted in
  /// batch_rpcs too).
  std::uint64_t write_calls = 0;
  std::uint64_t remote_read_bytes = 0;  ///< value bytes remote reads brought in (inline or transferred)
  std::uint64_t publish_batches = 0;    ///< addReplicas calls publishes went out in (group commit)
  std::uint64_t publishes = 0;          ///< keys those calls published
  /// Of publish_batches, those the master took as TransferEngine calls
  /// (mc/master/publish_call.hpp) rather than addReplicas RPCs.
  std::uint64_t publish_calls = 0;
  /// Peer request items this node's ClientRpcService refused with OVERLOADED
  /// (over max_remote_write_bytes or an in-flight limit).
  std::uint64_t service_overloaded = 0;
  /// ... refused with ACCESS_DENIED (unknown requester id, or a transfer
  /// endpoint other than the one the master registered for it).
  std::uint64_t service_access_denied = 0;
  std::uint64_t write_routes = 0;             ///< write routes asked of the master (remote puts without a target)
  std::uint64_t write_route_lease_hits = 0;   ///< remote puts routed by a cached lease instead
  std::uint64_t write_route_lease_drops = 0;  ///< leases dropped because a put through them failed at the owner
  /// Replicated puts (put_options::replicas > 1) of a key that committed some
  /// but not all copies (REPLICATION_INCOMPLETE).
  std::uint64_t replication_incomplete = 0;
  std::uint64_t repairs_done = 0;    ///< copies this node made for the master's repairs
  std::uint64_t repairs_failed = 0;  ///< repair tasks that failed here (gone, changed, target refused)
};

class client {
 public:
  /// Builds the tiers, starts the TransferEngine (opts.port) and the RPC
  /// server (opts.client_rpc_port, opts.rpc_thread_num threads of `rt`),
  /// registers with the master and starts heartbeats. Call from a non-runtime
  /// thread; `rt` must be running with at least rpc_thread_num threads.
  /// On failure `why` (if given) names the cause.
  static result<std::unique_ptr<client>> start(mc::runtime::runtime& rt, client_options opts,
                                               std::string* why = nullptr);
  /// Calls stop().
  ~client();
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  /// Unregisters from the master (best effort), drains and closes the RPC
  /// server and the TransferEngine. Blocking; call from a non-runtime thread.
  /// Afterwards call mc::rpc::shutdown(rt) before rt.stop(). Idempotent.
  void stop();

  /// Stores `value` under `key` (replacing any older value). Local by
  /// default; the key is published to the master before this returns.
  /// Errors: invalid_key, invalid_params (empty value), no_available_handle,
  /// too_large, and master/peer errors (rpc_fail, timeout, transfer_fail;
  /// placement::remote also overloaded — over the target's
  /// max_remote_write_bytes or in-flight limits — and access_denied);
  /// superseded when a newer put of the key (by the version taken when each
  /// put started, see README "Consistency model") was committed on the
  /// owner or published elsewhere first: this value was discarded, the newer
  /// one stays. Cancellation: once the bytes are stored, commit and publish complete
  /// even if the caller is cancelled (the key is then present on this node
  /// and at the master; never on one only).
  task<result<void>> put(std::string key, std::span<const std::byte> value, put_options opts);
  // (No default arguments of class type on coroutines: gcc 12 destroys the
  // temporary twice. These overloads forward instead.)
  task<result<void>> put(std::string key, std::span<const std::byte> value) {
    return put(std::move(key), value, put_options{});
  }
  /// Reads `key` into `buf` (local first, else from a healthy replica, trying
  /// the next one when one fails). Returns the value's size.
  /// Errors: object_not_found, buffer_overflow (buf smaller than the value),
  /// timeout / rpc_fail / transfer_fail / overloaded when every replica
  /// failed. A replica's answer is checked: a size other than the one asked
  /// for, or an unknown error code, is rpc_fail; nothing is ever written past
  /// the value's size in `buf`.
  task<result<std::size_t>> get(std::string key, std::span<std::byte> buf);
  /// One result per item, in order (see "Batch semantics" below).
  task<std::vector<result<void>>> batch_put(std::vector<std::string> keys,
                                            std::vector<std::span<const std::byte>> values, put_options opts);
  task<std::vector<result<void>>> batch_put(std::vector<std::string> keys,
                                            std::vector<std::span<const std::byte>> values) {
    return batch_put(std::move(keys), std::move(values), put_options{});
  }
  task<std::vector<result<std::size_t>>> batch_get(std::vector<std::string> keys,
                                                   std::vector<std::span<std::byte>> bufs);

  // ---- Scatter-gather and batch forms (the inference data path) -----------
  //
  // Batch semantics (every batch form):
  // - One result per key, in input order; a key's failure affects no other.
  // - At most options().max_batch_keys keys per call; more (or keys and
  //   buffers of different counts) fail every key with invalid_params.
  // - Duplicate keys are independent items (each gets its own result; a get
  //   reads the same value twice, puts of one key commit in some order).
  // - Gets: local keys are served from the tiers; the others with ONE master
  //   lookup (routes cached), grouped by owner: ONE batch RPC per owner
  //   (split only to fit max_batch_items / the inline reply budget / the
  //   in-flight byte cap), which the owner serves with one transfer batch.
  //   Values up to inline_threshold come back inside the reply (no
  //   registration, no transfer connection); inline and transferred values
  //   to one owner share the round trip. A key whose owner fails is retried
  //   on its next replica; a stale route is refreshed once.
  // - Puts: local placement commits each value and publishes the batch in
  //   group commits (one addReplicas per wave); remote placement asks the
  //   master for ONE write route for the whole batch (or uses opts.target)
  //   and sends ONE batch RPC to it (split as above); values up to
  //   inline_threshold travel inside the request.
  // - Transferred bytes in flight are capped (max_inflight_bytes): a batch
  //   waits for room, the wait counts against the deadline, a single value
  //   larger than the cap runs alone.
  // - Cancelling the awaiting coroutine cancels every RPC in flight; keys not
  //   done then report cancelled (or the error their RPC ended with); caller
  //   buffers are released safely (no late write lands after the call).

  /// put() of a value gathered from `pieces` (in order; any sizes and
  /// addresses; the value is their concatenation). Errors as put();
  /// invalid_params for no piece, more than max_value_pieces or an empty total.
  task<result<void>> put_parts(std::string key, std::vector<std::span<const std::byte>> pieces, put_options opts);
  task<result<void>> put_parts(std::string key, std::vector<std::span<const std::byte>> pieces) {
    return put_parts(std::move(key), std::move(pieces), put_options{});
  }
  /// get() scattered into `pieces`: the value fills them in order from the
  /// first; bytes past the value stay untouched. Returns the value's size.
  /// Errors as get(); buffer_overflow when the pieces hold less than the value
  /// (nothing is written); invalid_params for more than max_value_pieces.
  task<result<std::size_t>> get_parts(std::string key, std::vector<std::span<std::byte>> pieces);
  /// Batch forms of put_parts / get_parts (see "Batch semantics" above).
  task<std::vector<result<void>>> batch_put_parts(std::vector<std::string> keys,
                                                  std::vector<std::vector<std::span<const std::byte>>> values,
                                                  put_options opts);
  task<std::vector<result<void>>> batch_put_parts(std::vector<std::string> keys,
                                                  std::vector<std::vector<std::span<const std::byte>>> values) {
    return batch_put_parts(std::move(keys), std::move(values), put_options{});
  }
  task<std::vector<result<std::size_t>>> batch_get_parts(std::vector<std::string> keys,
                                                         std::vector<std::vector<std::span<std::byte>>> pieces);
  /// exists() for many keys: local ones answered here, the others with ONE
  /// master lookup. Per key: true / false, or the lookup's error.
  task<std::vector<result<bool>>> batch_exists(std::vector<std::string> keys);
  /// Whether any client (this one included) holds `key`.
  task<result<bool>> exists(std::string key);
  /// Removes `key` everywhere it is held. object_not_found if nowhere.
  task<result<void>> remove(std::string key);
  /// Removes every key (`all`) or every key the ECMAScript regular expression
  /// `pattern` matches anywhere in it, everywhere it is held (the master
  /// removes them in pages of 4096, this client tells their holders). Returns
  /// how many keys the master removed. Errors: invalid_params (a malformed,
  /// empty or too long pattern, or one too complex to match), master errors;
  /// a holder that cannot be told keeps its copy unroutable until it evicts
  /// it or re-publishes. The master scans its table in steps of about 64 Ki
  /// entries per call (never the whole table at once).
  task<result<std::uint64_t>> remove_matching(std::string pattern, bool all);
  /// Drops this client's own copy of `key` (other holders keep theirs); the
  /// master forgets this holder before this returns (best effort: if the
  /// notice fails, the next heartbeat's resync corrects it).
  /// object_not_found when not held here.
  task<result<void>> remove_local(std::string key);
  /// remove_local() of every key held here; returns how many were dropped.
  task<result<std::uint64_t>> remove_all_local();
  /// Size and holders of `key`.
  task<result<object_info>> query(std::string key);

  /// Registers a caller buffer with the TransferEngine (RAII). get() and
  /// put() register their buffers on the fly anyway (cheap on TCP and
  /// same-host); a long-lived registration matters for RDMA. Same-host
  /// peers copy to and from the buffer with process_vm_*, 2-3x faster when
  /// it is backed by transparent huge pages (2 MiB-aligned, MADV_HUGEPAGE
  /// before the first touch; lib/transfer/README.md "Huge pages"): the
  /// buffer's pages are left as the caller made them.
  result<mc::transfer::region> register_buffer(std::span<std::byte> buf);

  /// Allocates a registered buffer of `size` bytes in shared memory
  /// (mc::transfer::engine::allocate_shared: a memfd, zero-filled): use it
  /// like a register_buffer() registration (region::data(), size()); it is
  /// freed when the handle is reset or destroyed. Same-host peers that are
  /// granted a range of it map it once and copy with memcpy instead of
  /// process_vm_*: a KV pool allocated here moves between processes on one
  /// host with plain copies (README "Same-host shared buffers"). TCP and RDMA
  /// peers see an ordinary registration. Thread-safe. Errors:
  /// invalid_params (size 0), no_available_handle (memfd / mmap failed),
  /// shutting_down.
  result<mc::transfer::region> allocate_buffer(std::size_t size);

  const std::string& id() const noexcept;
  const std::string& rpc_endpoint() const noexcept;
  const std::string& transfer_endpoint() const noexcept;
  std::uint16_t rpc_port() const noexcept;
  const client_options& options() const noexcept;
  client_stats stats() const;
  tiered::tiered_backend& backend() noexcept;
  data_manager& data() noexcept;
  mc::transfer::engine& engine() noexcept;

  struct impl;

 private:
  explicit client(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace mc::store
