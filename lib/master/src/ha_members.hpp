#pragma once
// Master HA internals of master_server (not a public header): the gate every
// call passes, and the etcd membership records a leader waits for after its
// election (ha_members.cpp).
#include "mc/master/etcd.hpp"
#include "mc/master/ha.hpp"
#include "mc/master/metadata.hpp"
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/task.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

namespace mc::runtime {
class runtime;
}

namespace mc::master {

/// Whether this master answers (HA: only while it leads), and the rebuild
/// after an election: until every client registered in etcd has re-published
/// to this leader (or its registration lapsed), a lookup miss is "not known
/// yet" (unavailable_in_current_status), never a false object_not_found.
struct ha_gate {
  const leader_elector* elector = nullptr;  ///< null: no HA, always serving
  std::atomic<bool> rebuilding{false};
  /// HA: record the client in etcd (`own`: it records itself; a record the
  /// leader wrote for it earlier goes).
  std::function<void(const std::string&, bool own)> on_register;
  std::function<void(const std::string&)> on_unregister;  ///< HA: forget it
  std::function<void(const std::string&)> on_republished;
  bool serving() const { return elector == nullptr || elector->leading(); }
  std::uint64_t term() const { return elector == nullptr ? 0 : elector->term(); }
};

/// HA: a client that follows etcd records itself under
/// mooncake-store/<cluster>/members/<id>, under its own lease
/// (client_info::own_membership; master_client keeps it); for any other
/// registered client the leader writes mooncake-store/<cluster>/clients/<id>,
/// attached to one "members" lease it renews while it leads (TTL:
/// client_ttl, at least 3 leader leases), which outlives the leader by that
/// TTL. The next leader reads both as the set of clients that must
/// re-publish before a lookup miss may say object_not_found; a record that
/// lapses (its client died) ends the wait for that client, and none is
/// waited for longer than that TTL (a client alive in etcd but cut off from
/// the masters).
struct ha_members {
  ha_members(mc::runtime::runtime& r, etcd_client e, std::string p, std::string own, std::int64_t ttl, metadata& m,
             ha_gate& g)
      : rt(r), etcd(std::move(e)), prefix(std::move(p)), own_prefix(std::move(own)), ttl_s(ttl), md(m), gate(g) {}
  mc::runtime::runtime& rt;
  etcd_client etcd;
  std::string prefix;
  std::string own_prefix;  ///< the clients' own records
  std::int64_t ttl_s;
  metadata& md;
  ha_gate& gate;
  std::atomic<std::int64_t> lease{0};
  std::atomic<std::uint64_t> term{0};  ///< the term the lease belongs to (0: not leading)
  std::atomic<bool> stopping{false};
  std::mutex m;
  std::set<std::string> republished;  ///< guarded by m: ids re-published to this term's leader
};

/// Records `id` under the leader's members lease (once granted) while `term` leads.
task<void> record_member(std::shared_ptr<ha_members> h, std::string id, std::uint64_t term);
/// An unregistered or dropped client: the record the leader wrote for it goes.
task<void> forget_member(std::shared_ptr<ha_members> h, std::string id);
/// The record the leader wrote for a client that now records itself.
task<void> forget_leader_record(std::shared_ptr<ha_members> h, std::string id);
/// One term's membership lease and rebuild: runs while `term` leads.
task<void> lead_term(std::shared_ptr<ha_members> h, std::uint64_t term, mc::duration poll);

}  // namespace mc::master
