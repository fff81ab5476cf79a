#pragma once
/// The P2P master's state: which clients exist (and whether they are alive)
/// and which client holds which key. Pure in-memory, thread-safe, no I/O; the
/// RPC service (master_service) is a thin layer over it.
#include "mc/runtime/error.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mc::master {

using clock = std::chrono::steady_clock;

/// What a client tells the master about itself.
struct client_info {
  std::string client_id;
  std::string rpc_endpoint;             ///< host:port of its ClientRpcService
  std::string transfer_endpoint;        ///< host:port of its TransferEngine
  std::uint64_t capacity = 0;           ///< total bytes over all tiers
  std::uint64_t used = 0;               ///< bytes in use
  std::uint64_t transfer_instance = 0;  ///< its TransferEngine's instance id (0 = unknown)
  std::string http_endpoint;            ///< host:port of its HTTP server (/metrics, /health); "" = none
  /// HA: the client keeps its own membership record in etcd, under its own
  /// lease (ha_members_prefix); the leader then records nothing for it.
  bool own_membership = false;
};

/// Longest http_endpoint register_client accepts.
inline constexpr std::size_t max_http_endpoint_size = 262;

/// Whether `ep` is "" or, in at most max_http_endpoint_size bytes, an
/// endpoint mc::endpoint::parse accepts ("host:port", IPv6 in brackets, a
/// decimal port in 1..65535, no spaces, quotes or control characters).
/// Thread-safe.
bool valid_http_endpoint(std::string_view ep) noexcept;

/// The HTTP endpoint a node registers: `http_host`:`port` when it binds a
/// specific host, else (0.0.0.0, ::, "") the host part of its advertised
/// `rpc_endpoint`. An IPv6 host gets brackets. "" when that host or `port` is
/// not valid (mc::endpoint). Thread-safe.
std::string http_endpoint_of(std::string_view rpc_endpoint, std::string_view http_host, std::uint16_t port);

enum class health { healthy, suspect, dead };
std::string_view health_name(health h) noexcept;

struct client_status {
  client_info info;
  health state = health::healthy;
  clock::duration since_heartbeat{};
  std::uint64_t keys = 0;
};

/// A replica of a key: which client holds it, and the value's size.
struct replica {
  std::string client_id;
  std::string rpc_endpoint;
  std::string transfer_endpoint;
};

struct key_info {
  std::uint64_t size = 0;
  std::vector<replica> replicas;  ///< healthy holders only
};

/// A key and a version of its value. Versions are hybrid-clock timestamps
/// (mc::tiered::value_version) taken by the node that started the put, when
/// it started (or by the holder at its commit): the master compares them per
/// key, across holders, and never issues any.
struct key_version {
  std::string key;
  std::uint64_t version = 0;
};

/// One publish: `key` (size bytes) at `version` is held by the caller.
struct publish_item {
  std::string key;
  std::uint64_t size = 0;
  std::uint64_t version = 0;
  std::uint64_t replication = 0;  ///< the copy's replication::tag() (0 = a single-copy put)
};

/// A value's replication: which put wrote the copy and how many copies it
/// asked for. Holders store it with the value (as tag(), a tiered value tag)
/// and publish it; copies that carry the same group are replicas of one
/// value: they do not supersede each other, and the master keeps (and
/// repairs) up to `copies` of them.
struct replication {
  static constexpr std::uint32_t max_copies = 16;
  std::uint64_t group = 0;   ///< the put's random id, 56 bits; 0 = a single-copy put
  std::uint32_t copies = 1;  ///< copies asked for, 1..max_copies

  /// 0 for single copies, else group (high 56 bits) | copies (low 8 bits).
  std::uint64_t tag() const noexcept { return group == 0 || copies <= 1 ? 0 : (group << 8) | copies; }
  /// Inverse of tag(); out-of-range copy counts are clamped to 1..max_copies
  /// (the tag arrives from peers).
  static replication of(std::uint64_t tag) noexcept {
    replication r;
    if (tag == 0) return r;
    r.group = tag >> 8;
    r.copies = static_cast<std::uint32_t>(tag & 0xff);
    if (r.copies > max_copies) r.copies = max_copies;
    if (r.group == 0 || r.copies <= 1) return {};
    return r;
  }
};

