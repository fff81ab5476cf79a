#pragma once
/// Typed coroutine client of the master (service "master"). KJ-free. Calls run
/// on the calling runtime thread and use its RPC connection cache; each call
/// has the given deadline. Errors: the master's mc::errc, or rpc_fail /
/// timeout when the master cannot be reached.
#include "mc/master/metadata.hpp"
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/task.hpp"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mc::master {

/// Most drop notices the master sends in one heartbeat reply.
inline constexpr std::size_t max_drops_per_heartbeat = 1024;

class master_client {
 public:
  /// `address` is "host:port" of the master's RPC server.
  explicit master_client(std::string address, mc::duration timeout = std::chrono::seconds(10))
      : address_(std::move(address)), timeout_(timeout) {}

  const std::string& address() const noexcept { return address_; }

  task<result<void>> register_client(client_info info);
  /// Heartbeat; returns the holder's queued drop notices (at most
  /// max_drops_per_heartbeat; a longer list is rpc_fail) and resync flag.
  task<result<holder_notices>> heartbeat(std::string client_id, std::uint64_t used, std::uint64_t capacity);
  task<result<void>> unregister_client(std::string client_id);
  /// Publishes; one result per item, in order (see metadata::add_replica:
  /// invalid_version = refused as stale or superseded).
  task<result<std::vector<result<void>>>> add_replicas(std::string client_id, std::vector<publish_item> items,
                                                       publish_kind kind, std::uint64_t epoch);
  task<result<std::vector<result<void>>>> add_replicas(std::string client_id, std::vector<publish_item> items) {
    return add_replicas(std::move(client_id), std::move(items), publish_kind::put, 0);
  }
  /// Removes (key, caller) entries not newer than each version; one result per item.
  task<result<std::vector<result<void>>>> remove_replicas(std::string client_id, std::vector<key_version> items);
  /// Ends a full re-publish (metadata::finish_republish); returns entries removed.
  task<result<std::uint64_t>> finish_republish(std::string client_id, std::uint64_t epoch);
  task<result<std::vector<result<key_info>>>> lookup(std::vector<std::string> keys);
  task<result<key_info>> lookup(std::string key);
  task<result<replica>> write_route(std::uint64_t size, std::string exclude);
  /// (An overload, not a default argument: gcc 12 destroys a coroutine's
  /// class-type default argument twice.)
  task<result<replica>> write_route(std::uint64_t size) { return write_route(size, std::string{}); }
  task<result<std::vector<replica>>> remove_key(std::string key);
  /// One page of metadata::remove_matching from `from_shard`: the removed
  /// keys with their holders, and where to continue (nullopt: done). A reply
  /// that makes no progress (a next shard before `from_shard`, or the same
  /// one with nothing removed) or carries more keys than asked is rpc_fail.
  /// Errors: invalid_params, out_of_range, rpc_fail, timeout.
  struct removal_page {
    std::vector<metadata::removed_key> removed;
    std::optional<std::uint32_t> next_shard;
  };
  task<result<removal_page>> remove_matching(std::string pattern, bool all, std::uint32_t limit,
                                             std::uint32_t from_shard);
  task<result<std::vector<client_status>>> clients();
  /// One client's registration. Errors: client_not_found, rpc_fail, timeout.
  task<result<client_info>> get_client(std::string client_id);

 private:
  std::string address_;
  mc::duration timeout_;
};

}  // namespace mc::master
