#pragma once
// Internal state of mc::store::client (not a public header).
#include "mc/master/master_client.hpp"
#include "mc/rpc/server.hpp"
#include "mc/runtime/async_mutex.hpp"
#include "mc/runtime/async_semaphore.hpp"
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/gate.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/store/client.hpp"
#include "mc/store/client_service.hpp"
#include "mc/store/data_manager.hpp"
#include "mc/store/peer_client.hpp"
#include "mc/tiered/tiered_backend.hpp"
#include "bounce_arena.hpp"

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace mc::store {

namespace detail {
class bounce_arena;
}

/// Errors after which a read is worth trying on another replica.
inline bool worth_another_replica(const boost::system::error_code& ec) {
  return mc::is(ec, errc::object_not_found) || mc::is(ec, errc::timeout) || mc::is(ec, errc::rpc_fail) ||
         mc::is(ec, errc::transfer_fail) || mc::is(ec, errc::shutting_down) || mc::is(ec, errc::invalid_params) ||
         mc::is(ec, errc::overloaded);
}

/// Errors after which a write routed by a lease is worth sending to another
/// node (the owner is gone, full or busy; not the caller's own mistakes).
inline bool worth_another_owner(const boost::system::error_code& ec) {
  return mc::is(ec, errc::timeout) || mc::is(ec, errc::rpc_fail) || mc::is(ec, errc::transfer_fail) ||
         mc::is(ec, errc::shutting_down) || mc::is(ec, errc::overloaded) || mc::is(ec, errc::no_available_handle) ||
         mc::is(ec, errc::access_denied);
}

struct client::impl {
  impl(mc::runtime::runtime& r, client_options o);

  mc::runtime::runtime& rt;
  client_options opts;
  std::string id;
  std::string rpc_endpoint;
  std::string transfer_endpoint;
  std::unique_ptr<tiered::tiered_backend> backend;
  std::unique_ptr<mc::transfer::engine> engine;
  std::vector<mc::transfer::region> arena_regions;  // DRAM + staging arenas
  std::unique_ptr<data_manager> dm;
  std::unique_ptr<mc::rpc::server> server;
  std::shared_ptr<const client_service_counters> service_counters;  // set with the server
  mc::master::master_client master;
  peer_client peers;
  mc::gate background;  // heartbeat loop and the notice drainer
  std::shared_ptr<boost::asio::steady_timer> heartbeat_timer;
  /// stop() cancels the heartbeat loop (and the master call it may be in)
  /// through this; emitted on thread 0, the loop's thread.
  boost::asio::cancellation_signal heartbeat_cancel;
  boost::asio::cancellation_signal follow_cancel;  ///< HA: ends master.follow_leader (thread 0)
  /// HA: the leader watch saw a new leader; the heartbeat loop registers
  /// with it now (thread 0 only).
  bool leader_moved = false;
  std::atomic<bool> registered{false};
  std::atomic<bool> stopped{false};

  // Removal notices for the master (evicted or superseded copies): a bounded
  // queue drained by one coroutine (notice_loop) in batches; on overflow the
  // queue is dropped and resync_needed makes the next heartbeat re-publish
  // the full key set (republish_all), replacing the master's view of us.
  static constexpr std::size_t notice_batch = 1024;
  std::mutex notices_mu;
  std::vector<mc::master::key_version> notices;  // guarded by notices_mu
  std::shared_ptr<boost::asio::steady_timer> notice_timer;
  std::atomic<bool> resync_needed{false};
  /// Epoch of the last full republish (the master removes our entries of
  /// older epochs when it finishes); every publish carries it.
  std::atomic<std::uint64_t> epoch{0};
  /// Serialises full republishes and notice batches, so that a notice for a
  /// copy evicted after a republish's snapshot reaches the master after it.
  mc::async_mutex resync_mu;

  // Owners (by transfer endpoint) that answered a read call with
  // unsupported (older nodes, RPC authentication on): their small reads go
  // over the RPC until the entry expires (60 s). Bounded.
  std::mutex no_calls_mu;
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> no_calls;
  static constexpr std::size_t max_no_calls = 1024;
  /// Whether small reads and writes to this owner may go as TransferEngine calls.
  bool calls_to(const std::string& transfer_endpoint);
  void no_calls_to(const std::string& transfer_endpoint);
  /// After a call to `transfer_endpoint`: a success is counted in `calls`;
  /// an error meaning the owner serves no calls or its transfer port cannot
  /// be reached (unsupported, transfer_fail, no_available_handle) is
  /// remembered (no_calls_to) and becomes unsupported: send the RPC.
  template <class T>
  void settle_call(result<T>& r, std::atomic<std::uint64_t>& calls, const std::string& transfer_endpoint) {
    if (r) {
      calls.fetch_add(1, std::memory_order_relaxed);
    } else if (mc::is(r.error(), errc::unsupported) || mc::is(r.error(), errc::transfer_fail) ||
               mc::is(r.error(), errc::no_available_handle)) {
      no_calls_to(transfer_endpoint);
      r = fail(errc::unsupported);
    }
  }

  // Route cache: key -> master's answer; bounded, invalidated when stale.
  std::mutex routes_mu;
  std::unordered_map<std::string, mc::master::key_info> routes;
  static constexpr std::size_t max_routes = 65536;

  /// Transferred bytes of this client's remote gets/puts in flight (options().max_inflight_bytes).
  std::unique_ptr<async_semaphore> inflight;
  /// Keys of this client's peer batch RPCs in flight: at most what one owner
  /// admits per connection (limits.max_inflight_keys_per_connection, assumed
  /// alike across the fleet), so a large batch waits instead of being refused.
  std::unique_ptr<async_semaphore> inflight_keys;
  std::size_t wave_keys() const noexcept {
    return static_cast<std::size_t>(
        std::min<std::uint64_t>(opts.limits.max_inflight_keys_per_connection, max_batch_items));
  }

  // Group commit of publishes: concurrent commit hooks queue their item; the
  // one that takes publish_flush sends everything queued in one addReplicas
  // and hands each waiter its result.
  struct pending_publish {
    mc::master::publish_item item;
    std::optional<result<void>> outcome;  // set by the flusher, under publish_mu
  };
  std::mutex publish_mu;
  std::vector<std::shared_ptr<pending_publish>> publish_queue;  // guarded by publish_mu
  mc::async_mutex publish_flush;
  static constexpr std::size_t publish_batch_max = 4096;

  struct counters {
    std::atomic<std::uint64_t> local_hits{0}, remote_hits{0}, misses{0}, fallbacks{0}, route_cache_hits{0},
        master_errors{0};
    std::atomic<std::uint64_t> batch_calls{0}, batch_keys{0}, batch_rpcs{0}, inline_reads{0}, inline_writes{0},
        remote_read_bytes{0}, publish_batches{0}, publishes{0}, read_calls{0}, write_calls{0}, publish_calls{0};
    std::atomic<std::uint64_t> notices_sent{0}, notice_batches{0}, notice_overflows{0}, resyncs{0}, superseded_drops{0},
        stale_publishes{0}, failed_publishes{0};
    std::atomic<std::uint64_t> write_routes{0}, write_route_lease_hits{0}, write_route_lease_drops{0};
    std::atomic<std::uint64_t> replication_incomplete{0}, repairs_done{0}, repairs_failed{0};
  } stats;

  // Write-route lease (opts.write_route_lease): the master's last write route,
  // reused by remote puts without a target while it is young, has bytes left
  // and the master it came from still leads.
  struct route_lease {
    std::string master;  ///< current_master() when granted
    std::string endpoint, transfer_endpoint;
    std::uint64_t bytes_left = 0;
    mc::time_point expires{};
  };
  std::mutex lease_mu;
  std::optional<route_lease> lease;  // guarded by lease_mu
  /// Takes `bytes` from the lease: its endpoints, or nullopt (none, expired,
  /// too few bytes left, another leader).
  std::optional<std::pair<std::string, std::string>> take_lease(std::uint64_t bytes);
  /// Drops the lease if it still routes to `endpoint`.
  void drop_lease(const std::string& endpoint);
  /// A write route for `bytes` from the master; when leases are on, asks for
  /// room for a whole lease first and keeps the rest as the lease.
  task<result<mc::master::replica>> fresh_write_route(std::uint64_t bytes);

  // Registration with the master; republish everything held when `republish`.
  task<result<void>> register_with_master(bool republish);
  /// Re-publishes every held key with its version under a new epoch, then
  /// finishRepublish; copies the master refuses (superseded) are dropped.
  task<result<void>> republish_all();
  task<void> heartbeat_loop();
  /// One heartbeat round: leader refresh (HA), heartbeat, re-registration.
  task<void> heartbeat_once();
  /// Registrations the heartbeat loop tried in a row without success (its thread only).
  std::uint64_t failed_registrations = 0;
  /// The heartbeat loop's acknowledgement of the last drop notices and resync
  /// flag it applied (sent with the next heartbeat). Heartbeat loop only.
  mc::master::notice_ack acked_notices;
  /// The commit hook: publishes (key, size, version, replication tag).
  task<result<void>> publish(const std::string& key, std::uint64_t size, std::uint64_t version, std::uint64_t tag);
  /// publish() for several items: queued together, one waiter for them all;
  /// one result per item, in order.
  task<std::vector<result<void>>> publish_many(std::vector<mc::master::publish_item> items);
  /// The backend observer: evicted and superseded copies become notices.
  void on_removed(const std::string& key, std::uint64_t version, tiered::removal_reason why);
  /// Drops local copies the master says were superseded (if not newer here).
  void apply_drops(const std::vector<mc::master::key_version>& drops);
  /// Runs the master's repair tasks in the background (one batch at a time;
  /// tasks arriving while one runs are dropped: the master plans them again).
  void start_repairs(std::vector<mc::master::repair_task> tasks);
  task<void> run_repairs(std::vector<mc::master::repair_task> tasks);
  /// Copies one held value to the task's target with its replication tag.
  task<result<void>> repair_one(const mc::master::repair_task& t);
  std::atomic<bool> repairing{false};
  task<void> notice_loop();
  /// Sends every queued notice in batches (under resync_mu).
  task<void> drain_notices();
  void wake_notice_loop();

  /// Replicated keys: rotates the replica order so successive gets start at
  /// different copies (the rest stay the fallbacks, in order).
  void spread(mc::master::key_info& route) {
    if (route.replicas.size() < 2) return;
    auto k = spread_next.fetch_add(1, std::memory_order_relaxed) % route.replicas.size();
    std::rotate(route.replicas.begin(), route.replicas.begin() + static_cast<std::ptrdiff_t>(k), route.replicas.end());
  }
  std::atomic<std::uint64_t> spread_next{0};
  std::optional<mc::master::key_info> cached_route(const std::string& key);
  void cache_route(const std::string& key, const mc::master::key_info& info);
  void forget_route(const std::string& key);

  /// Sends one flush of queued publishes (under publish_flush).
  task<void> flush_publishes();
  /// One batch of put publishes: as a publish call to the master when it
  /// offers them (mc/master/publish_call.hpp), else - and after any failure
  /// of the call as a whole - over the RPC (a publish is idempotent per key,
  /// holder and version, so a call that reached the master before failing
  /// may be sent again). Flusher only (under publish_flush).
  task<result<std::vector<result<void>>>> publish_items(std::vector<mc::master::publish_item> items);
  /// A publish call endpoint whose call failed as a whole (unreachable,
  /// refused, timed out) is not tried again before this time. Flusher only.
  std::string publish_call_failed;
  std::chrono::steady_clock::time_point publish_call_retry_at{};

  // The batch data path (client_batch.cpp).
  struct get_item;
  struct put_item;
  task<std::vector<result<std::size_t>>> get_many(std::vector<std::string> keys,
                                                  std::vector<std::vector<std::span<std::byte>>> pieces,
                                                  bool probe_local = true);
  task<void> get_remote_many(std::vector<get_item*> items);
  task<void> fetch_routes(std::vector<get_item*>& items);
  task<void> read_from_owner(std::string endpoint, std::vector<get_item*> items);
  task<void> read_wave(std::string endpoint, std::vector<get_item*> items);
  task<std::vector<result<void>>> put_many(std::vector<std::string> keys,
                                           std::vector<std::vector<std::span<const std::byte>>> values,
                                           put_options opts);
  /// put_many with put_options::replicas > 1: one copy per node, written concurrently.
  task<std::vector<result<void>>> put_replicated(std::vector<std::string> keys,
                                                 std::vector<std::vector<std::span<const std::byte>>> values,
                                                 put_options popts);
  task<void> write_wave(std::string endpoint, std::string transfer_endpoint, std::vector<put_item*> items);
  /// Sends `items` to `endpoint` in waves (inline and transferred).
  task<void> write_waves(const std::string& endpoint, const std::string& transfer_endpoint,
                         std::vector<put_item*> items);

  /// RDMA only: the registered bounce arena for caller memory that is not
  /// inside a registration (null on TCP / same-host, or when disabled).
  std::unique_ptr<detail::bounce_arena> bounce;
  bool rdma() const noexcept { return opts.protocol == "rdma"; }
  /// The room one wave holds while its RPC runs: keys and transferred bytes.
  struct wave_units {
    semaphore_units keys, bytes;
  };
  task<result<wave_units>> wave_room(std::size_t keys, std::uint64_t bytes);
  /// Transferred bytes per wave (max_inflight_bytes; on RDMA also the bounce arena).
  std::uint64_t transfer_cap() const noexcept;
  /// How one item's bytes are exposed to its owner for one request: fresh
  /// tokens (revoked when the request ends, so a late transfer from a peer
  /// we gave up on is refused), derived from a long-lived registration
  /// (the caller's register_buffer or the bounce arena: no registration
  /// cost) or, failing that, a registration of their own.
  struct exposure {
    /// One registration per piece, or one scatter registration
    /// (engine::register_pieces_within) for all of `pieces`.
    std::vector<mc::transfer::region> regions;
    /// With a scatter registration: the pieces it covers, in value order.
    std::vector<std::span<std::byte>> pieces;
    bool derived = false;  ///< shares a long-lived MR: on RDMA giving up needs a fence
    /// Appends one descriptor per piece, in value order.
    void describe(mc::store::remote_pieces& out) const {
      out.reserve(out.size() + (pieces.empty() ? regions.size() : pieces.size()));
      if (pieces.empty()) {
        for (auto& g : regions) out.push_back(g.describe());
        return;
      }
      const auto& g = regions.front();
      for (auto& p : pieces) out.push_back(g.describe(static_cast<std::uint64_t>(p.data() - g.data()), p.size()));
    }
  };
  /// Exposes `pieces` trimmed to `size` (or `slots`, bounce slots standing
  /// in for them, when not empty). `allow_derived` false: a registration of
  /// their own even inside a registration (RDMA without a known transfer
  /// endpoint to fence).
  result<exposure> expose(const std::vector<std::span<std::byte>>& pieces, std::uint64_t size,
                          mc::transfer::region_access access, const std::vector<std::span<std::byte>>& slots,
                          bool allow_derived = true);
  /// Takes the bounce slots of a wave's items at once (see detail::plan_slots;
  /// clears `wants` of items that do not fit). Empty lease when none.
  task<result<detail::bounce_lease>> take_slots(const std::vector<std::uint64_t>& sizes, std::vector<bool>& wants);
  /// Whether these pieces need the bounce arena (RDMA, not inside registrations).
  bool needs_bounce(const std::vector<std::span<std::byte>>& pieces, std::uint64_t size,
                    mc::transfer::region_access access) const;
};

}  // namespace mc::store