/// Asks a holder of `key` (at `version`, with replication tag `replication`)
/// to copy it to `target` (through the remote write path).
struct repair_task {
  std::string key;
  std::uint64_t version = 0;
  std::uint64_t replication = 0;
  replica target;
};

/// Counters of replica repair (for /metrics).
struct repair_stats {
  std::uint64_t under_replicated = 0;  ///< keys with 1 <= live copies < asked (as of the last full scan)
  std::uint64_t queued = 0;            ///< keys waiting for a repair to be planned
  std::uint64_t in_flight = 0;         ///< repairs handed to a holder, not yet seen published
  std::uint64_t scheduled = 0;         ///< repairs handed to holders
  std::uint64_t completed = 0;         ///< repairs whose copy was published
  std::uint64_t timed_out = 0;         ///< repairs not published within repair_timeout (planned again)
  std::uint64_t no_target = 0;         ///< plans that found no node with room (the scan retries)
  std::uint64_t trimmed = 0;           ///< copies refused: the key already had the copies asked for
};

/// Why a holder publishes.
enum class publish_kind {
  put,        ///< a fresh commit: supersedes every other holder of an older (or equal) version
  republish,  ///< re-announcing a held copy (re-registration, resync): supersedes
              ///< another live holder only when strictly newer (else refused)
};

/// What the master has queued for one holder (delivered with heartbeats).
struct holder_notices {
  /// Local copies superseded by a newer publish elsewhere: drop (key, v)
  /// locally if the local version is <= v.
  std::vector<key_version> drops;
  /// The queue overflowed: re-publish the full key set (finish_republish).
  bool resync = false;
  /// Copies this holder should make for under-replicated keys.
  std::vector<repair_task> repairs;
  /// What the holder acknowledges with its next heartbeat (notice_ack) once
  /// it applied `drops` and `resync`: until then the master sends the same
  /// ones again. id 0: nothing to acknowledge.
  std::uint64_t notice_epoch = 0;
  std::uint64_t notice_id = 0;
};

/// A holder's acknowledgement of the notices of a heartbeat reply: that
/// reply's holder_notices::notice_epoch and notice_id (0, 0: none yet).
struct notice_ack {
  std::uint64_t epoch = 0;
  std::uint64_t id = 0;
};

/// Counters of the ordering rules (for /metrics).
struct ordering_stats {
  std::uint64_t stale_publishes = 0;   ///< publishes refused: not newer than the (key, holder) entry
  std::uint64_t stale_removals = 0;    ///< removals ignored: the (key, holder) entry is newer
  std::uint64_t superseded = 0;        ///< holders dropped from a key's routes by another holder's publish
  std::uint64_t notice_overflows = 0;  ///< a holder's drop queue overflowed (resync requested)
  std::uint64_t notices_resent = 0;    ///< drop notices sent again: their reply was not acknowledged
};

/// The cost of dropping holders' entries (for /metrics): a holder's entries
/// are not indexed by holder, so dropping them is a pass over the key table.
struct table_stats {
  std::uint64_t scans = 0;          ///< passes made (one per sweep, unregister or finish_republish that needed one)
  std::uint64_t scans_skipped = 0;  ///< passes found unnecessary (the holder had no entry to drop)
  std::uint64_t retired_keys = 0;   ///< keys reset() set aside that reclaim() has not freed yet
};

struct metadata_options {
  /// A client silent for longer stops receiving routes (and its replicas are
  /// not returned by lookups).
  clock::duration route_ttl = std::chrono::seconds(10);
  /// A client silent for longer is dropped with all its replicas.
  clock::duration drop_ttl = std::chrono::seconds(60);
  std::size_t shards = 64;
  std::size_t max_key_bytes = 4096;
  /// Drop notices queued per holder; past it the queue is cleared and the
  /// holder is asked to resync (holder_notices::resync).
  std::size_t max_pending_drops = 4096;
  /// Repairs handed out and not yet published, at most (whole master).
  std::size_t max_concurrent_repairs = 32;
  /// A repair not published within this is planned again.
  clock::duration repair_timeout = std::chrono::seconds(30);
  /// Under-replicated keys waiting to be planned, at most; more are found by
  /// the background scan later.
  std::size_t max_repair_queue = 65536;
  /// Key-table shards the background scan for under-replicated keys walks
  /// per schedule_repairs() call.
  std::size_t repair_scan_shards = 4;
  /// Removed keys whose newest version is remembered, in bytes (each costs
  /// its key's size + 64; split evenly over the shards, oldest removal
  /// forgotten first; 0 = none): a publish of a removed key at a version not
  /// newer than the removed value's is refused (superseded), so a write that
  /// arrives after the key's removal cannot bring the removed value back.
  /// The same memory holds the keys whose last holder a sweep dropped
  /// (orphans, see remove_key).
  std::size_t removed_key_bytes = 16u << 20;
};

