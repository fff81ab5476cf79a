#pragma once
/// Master high availability on etcd: leader election under a lease, with
/// fencing by time. Masters campaign for the key
/// `mooncake-store/<cluster_id>/master_view` (value: the leader's RPC
/// address "host:port"), created only if absent, under a lease of
/// `lease_ttl`; the winner renews the lease every third of it; the others
/// watch the key (etcd's watch, from the revision of its last write) and
/// campaign again the moment it is deleted (its holder's lease lapsed or it
/// resigned). A watch that fails (its etcd member died, the revision was
/// compacted) falls back to reading the key after `poll`, then watches
/// again; a watch is renewed every `watch_window` (so a frozen etcd member
/// holds a standby's view back at most that long).
///
/// Fencing: the leader serves only while `leading()`, which is true until
/// the moment its lease could have expired *as measured from when it sent
/// its last successful renewal* (etcd counts from when it received it, which
/// is later), minus a safety margin. A successor can only be elected after
/// etcd has expired the lease, so two masters never both answer as leader —
/// also when the leader was frozen (SIGSTOP) and wakes after losing the
/// lease: its first check sees its deadline passed. The leader's term is
/// the etcd revision at which it created the key (strictly increasing from
/// one leader to the next).
///
/// Thread-safety: leading(), term() and leader() may be called from any
/// thread; start() and stop() from a non-runtime thread.
#include "mc/master/etcd.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace mc::runtime {
class runtime;
}

namespace mc::master {

/// The leader key of a cluster (Mooncake's layout).
std::string ha_leader_key(const std::string& cluster_id);
/// The prefix under which the leader records registered clients that do not
/// record themselves (a new leader waits for these to re-publish before it
/// answers "not found"), all under one lease the leader renews.
std::string ha_clients_prefix(const std::string& cluster_id);
/// The prefix under which clients that follow etcd record themselves, each
/// under its own lease (client_info::own_membership): a record lives as long
/// as its client, whatever happens to the masters.
std::string ha_members_prefix(const std::string& cluster_id);
/// A cluster id is 1..128 characters of [A-Za-z0-9._-]. Errors: invalid_params.
result<void> check_cluster_id(const std::string& id);

struct ha_options {
  std::vector<std::string> etcd_endpoints;  ///< "host:port" each
  std::string cluster_id = "mooncake";
  std::string advertise;  ///< this master's RPC address as clients dial it
  /// The leader lease (etcd counts whole seconds: rounded up, at least 1 s).
  std::chrono::milliseconds lease_ttl = std::chrono::seconds(2);
  /// Deadline of one etcd request (across its endpoints).
  std::chrono::milliseconds etcd_timeout = std::chrono::milliseconds(1000);
  /// Pause before a standby reads the leader key again after an etcd
  /// error (a failed watch or read), and the period of the leader's
  /// membership-rebuild checks.
  std::chrono::milliseconds poll = std::chrono::milliseconds(250);
  /// Longest one watch of the leader key stays open before it is renewed.
  std::chrono::milliseconds watch_window = std::chrono::seconds(5);
  /// TLS and credentials towards etcd (etcd_security::load).
  etcd_security security = {};
};

class leader_elector {
 public:
  /// `on_elected(term)` / `on_lost()` run on a runtime thread, in order,
  /// never concurrently with each other.
  leader_elector(mc::runtime::runtime& rt, ha_options o, std::function<void(std::uint64_t)> on_elected,
                 std::function<void()> on_lost);
  ~leader_elector();
  leader_elector(const leader_elector&) = delete;
  leader_elector& operator=(const leader_elector&) = delete;

  /// Starts campaigning (on runtime thread 0). Call once.
  void start();
  /// Stops campaigning; a leader resigns (deletes its key, revokes its
  /// lease) so a standby takes over without waiting for the lease. Blocks
  /// until done (at most ~2 etcd timeouts). Idempotent.
  void stop();

  /// True while this master is the leader and its lease is surely valid.
  bool leading() const noexcept;
  /// The current term (0 when not leading).
  std::uint64_t term() const noexcept;
  /// The leader's address as last seen (ours when leading; empty if unknown).
  std::string leader() const;
  /// Elections won by this process so far.
  std::uint64_t elections() const noexcept;
  /// Watches of the leader key that failed (each followed by a read).
  std::uint64_t watch_failures() const noexcept;

  struct state;

 private:
  std::shared_ptr<state> s_;
};

}  // namespace mc::master
