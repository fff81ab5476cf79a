#pragma once
// The internal transport interface. A transport moves a set of items that all
// target one peer, on the calling runtime thread. Designed so that a verbs
// transport fits: registration hooks (ibv_reg_mr; the token is the rkey),
// several connections (QPs) per peer inside execute(), completion as events.
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"
#include "mc/transfer/types.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace mc::transfer::detail {

struct region_entry;
struct thread_state;

/// One request after validation, as a transport sees it.
struct transfer_item {
  op_kind op = op_kind::read;
  std::byte* local = nullptr;
  std::uint64_t length = 0;
  std::uint64_t address = 0;
  std::uint64_t token = 0;
  std::uint64_t instance = 0;                        ///< remote_buffer::instance (0 = not checked)
  std::chrono::steady_clock::time_point deadline{};  ///< the batch's deadline
  /// Final result, valid once `done`. Until then `cancelled` (the engine
  /// turns it into timeout / shutting_down).
  boost::system::error_code ec = make_error_code(errc::cancelled);
  bool done = false;
  transport_kind via = transport_kind::tcp;  // for the counters
  /// A chunk of a spread batch: more windows to this peer follow on this
  /// thread, so the same-host transport may carry this item's release in
  /// front of its next request on the connection; the claimer ends with
  /// transport::flush_deferred.
  bool more_follow = false;

  void finish(boost::system::error_code e) noexcept {
    if (done) return;
    ec = e;
    done = true;
  }
};

class transport {
 public:
  virtual ~transport() = default;
  virtual transport_kind kind() const noexcept = 0;
  /// Moves every item (same peer) on the calling runtime thread, whose state
  /// is `ts`. Sets each item's result with finish(); items left unfinished
  /// when cancelled (deadline) stay `cancelled`. A transport that cannot
  /// reach the peer at all finishes items with errc::unsupported so the
  /// engine may fall back to another transport. Never throws for I/O errors.
  virtual task<void> execute(thread_state& ts, const std::string& endpoint, std::span<transfer_item*> items) = 0;
  /// Sends what execute() left for later on this thread's idle connections
  /// to `endpoint` (the same-host transport: releases of `more_follow`
  /// items). Never fails: a connection whose send fails is closed, which
  /// ends its grants at the peer.
  virtual task<void> flush_deferred(thread_state&, const std::string& /*endpoint*/) { co_return; }
  /// Registration hooks (verbs: register / deregister the MR). No-ops here.
  virtual mc::result<void> on_register(region_entry&) { return {}; }
  virtual void on_unregister(region_entry&) noexcept {}
};

}  // namespace mc::transfer::detail