/// Thread-safe. Every method takes short internal locks only.
class metadata {
 public:
  explicit metadata(metadata_options opts = {});
  ~metadata();
  metadata(const metadata&) = delete;
  metadata& operator=(const metadata&) = delete;

  /// Registers or re-registers (idempotent) a client; refreshes its heartbeat.
  /// Errors: invalid_params (an empty id, an rpc or transfer endpoint that
  /// mc::endpoint::parse refuses, or an http_endpoint that is not
  /// valid_http_endpoint); object_already_exists when the
  /// id is registered with other endpoints (rpc or transfer) and that client
  /// heartbeated within route_ttl (a live client is never taken over). The
  /// same endpoints (a restart) always re-register; other endpoints take the
  /// id over once the registered client has been silent for route_ttl.
  result<void> register_client(const client_info& info);
  /// Heartbeat with fresh usage numbers. client_not_found if unknown (the
  /// client then re-registers and re-publishes: the master restarted).
  result<void> heartbeat(const std::string& client_id, std::uint64_t used, std::uint64_t capacity);
  /// Removes a client and all its replicas: one pass over the key table,
  /// none when the client held no entry.
  result<void> unregister_client(const std::string& client_id);
  /// Forgets every client and every key at once (a master that stops
  /// leading; the clients re-register with the next leader): O(shards +
  /// clients) under the locks, whatever the number of keys. The key tables
  /// are set aside and freed by reclaim(); lookups see an empty table at
  /// once, and registrations and publishes work meanwhile. The removed-key
  /// memory is kept. Thread-safe.
  void reset();
  /// Frees up to `max_keys` keys set aside by reset() (their counters and
  /// client slots are released); returns how many are left. Bounded work
  /// per call: the caller spreads it over time (the master's sweep timer
  /// does). Thread-safe.
  std::size_t reclaim(std::size_t max_keys);

