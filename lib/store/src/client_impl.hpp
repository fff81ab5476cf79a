#pragma once
// Internal state of mc::store::client (not a public header).
#include "mc/master/master_client.hpp"
#include "mc/rpc/server.hpp"
#include "mc/runtime/async_mutex.hpp"
#include "mc/runtime/gate.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/store/client.hpp"
#include "mc/store/client_service.hpp"
#include "mc/store/data_manager.hpp"
#include "mc/store/peer_client.hpp"
#include "mc/store/tiered_backend.hpp"

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace mc::store {

struct client::impl {
  impl(mc::runtime::runtime& r, client_options o);

  mc::runtime::runtime& rt;
  client_options opts;
  std::string id;
  std::string rpc_endpoint;
  std::string transfer_endpoint;
  std::unique_ptr<tiered_backend> backend;
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

  // Route cache: key -> master's answer; bounded, invalidated when stale.
  std::mutex routes_mu;
  std::unordered_map<std::string, mc::master::key_info> routes;
  static constexpr std::size_t max_routes = 65536;

  struct counters {
    std::atomic<std::uint64_t> local_hits{0}, remote_hits{0}, misses{0}, fallbacks{0}, route_cache_hits{0},
        master_errors{0};
    std::atomic<std::uint64_t> notices_sent{0}, notice_batches{0}, notice_overflows{0}, resyncs{0},
        superseded_drops{0}, stale_publishes{0};
  } stats;

  // Registration with the master; republish everything held when `republish`.
  task<result<void>> register_with_master(bool republish);
  /// Re-publishes every held key with its version under a new epoch, then
  /// finishRepublish; copies the master refuses (superseded) are dropped.
  task<result<void>> republish_all();
  task<void> heartbeat_loop();
  /// The commit hook: publishes (key, size, version).
  task<result<void>> publish(const std::string& key, std::uint64_t size, std::uint64_t version);
  /// The backend observer: evicted and superseded copies become notices.
  void on_removed(const std::string& key, std::uint64_t version, removal_reason why);
  /// Drops local copies the master says were superseded (if not newer here).
  void apply_drops(const std::vector<mc::master::key_version>& drops);
  task<void> notice_loop();
  /// Sends every queued notice in batches (under resync_mu).
  task<void> drain_notices();
  void wake_notice_loop();

  std::optional<mc::master::key_info> cached_route(const std::string& key);
  void cache_route(const std::string& key, const mc::master::key_info& info);
  void forget_route(const std::string& key);
  task<result<mc::master::key_info>> route(const std::string& key);

  task<result<void>> put_remote(const std::string& key, std::span<const std::byte> value, const std::string& target);
  task<result<std::size_t>> get_remote(const std::string& key, std::span<std::byte> buf);
};

}  // namespace mc::store
