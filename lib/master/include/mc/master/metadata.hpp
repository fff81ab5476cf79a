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
#include <string>
#include <unordered_map>
#include <vector>

namespace mc::master {

using clock = std::chrono::steady_clock;

/// What a client tells the master about itself.
struct client_info {
  std::string client_id;
  std::string rpc_endpoint;       ///< host:port of its ClientRpcService
  std::string transfer_endpoint;  ///< host:port of its TransferEngine
  std::uint64_t capacity = 0;     ///< total bytes over all tiers
  std::uint64_t used = 0;         ///< bytes in use
  std::uint64_t transfer_instance = 0;  ///< its TransferEngine's instance id (0 = unknown)
};

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

struct metadata_options {
  /// A client silent for longer stops receiving routes (and its replicas are
  /// not returned by lookups).
  clock::duration route_ttl = std::chrono::seconds(10);
  /// A client silent for longer is dropped with all its replicas.
  clock::duration drop_ttl = std::chrono::seconds(60);
  std::size_t shards = 64;
  std::size_t max_key_bytes = 4096;
};

/// Thread-safe. Every method takes short internal locks only.
class metadata {
 public:
  explicit metadata(metadata_options opts = {});
  ~metadata();
  metadata(const metadata&) = delete;
  metadata& operator=(const metadata&) = delete;

  /// Registers or re-registers (idempotent) a client; refreshes its heartbeat.
  /// Re-registration with other endpoints updates them.
  result<void> register_client(const client_info& info);
  /// Heartbeat with fresh usage numbers. client_not_found if unknown (the
  /// client then re-registers and re-publishes: the master restarted).
  result<void> heartbeat(const std::string& client_id, std::uint64_t used, std::uint64_t capacity);
  /// Removes a client and all its replicas.
  result<void> unregister_client(const std::string& client_id);

  /// Records that `client_id` holds `key` (size bytes). invalid_key for an empty
  /// or oversize key, client_not_found for an unregistered client.
  result<void> add_replica(const std::string& key, const std::string& client_id, std::uint64_t size);
  /// Removes one holder; object_not_found when that client held no such key.
  result<void> remove_replica(const std::string& key, const std::string& client_id);
  /// Removes the key from every holder (the caller tells the holders).
  result<std::vector<replica>> remove_key(const std::string& key);
  /// Healthy replicas of a key; object_not_found if none.
  result<key_info> lookup(const std::string& key) const;
  bool exists(const std::string& key) const;
  /// A healthy client with room for `size` bytes (most free space first),
  /// excluding `exclude`; no_available_handle if none.
  result<replica> write_route(std::uint64_t size, const std::string& exclude = {}) const;

  /// Applies TTLs: marks suspects, drops dead clients and their replicas.
  /// Returns the ids dropped. Called periodically by the service.
  std::vector<std::string> sweep();

  std::vector<client_status> clients() const;
  /// One registered client's info. client_not_found when unknown (or dropped).
  result<client_info> find_client(const std::string& client_id) const;
  /// Keys with a prefix, at most `limit`, in no particular order.
  std::vector<std::pair<std::string, key_info>> keys(const std::string& prefix, std::size_t limit) const;
  std::uint64_t key_count() const;
  std::uint64_t replica_count() const;

 private:
  struct client_entry;
  struct shard;
  shard& shard_for(const std::string& key) const;
  health health_of(const client_entry& c, clock::time_point now) const;
  result<void> check_key(const std::string& key) const;
  void drop_client_replicas(const std::string& client_id);

  metadata_options opts_;
  mutable std::mutex clients_mu_;
  std::unordered_map<std::string, std::shared_ptr<client_entry>> clients_;
  std::vector<std::unique_ptr<shard>> shards_;
};

}  // namespace mc::master
