#pragma once
// The etcd side of master_client (not a public header): how an etcd://
// client finds the leader and keeps its own membership record. Shared by
// master_client.cpp (the calls) and master_client_etcd.cpp (the locator's
// coroutines).
#include "mc/master/etcd.hpp"
#include "mc/master/ha.hpp"
#include "mc/master/master_client.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace mc::master {

struct master_client::locator {
  locator(std::vector<std::string> eps, mc::duration timeout, std::string cluster, std::chrono::seconds ttl,
          etcd_security security)
      : etcd(std::move(eps), timeout, std::move(security)),
        key(ha_leader_key(cluster)),
        members(ha_members_prefix(cluster)),
        membership_ttl(std::max<std::chrono::seconds>(ttl, std::chrono::seconds(1))) {}
  etcd_client etcd;
  std::string key;
  std::string members;  ///< ha_members_prefix
  const std::chrono::seconds membership_ttl;
  std::mutex m;
  std::string leader;          ///< guarded by m; "" = not resolved
  std::uint64_t max_term = 0;  ///< guarded by m: the newest leader term seen in a reply
  // This client's own membership record (keep_membership):
  std::atomic<bool> busy{false};                  ///< a round is running
  std::atomic<bool> recorded{false};              ///< the record is in place
  std::int64_t lease = 0;                         ///< guarded by m; 0 = none
  std::chrono::steady_clock::time_point renewed;  ///< guarded by m
  std::uint64_t left = 0;                         ///< guarded by m: unregistrations (a round then puts nothing)
  bool wanted = false;                            ///< guarded by m: registered, the record should exist
  std::atomic<std::uint64_t> watch_failures{0};   ///< follow_leader's failed watches and reads
};

}  // namespace mc::master
