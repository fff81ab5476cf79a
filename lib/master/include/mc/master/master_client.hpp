#pragma once
/// Typed coroutine client of the master (service "master"). KJ-free. Calls run
/// on the calling runtime thread and use its RPC connection cache; each call
/// has the given deadline. Errors: the master's mc::errc, or rpc_fail /
/// timeout when the master cannot be reached.
///
/// The address is either the master's "host:port", or Mooncake's HA locator
/// "etcd://h1:2379,h2:2379,...": then every call goes to the master that
/// holds the cluster's leader key in etcd (mc/master/ha.hpp), read once and
/// cached; a call that fails to reach it (rpc_fail, timeout) or that it
/// refuses as not the leader (unavailable_in_current_status) forgets the
/// cached leader, so the next call reads etcd again. No leader in etcd:
/// unavailable_in_current_status. With an etcd address, lookup,
/// add_replicas (publish), write_route, remove_key and get_client are
/// retried within the call's deadline while the masters fail over (rpc_fail,
/// timeout, unavailable_in_current_status; for a publish also
/// client_not_found until this client re-registered); the other calls are
/// the caller's (the store client's heartbeat loop) to retry.
///
/// Thread-safety: a master_client may be used from several runtime threads
/// at once (copies share the cached leader).
#include "mc/master/etcd.hpp"
#include "mc/master/metadata.hpp"
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/task.hpp"

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mc::master {

/// Most drop notices the master sends in one heartbeat reply.
inline constexpr std::size_t max_drops_per_heartbeat = 1024;
/// Most repair tasks the master sends in one heartbeat reply.
inline constexpr std::size_t max_repairs_per_heartbeat = 64;
/// Most ids a writeRoutes request may exclude.
inline constexpr std::size_t max_route_excludes = 64;
/// HA: the default TTL of the lease a client's own membership record lives
/// under (renewed every third of it, from its heartbeats): how long a new
/// leader may wait for a client that died. Configurable per client
/// (master_client's `membership_ttl`, the node option ha_membership_ttl).
inline constexpr std::chrono::seconds membership_lease_ttl{6};

class master_client {
 public:
  /// `address` is "host:port" of the master's RPC server, or
  /// "etcd://host:port[,host:port...]" (the leader of `cluster_id`). An
  /// address that is neither is accepted here and fails each call with
  /// invalid_params (validate with is_master_address first).
  /// `membership_ttl` (etcd addresses): the lease of this client's own
  /// membership record, in whole seconds (at least 1; renew it — heartbeat —
  /// at least every third of it). `etcd`: TLS and credentials towards etcd
  /// (etcd_security::load; settings that do not load leave no endpoint:
  /// every call fails invalid_params — validate them first).
  explicit master_client(std::string address, mc::duration timeout = std::chrono::seconds(10),
                         std::string cluster_id = "mooncake_cluster",
                         std::chrono::seconds membership_ttl = membership_lease_ttl,
                         const etcd_security_options& etcd = {});

  /// The address as given (the locator, for an etcd address).
  const std::string& address() const noexcept { return address_; }
  /// The master calls go to now: the address, or the cached leader ("" when
  /// not resolved yet).
  std::string current_master() const;
  /// True for "etcd://..." addresses.
  bool uses_etcd() const noexcept { return locator_ != nullptr; }
  /// etcd addresses: follows the leader key with etcd watches until the
  /// awaiting coroutine is cancelled (then it returns; it never throws a
  /// cancellation). Each change updates current_master() at once (a deleted
  /// key clears it: calls read etcd again); `on_new_leader()` runs on this
  /// coroutine's thread when a leader is seen whose term (the key's
  /// create_revision) is newer than any reply so far — register with it now
  /// instead of after a heartbeat to the old one fails. A failed watch (etcd
  /// member down, revision compacted) is followed by a read of the key
  /// after a short pause, then a new watch; each watch is renewed every
  /// `window`. Without etcd: returns at once.
  task<void> follow_leader(std::function<void()> on_new_leader, mc::duration window = std::chrono::seconds(10));
  /// Watches of the leader key by follow_leader that failed so far.
  std::uint64_t leader_watch_failures() const noexcept;

  /// Registers (or re-registers) the client. With an etcd address, a reply
  /// from a leader older than one already seen is ignored:
  /// unavailable_in_current_status. With an etcd address the client also
  /// records its membership itself first, under its own lease of
  /// its membership TTL (ha_members_prefix; `own_membership` is then set
  /// on the registration); when etcd cannot be written the leader records
  /// it instead. The record lives while heartbeats renew it and goes with
  /// unregister_client (or when the lease lapses).
  task<result<void>> register_client(client_info info);
  /// The endpoint of the current master's publish calls
  /// (mc/master/publish_call.hpp): the host this client dials for it with
  /// the port its last successful registration with that master told; ""
  /// when that master offers none, or this client has not registered with
  /// the master calls go to now (a new leader: until it re-registers).
  /// Thread-safe.
  std::string publish_call_endpoint() const;
  /// Heartbeat (the same rule for an older leader's reply); returns the
  /// holder's queued drop notices (at most max_drops_per_heartbeat), repair
  /// tasks (at most max_repairs_per_heartbeat; longer lists are rpc_fail)
  /// and resync flag. `ack`: the notice_epoch/notice_id of the last reply
  /// whose drops and resync the caller applied (the master sends them again
  /// until acknowledged; see metadata::take_notices).
  task<result<holder_notices>> heartbeat(std::string client_id, std::uint64_t used, std::uint64_t capacity,
                                         notice_ack ack = {});
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
  /// One result per key. With an etcd address, retried within the deadline
  /// while no leader answers or the new leader rebuilds its table (a key
  /// then reports unavailable_in_current_status, never a false
  /// object_not_found).
  task<result<std::vector<result<key_info>>>> lookup(std::vector<std::string> keys);
  task<result<key_info>> lookup(std::string key);
  task<result<replica>> write_route(std::uint64_t size, std::string exclude);
  /// (An overload, not a default argument: gcc 12 destroys a coroutine's
  /// class-type default argument twice.)
  task<result<replica>> write_route(std::uint64_t size) { return write_route(size, std::string{}); }
  /// Up to `count` (1..replication::max_copies) distinct nodes with room
  /// for `size` bytes, none of them named in `exclude` (at most
  /// max_route_excludes): see metadata::write_routes. Errors:
  /// invalid_params, no_available_handle, rpc_fail (an empty or oversized
  /// reply), timeout.
  task<result<std::vector<replica>>> write_routes(std::uint64_t size, std::uint32_t count,
                                                  std::vector<std::string> exclude);
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
  struct locator;
  /// HA: puts `id`'s membership record under its own lease (granted when it
  /// has none or it lapsed) when `put`, else renews the lease when a third
  /// of its TTL has passed. Returns whether the record is known to be in
  /// place. One round at a time per locator (a round already running: its
  /// state is returned). Never fails: etcd errors leave it for the next
  /// round. Static: a renewal runs detached and keeps the locator alive.
  static task<bool> keep_membership(std::shared_ptr<locator> l, std::string id, bool put);
  task<result<std::string>> resolve();
  task<result<std::vector<result<key_info>>>> lookup_once(const std::vector<std::string>& keys);
  task<result<std::vector<result<void>>>> add_replicas_once(std::string client_id, std::vector<publish_item> items,
                                                            publish_kind kind, std::uint64_t epoch);
  task<result<replica>> write_route_once(std::uint64_t size, std::string exclude);
  task<result<std::vector<replica>>> write_routes_once(std::uint64_t size, std::uint32_t count,
                                                       const std::vector<std::string>& exclude);
  task<result<std::vector<replica>>> remove_key_once(std::string key);
  task<result<client_info>> get_client_once(std::string client_id);
  boost::system::error_code note(boost::system::error_code e);
  /// True (and the cached leader forgotten) when `term` is older than the
  /// newest seen: the reply of a deposed leader, ignored.
  bool stale_term(std::uint64_t term);

  std::string address_;
  mc::duration timeout_;
  std::shared_ptr<locator> locator_;
  /// What the last registration told about publish calls, and to which
  /// master address it was sent (shared: the client stays movable).
  struct publish_route {
    mutable std::mutex m;
    std::string master, endpoint;
  };
  std::shared_ptr<publish_route> publish_route_ = std::make_shared<publish_route>();
};

/// A master address a client accepts: "host:port" or "etcd://" followed by
/// 1..16 comma-separated "host:port". Errors: invalid_params, reason in *why.
result<void> check_master_address(std::string_view address, std::string* why = nullptr);

}  // namespace mc::master
