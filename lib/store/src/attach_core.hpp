#pragma once
// The node side of the attach service without the wire: what one attacher's
// request makes the node do with its client, its DataManager and its
// TransferEngine, under the service-wide bounds. Shared by every connection
// of an attach_server (thread-safe). See mc/store/attach.hpp.
#include "mc/runtime/async_semaphore.hpp"
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"
#include "mc/store/attach.hpp"
#include "mc/store/data_manager.hpp"

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mc::store {
class client;
}

namespace mc::store::detail {

/// One request item after the wire checks: `pieces` name the attacher's
/// memory (endpoint fixed by the service, never by the attacher), `room`
/// their total; `bad` set = the item fails with it without running.
struct attach_item {
  std::string key;
  remote_pieces pieces;
  std::uint64_t room = 0;
  result<void> bad;
};

/// The uid owning the TCP socket at peer_ip:peer_port connected to
/// local_ip:local_port (the peer of one of our loopback connections), as the
/// kernel reports it (NETLINK_SOCK_DIAG); nullopt when it cannot tell. One
/// netlink round trip answered synchronously by the kernel (attach_peer.cpp).
std::optional<std::uint32_t> loopback_peer_uid(const std::string& peer_ip, std::uint16_t peer_port,
                                               const std::string& local_ip, std::uint16_t local_port);

/// The first `size` bytes of `pieces` (the caller checked size <= their total).
remote_pieces prefix_of(const remote_pieces& pieces, std::uint64_t size);

class attach_core {
 public:
  attach_core(client& node, attach_server_options opts);

  const attach_server_options& options() const noexcept { return opts_; }
  const std::string& node_id() const noexcept;

  /// Units for `keys` keys being served (waits within the deadline).
  /// Errors: timeout, cancelled.
  task<result<semaphore_units>> admit_keys(std::uint64_t keys, time_point deadline);

  /// Gets: a key this node holds goes from its tier straight to the
  /// attacher (one read_remote_batch: one transfer batch); the others are
  /// read by the node's client into staging memory, then written to the
  /// attacher in one transfer batch. Per item: the value's size or its error.
  task<std::vector<result<std::uint64_t>>> get(std::vector<attach_item> items, time_point deadline);
  /// Puts: each value is pulled from the attacher straight into the node's
  /// tiers, committed and published (DataManager::write_remote_parts).
  task<std::vector<result<void>>> put(std::vector<attach_item> items, time_point deadline);
  task<std::vector<result<bool>>> exists(std::vector<std::string> keys);
  task<result<void>> remove(std::string key);
  task<result<std::uint64_t>> size_of(std::string key);

  attach_server_stats stats() const;

  // Counters the service bumps.
  std::atomic<std::uint64_t> connections{0}, refused{0}, calls{0}, calls_in_flight{0};
  /// The listener's port (set once it listens; connections come after).
  std::atomic<std::uint16_t> port{0};

 private:
  task<void> get_staged(std::vector<attach_item>& items, std::vector<std::size_t> which,
                        std::vector<result<std::uint64_t>>& out, time_point deadline);
  task<void> stage_group(std::vector<attach_item>& items, std::vector<std::size_t> group,
                         std::vector<std::uint64_t> stage, std::vector<result<std::uint64_t>>& out,
                         time_point deadline);

  client& node_;
  attach_server_options opts_;
  async_semaphore keys_;
  async_semaphore bytes_;
  async_semaphore staging_;
  std::atomic<std::uint64_t> put_keys_{0}, get_keys_{0}, staged_gets_{0};
};

}  // namespace mc::store::detail
