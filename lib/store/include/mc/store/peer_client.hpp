#pragma once
/// PeerClient: asynchronous RPC calls to another client's ClientRpcService.
/// KJ-free. Each call runs on the calling runtime thread, uses that thread's
/// bounded connection cache, and carries a deadline (the spec's 10 s unless
/// configured). Errors: the remote operation's code (OBJECT_NOT_FOUND,
/// INVALID_PARAMS, TRANSFER_FAIL, ACCESS_DENIED, ...), or TIMEOUT / RPC_FAIL
/// when the peer cannot answer in time.
///
/// The peer is untrusted: every code it sends is mapped through
/// mc::errc_from_value (an unknown code becomes RPC_FAIL), a successful read
/// must report exactly the length the caller asked for (else RPC_FAIL: a
/// larger size never travels upward), and a batch reply must carry exactly
/// one result per item (else RPC_FAIL for the whole call).
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"
#include "mc/transfer/types.hpp"

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mc::transfer {
class engine;
}

namespace mc::store {

/// One item of a batch: the key and the requester's buffer descriptor.
struct peer_item {
  std::string key;
  mc::transfer::remote_buffer buffer;
};

/// Result of a remote read: the value's size on success (always equal to the
/// descriptors' total length, or for an inline answer at most inline_max and
/// the room in `local`). On INVALID_PARAMS because of a size mismatch (or a
/// value too large for an inline-only read), `size_hint` carries the size the
/// peer claims (untrusted: informational only).
struct peer_read_result {
  result<std::uint64_t> value = std::uint64_t{0};
  std::uint64_t size_hint = 0;
  bool inlined = false;  ///< the value came inside the reply (copied into `local`)
};

/// One read of read_batch().
struct peer_read {
  std::string key;
  /// Where the owner transfers the value (registered memory, in order; the
  /// total must be the value's size). Empty: inline only.
  std::vector<mc::transfer::remote_buffer> dest;
  /// > 0: the owner may answer with the value inside the reply when it is at
  /// most this big; it is then copied into `local` (in order), which must hold
  /// at least inline_max bytes.
  std::uint64_t inline_max = 0;
  std::vector<std::span<std::byte>> local;
};

/// One write of write_batch(): the value either in registered memory the
/// owner READs (`src`, in order) or inside the request (`data`, in order).
struct peer_write {
  std::string key;
  std::vector<mc::transfer::remote_buffer> src;
  std::vector<std::span<const std::byte>> data;
  std::uint64_t replication = 0;  ///< mc::master::replication::tag() of the copy (0 = a single copy)
  /// The put's version (the requester's tiered_backend::issue_version() when
  /// the put started; 0 = the owner issues one at its commit). An owner that
  /// holds a newer value of the key, or a master that routes a newer one
  /// elsewhere, answers SUPERSEDED.
  std::uint64_t version = 0;
};

class peer_client {
 public:
  explicit peer_client(mc::duration timeout = std::chrono::seconds(10)) : timeout_(timeout) {}
  mc::duration timeout() const noexcept { return timeout_; }
  /// The id this requester is registered under at the master; sent with every
  /// read/write item so that the owner transfers only to the transfer endpoint
  /// the master has for it. "" (the default) = unregistered (the CLI): the
  /// owner then uses this connection's own IP. Set before the first call.
  void set_requester_id(std::string id) { requester_id_ = std::move(id); }
  const std::string& requester_id() const noexcept { return requester_id_; }

  /// ReadRemoteData: the peer at `rpc_endpoint` WRITEs `key`'s value into `dest`.
  task<peer_read_result> read_remote(std::string rpc_endpoint, std::string key, mc::transfer::remote_buffer dest);
  /// WriteRemoteData: the peer READs `src` and stores it under `key`.
  task<result<void>> write_remote(std::string rpc_endpoint, std::string key, mc::transfer::remote_buffer src);
  /// Batch forms: one RPC, one result per item (or one error for the whole call).
  task<result<std::vector<peer_read_result>>> batch_read_remote(std::string rpc_endpoint, std::vector<peer_item> items);
  task<result<std::vector<result<void>>>> batch_write_remote(std::string rpc_endpoint, std::vector<peer_item> items);
  /// The general batch read: one RPC for every item, one result per item (or
  /// one error for the whole call: too many items, connection, timeout, a
  /// reply of the wrong shape). Inline answers are checked (size equal to the
  /// data, within inline_max and `local`) and copied once into `local`; a
  /// transferred value's size must equal its descriptors' total. Anything
  /// else is RPC_FAIL for that item, and nothing is written past the value.
  task<result<std::vector<peer_read_result>>> read_batch(std::string rpc_endpoint, std::vector<peer_read> items);
  /// read_batch of inline-only items (every dest empty) as one TransferEngine
  /// call to the owner's engine at `transfer_endpoint` (engine::call: one TCP
  /// round trip, no Cap'n Proto); the same results and checks. Errors for the
  /// whole call: unsupported (items not inline-only, more than 256, requests
  /// or replies above the call bounds; or the owner serves no such calls:
  /// read_batch then), the call's errors (timeout, transfer_fail, ...),
  /// rpc_fail (a reply of the wrong shape).
  task<result<std::vector<peer_read_result>>> read_batch_call(mc::transfer::engine& engine,
                                                              std::string transfer_endpoint,
                                                              const std::vector<peer_read>& items);
  /// Whether read_batch_call can carry `items` (inline-only, within the
  /// call's bounds); when it is false read_batch_call answers unsupported
  /// without a round trip.
  static bool call_eligible(const std::vector<peer_read>& items);
  /// The general batch write, one result per item (or one error for the call).
  task<result<std::vector<result<void>>>> write_batch(std::string rpc_endpoint, std::vector<peer_write> items);
  /// write_batch of inline items (every `src` empty) as TransferEngine calls
  /// to the owner's engine at `transfer_endpoint` (engine::call, no Cap'n
  /// Proto): consecutive items in calls of at most 256 values and 2 MiB,
  /// sent concurrently; one result per item. Errors for the whole batch:
  /// unsupported (items not eligible, see write_call_eligible; or the owner
  /// serves no such calls: write_batch then), any call's error (timeout,
  /// transfer_fail, ...), rpc_fail (a reply of the wrong shape). A batch that
  /// failed whole may have been stored in part: sending it again (e.g. with
  /// write_batch) is safe, as every item carries its put's version.
  task<result<std::vector<result<void>>>> write_batch_call(mc::transfer::engine& engine, std::string transfer_endpoint,
                                                           const std::vector<peer_write>& items);
  /// Whether write_batch_call can carry `items`: 1..max_batch_items items,
  /// each inline (`src` empty) with a value of 1 B..1 MiB that fits one call
  /// with its key, and a non-zero version. Without a round trip.
  static bool write_call_eligible(const std::vector<peer_write>& items);
  /// Size of `key` held by the peer.
  task<result<std::uint64_t>> query(std::string rpc_endpoint, std::string key);
  /// Removes `key` held by the peer.
  task<result<void>> remove(std::string rpc_endpoint, std::string key);

 private:
  mc::duration timeout_;
  std::string requester_id_;
};

/// The result a code received from a peer stands for: 0 = success, a known
/// mc::errc value = that error, anything else = RPC_FAIL.
result<void> from_wire_code(std::int32_t code) noexcept;

}  // namespace mc::store