  /// Records that `client_id` holds `key` (size bytes) at `version` (> 0).
  /// Ordering, per (key, holder): a publish whose version is older than the
  /// entry's, or equal to a superseded entry's, is refused with
  /// errc::invalid_version (the caller drops its copy if not newer locally);
  /// an equal version of a live entry is an idempotent refresh. Across
  /// holders: a publish older than another holder's entry (live or
  /// superseded), and a `republish` not newer than another live holder's, is
  /// refused with errc::superseded (the caller drops its copy; a put reports
  /// SUPERSEDED) — so a publish that arrives late (after its put gave up, or
  /// after a newer put) never replaces a newer value. An accepted publish
  /// supersedes every other holder: they leave the key's routes (kept as
  /// superseded entries so that their stale publishes are refused) and are
  /// told to drop their copy (take_notices). Between equal versions of
  /// different holders (one put written twice, e.g. retried at another
  /// owner) the later publish wins. The key's size follows the accepted
  /// publish. `epoch` tags the entry for finish_republish (the entry keeps
  /// the largest epoch it was published with). A publish of a key that was
  /// removed (remove_key, remove_matching, or its last entry by
  /// remove_replica) at a version at least as new is refused with
  /// superseded while the removal is remembered
  /// (metadata_options::removed_key_bytes).
  /// Errors: invalid_key, client_not_found, invalid_version, superseded.
  ///
  /// Replicas: a publish whose `replication` tag names the group of the
  /// key's live copies joins them instead of superseding them (any kind),
  /// while the key has fewer than the group's `copies` live holders; past
  /// that it is refused with invalid_version (the holder drops its copy: a
  /// surplus copy, e.g. of a holder declared dead that came back, is
  /// trimmed). A publish of another group (or none) supersedes as above.
  result<void> add_replica(const std::string& key, const std::string& client_id, std::uint64_t size,
                           std::uint64_t version, publish_kind kind = publish_kind::put, std::uint64_t epoch = 0,
                           std::uint64_t replication = 0);
  /// Removes `client_id`'s entry for `key` (live or superseded) unless it is
  /// newer than `version`: an eviction notice of an old copy never removes a
  /// fresher re-put. Errors: object_not_found (no such entry),
  /// invalid_version (the entry is newer; nothing removed), invalid_key.
  result<void> remove_replica(const std::string& key, const std::string& client_id, std::uint64_t version);
  /// Ends a full re-publish of `client_id` (every held key was published with
  /// `epoch` or later): removes that holder's entries tagged with an older
  /// epoch. Returns how many entries were removed; client_not_found. A pass
  /// over the key table, skipped when every entry the holder has was
  /// published with `epoch` or later (as after a failover: the new master
  /// knows only what was re-published).
  result<std::uint64_t> finish_republish(const std::string& client_id, std::uint64_t epoch);
  /// Takes up to `max` queued drop notices, up to `max_repairs` repair tasks
  /// and the resync flag of a holder (empty for an unknown client).
  /// Without `ack` the notices taken are gone from the master. With one
  /// (what a heartbeat carries), delivery is acknowledged: the drops and
  /// resync flag handed out are kept and handed out again, under the same
  /// notice_epoch/notice_id, until a call whose `ack` names them (the holder
  /// applied them); only then are the next ones taken from the queue. A lost
  /// reply thus loses no notice (applying one twice is harmless: a drop
  /// removes only a copy not newer than its version). Repair tasks are not
  /// acknowledged (a repair not done in time is planned again). Thread-safe.
  holder_notices take_notices(const std::string& client_id, std::size_t max, std::size_t max_repairs = 0,
                              std::optional<notice_ack> ack = std::nullopt);
  /// Plans repairs of replicated keys with fewer live copies than asked (and
  /// at least one; a copy counts while its holder is registered, also when
  /// suspect: only a holder declared dead and dropped loses its copies): for
  /// each, a healthy surviving holder is asked (its
  /// next take_notices) to copy the value to a healthy node with room that
  /// holds no entry of the key. At most max_concurrent_repairs are in
  /// flight; one not published within repair_timeout is planned again. Also
  /// walks repair_scan_shards shards of the key table for under-replicated
  /// keys (the safety net for lost or overflowed plans). Keys become
  /// under-replicated when a holder is dropped (dead or unregistered), a
  /// copy is removed (eviction), or a put committed fewer copies than asked.
  /// Returns the repairs handed out by this call. Call periodically (the
  /// service does, from its sweep, while leading and not rebuilding).
  std::size_t schedule_repairs();
  repair_stats repairs() const;
  ordering_stats ordering() const;
  /// Passes over the key table and keys awaiting reclaim(). Thread-safe.
  table_stats table() const;
  /// Removes the key from every holder (the caller tells the holders) and
  /// queues each holder a drop notice for it (take_notices; best effort:
  /// skipped when the holder's queue is full, never a resync), so that a
  /// holder the caller cannot reach drops its copy at its next heartbeat.
  /// Returns the holders, superseded ones included; object_not_found,
  /// invalid_key. An absent key whose last holder was dropped as silent
  /// (sweep) is remembered as removed at that holder's version (within
  /// removed_key_bytes), so the holder's re-publish when it comes back is
  /// refused (superseded) instead of bringing the removed value back; the
  /// answer is still object_not_found.
  result<std::vector<replica>> remove_key(const std::string& key);
  /// Removes up to `limit` keys: every key when `all`, else those the
  /// ECMAScript regular expression `pattern` matches (search, anywhere in the
  /// key; at most max_pattern_bytes). Scans the shards from `from_shard` on
  /// and stops after the shard where `limit` is reached or once
  /// scan_budget entries were looked at (at least one whole shard per call),
  /// so one call never walks the whole table. Returns the removed keys with
  /// their holders (the caller tells the holders; each holder is also queued
  /// a drop notice, as by remove_key) and the shard to continue
  /// from (shard_count() when the scan is complete). Errors: invalid_params
  /// (an empty, too long or malformed pattern, or one whose matching exceeded
  /// Boost.Regex's complexity bound; nothing past the keys already removed is
  /// touched), out_of_range (from_shard past the end). Thread-safe; takes each
  /// shard's lock in turn.
  struct removed_key {
    std::string key;
    std::vector<replica> holders;
  };
  struct removal_page {
    std::vector<removed_key> removed;
    std::size_t next_shard = 0;
  };
  static constexpr std::size_t max_pattern_bytes = 1024;
  static constexpr std::size_t scan_budget = 65536;
  result<removal_page> remove_matching(const std::string& pattern, bool all, std::size_t limit,
                                       std::size_t from_shard = 0);
  std::size_t shard_count() const noexcept { return shards_.size(); }
  /// Healthy replicas of a key; object_not_found if none, invalid_key for an
  /// empty or too long key. Thread-safe.
  result<key_info> lookup(std::string_view key) const;
  /// One key's answer of lookup_batch: `error` is clear when the key was
  /// found (`info` then holds its size and healthy replicas), else what
  /// lookup() would fail with (`info` is then unspecified).
  struct lookup_answer {
    boost::system::error_code error;
    key_info info;
  };
  /// lookup() of each of `keys`, answers in `out` (out[i] for keys[i]). The keys are grouped by shard: one hold of a
  /// shard's lock (and of the client table's shared lock) per group, with
  /// the group's table slots and entries prefetched together, so a batch
  /// waits for about one memory round trip per group instead of two per
  /// key; `out`'s replica lists keep their storage, so a caller that reuses
  /// `out` allocates nothing per key once warm. Each key is looked up
  /// atomically; the batch is not a snapshot. Thread-safe.
  /// `out` must have at least keys.size() elements (else nothing is looked up).
  void lookup_batch(std::span<const std::string_view> keys, std::span<lookup_answer> out) const;
  /// Forgets every remembered removal (metadata_options::removed_key_bytes):
  /// a later publish of a removed key is accepted again. For tools and tests
  /// that reset a master's table.
  void forget_removals();
  bool exists(std::string_view key) const;
  /// A healthy client with room for `size` bytes (most free space first),
  /// excluding `exclude`; no_available_handle if none.
  result<replica> write_route(std::uint64_t size, const std::string& exclude = {}) const;
  /// Up to `count` distinct healthy clients with room for `size` bytes, most
  /// free space first, none of them in `exclude`; fewer when fewer qualify
  /// (no_available_handle when none does).
  result<std::vector<replica>> write_routes(std::uint64_t size, std::size_t count,
                                            const std::vector<std::string>& exclude) const;

