#pragma once
// Internal state of mc::store::client (not a public header).
#include "mc/master/master_client.hpp"
#include "mc/rpc/server.hpp"
#include "mc/runtime/gate.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/store/client.hpp"
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
  mc::master::master_client master;
  peer_client peers;
  mc::gate background;  // heartbeat loop and fire-and-forget master updates
  std::shared_ptr<boost::asio::steady_timer> heartbeat_timer;
  /// stop() cancels the heartbeat loop (and the master call it may be in)
  /// through this; emitted on thread 0, the loop's thread.
  boost::asio::cancellation_signal heartbeat_cancel;
  std::atomic<bool> registered{false};
  bool stopped = false;

  // Route cache: key -> master's answer; bounded, invalidated when stale.
  std::mutex routes_mu;
  std::unordered_map<std::string, mc::master::key_info> routes;
  static constexpr std::size_t max_routes = 65536;

  struct counters {
    std::atomic<std::uint64_t> local_hits{0}, remote_hits{0}, misses{0}, fallbacks{0}, route_cache_hits{0},
        master_errors{0};
  } stats;

  // Registration with the master; republish everything held when `republish`.
  task<result<void>> register_with_master(bool republish);
  task<void> heartbeat_loop();
  task<result<void>> publish(const std::string& key, std::uint64_t size);
  void on_evicted(const std::string& key);

  std::optional<mc::master::key_info> cached_route(const std::string& key);
  void cache_route(const std::string& key, const mc::master::key_info& info);
  void forget_route(const std::string& key);
  task<result<mc::master::key_info>> route(const std::string& key);

  task<result<void>> put_remote(const std::string& key, std::span<const std::byte> value, const std::string& target);
  task<result<std::size_t>> get_remote(const std::string& key, std::span<std::byte> buf);
};

}  // namespace mc::store