  /// Applies TTLs: marks suspects, drops dead clients and their replicas
  /// (one pass over the key table for all the clients dropped at once).
  /// Returns the ids dropped. Called periodically by the service.
  std::vector<std::string> sweep();

  std::vector<client_status> clients() const;
  /// One registered client's info. client_not_found when unknown (or dropped).
  result<client_info> find_client(const std::string& client_id) const;
  /// One page of a paged scan of the keys (scan_keys).
  struct key_page {
    /// Keys with the prefix and a live holder, with their live holders (as
    /// registered; healthy or suspect), in no particular order.
    std::vector<std::pair<std::string, key_info>> keys;
    /// Where the next page starts; 0 once the scan is complete.
    std::uint64_t cursor = 0;
  };
  /// Home slots one scan_keys call looks at, at most: a page costs bounded
  /// work whatever the prefix matches (it may then hold fewer than `limit`
  /// keys, or none, with a cursor that is not 0).
  static constexpr std::size_t scan_slot_budget = 8192;
  /// One page of a scan of the keys starting with `prefix` (empty: every
  /// key). Start with cursor 0 and pass each page's cursor to the next call
  /// until it returns 0 (the reverse-binary cursor of Redis' SCAN, over the
  /// home slots of each shard's table, one shard after another). Guarantees:
  /// every key that exists, with a live holder, from the first call to the
  /// last is returned at least once, also when tables grow or entries move
  /// between calls; a key may be returned more than once (when its shard's
  /// table grew mid-scan); keys added or removed during the scan may or may
  /// not appear. A page holds at most `limit` keys, except that the keys
  /// sharing one home slot are never split across pages (a page with a
  /// single home slot's keys may exceed a tiny limit), and looks at no more
  /// than max(scan_slot_budget, 4 * limit) home slots. Holds one shard's
  /// lock at a time, never across calls; a cursor carries no state on the
  /// master (any cursor value is safe). Errors: invalid_params (limit 0),
  /// out_of_range (a cursor whose shard is past shard_count(), e.g. from a
  /// master with fewer shards).
  result<key_page> scan_keys(const std::string& prefix, std::uint64_t cursor, std::size_t limit) const;
  /// Up to `limit` distinct keys with a prefix, in no particular order: a
  /// scan_keys loop (bounded pages; no lock held between them). For tests
  /// and small tables; the HTTP /keys endpoint serves pages.
  std::vector<std::pair<std::string, key_info>> keys(const std::string& prefix, std::size_t limit) const;
  /// Keys with a live (routable) holder. O(1): a counter kept by every change.
  std::uint64_t key_count() const;
  /// Live (routable) (key, holder) entries. O(1), as key_count().
  std::uint64_t replica_count() const;

 private:
  struct client_entry;
  struct slot_table;
  struct shard;
  struct retired_tables;
  /// The key's shard and its hash within the shard.
  std::pair<shard*, std::uint32_t> shard_for(std::string_view key) const;
  /// As shard_for, with the shard's index instead of its address.
  std::pair<std::size_t, std::uint32_t> shard_index(std::string_view key) const;
  health health_of(const client_entry& c, clock::time_point now) const;
  /// Each shard's share of removed_key_bytes.
  std::size_t grave_budget() const noexcept { return opts_.removed_key_bytes / shards_.size(); }
  result<void> check_key(std::string_view key) const;
  /// Unbinds a client from its slot (it is gone; clients_mu_ held
  /// exclusively) and pins the slot for drop_client_replicas.
  void forget_client(const client_entry& c);
  /// Drops gone clients' entries (one pass over the table for all of them;
  /// none for a client without entries), then releases forget_client's pins
  /// (a slot is freed if nothing else refers to it). `orphans`: the clients
  /// went silent (they may come back and re-publish): the keys they were the
  /// last holder of are remembered as orphans (see remove_key). No lock held.
  void drop_client_replicas(std::span<const std::uint32_t> slots, bool orphans = false);
  /// Removes the entries of the holders `slots` with epoch < `below_epoch`
  /// (every entry when nullopt, whatever its epoch) in one pass over the
  /// table; returns, per slot, (entries removed, live entries among them).
  /// `orphans`: as drop_client_replicas.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> drop_holder_entries(std::span<const std::uint32_t> slots,
                                                                           std::optional<std::uint64_t> below_epoch,
                                                                           bool orphans = false);
  /// Releases `n` references of `slot` (entries removed or pins), freeing it
  /// if its client is gone and none is left. clients_mu_ held exclusively.
  void unref(std::uint32_t slot, std::uint64_t n);
  /// Queues holder a drop notice; a full queue is cleared and a resync asked
  /// for, or, `best_effort`, the notice is skipped.
  void queue_drop(std::uint32_t holder, const std::string& key, std::uint64_t version, bool best_effort = false);
  /// The endpoints of removed entries' holders; live ones leave their
  /// client's key count; their slots are released. Takes clients_mu_ (no
  /// shard lock may be held).
  struct holder_ref {
    std::uint32_t slot = 0;
    bool live = false;
    std::uint64_t version = 0;
  };
  /// Also queues each holder a drop notice for `key` (best effort: only while
  /// its queue has room, never a resync).
  std::vector<replica> release_holders(const std::vector<holder_ref>& holders, const std::string& key);
  struct counters;
  std::unique_ptr<counters> counters_;
  struct repair_state;
  std::unique_ptr<repair_state> repair_;
  std::unique_ptr<retired_tables> retired_;
  /// Queues `key` for a repair plan (bounded; not when already queued or in
  /// flight). Takes only repair_state's lock (a leaf: any lock may be held).
  void note_under_replicated(std::string_view key);
  /// A planned repair's copy was published (the key has its copies again).
  void repair_done(std::string_view key);
  /// Plans one queued key's repair; true when a task was handed out.
  bool plan_repair(const std::string& key, clock::time_point now);
  /// Scans repair_scan_shards shards for under-replicated keys.
  void scan_for_repairs();

  metadata_options opts_;
  /// Guards clients_ and slots_ (lookups take it shared).
  mutable std::shared_mutex clients_mu_;
  std::unordered_map<std::string, std::shared_ptr<client_entry>> clients_;
  std::unique_ptr<slot_table> slots_;
  std::vector<std::unique_ptr<shard>> shards_;
};

}  // namespace mc::master
