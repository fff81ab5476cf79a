#pragma once
/// The attacher side of standalone mode (Mooncake's `setup_dummy`): a
/// process that runs no node attaches to a mooncake_client node already
/// running on this host and uses the store through it (protocol, trust and
/// bounds: mc/store/attach.hpp).
///
///   mc::runtime::runtime rt(2); rt.start();
///   auto c = mc::store::attached_client::connect(rt, "127.0.0.1:12345", {}, &why);  // non-runtime thread
///   rt.block_on([&]() -> mc::task<void> {
///     co_await (*c)->put_parts("k", {bytes});
///     auto n = co_await (*c)->get_parts("k", {buffer});
///   }());
///   (*c)->stop(); mc::rpc::shutdown(rt); rt.stop();
///
/// The attacher runs its own TransferEngine on 127.0.0.1 (ephemeral port);
/// the node pushes (get) into / pulls (put) from the caller's memory, which
/// is registered per call (or derived from a register_buffer() registration)
/// and revoked when the call returns, so nothing arrives after a call ended.
///
/// Threads: every coroutine may be awaited on any thread of `rt`, from many
/// coroutines at once. Cancelling the awaiting coroutine cancels the call in
/// flight (the node stops; the caller's buffers are revoked). Results and
/// error codes are those of the same-named mc::store::client calls (see
/// "Batch semantics" in mc/store/client.hpp); in addition rpc_fail / timeout
/// / access_denied / shutting_down when the node cannot be reached, refuses
/// the attacher or stops.
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"
#include "mc/transfer/engine.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace mc::runtime {
class runtime;
}

namespace mc::store {

struct attach_options {
  /// Deadline of every call to the node (and of the transfers it runs).
  std::chrono::milliseconds rpc_timeout = std::chrono::seconds(10);
  /// Mooncake's local_buffer_size: bytes of a buffer allocated and registered
  /// at connect (local_buffer()); pieces inside it are exposed per call by a
  /// registration derived from it. 0 = none.
  std::uint64_t local_buffer_bytes = 0;
  /// Most keys one batch call accepts (more, or keys and values of different
  /// counts: invalid_params for every key). Calls are split into RPCs of at
  /// most the node's max_keys_per_call keys.
  std::uint64_t max_batch_keys = 65536;
  /// The node's attach port; 0 = derived_attach_port(port of server_address).
  std::uint16_t attach_port = 0;
};

class attached_client {
 public:
  /// Attaches to the node whose client RPC endpoint is `server_address`
  /// ("host:client_rpc_port"; the host must name this host: loopback,
  /// "localhost", or an address of one of its interfaces). Starts the
  /// attacher's TransferEngine and says hello (one round trip) to the node's
  /// attach listener at 127.0.0.1:derived_attach_port(port). Call from a
  /// non-runtime thread; `rt` must be running. Errors: invalid_params (bad
  /// address, host not this host), rpc_fail (no node there, engine start
  /// failed), access_denied (refused by the node), unsupported (protocol
  /// version), timeout. `why` (if given) names the cause.
  static result<std::unique_ptr<attached_client>> connect(mc::runtime::runtime& rt, std::string server_address,
                                                          attach_options opts, std::string* why = nullptr);
  /// Calls stop().
  ~attached_client();
  attached_client(const attached_client&) = delete;
  attached_client& operator=(const attached_client&) = delete;

  /// Refuses new calls (shutting_down) and stops the TransferEngine (calls
  /// in flight fail). Blocking; call from a non-runtime thread; afterwards
  /// call mc::rpc::shutdown(rt) before rt.stop(). Idempotent.
  void stop();

  /// Stores the concatenation of `pieces` under `key` on the node (its tiers;
  /// published to the master before this returns). Errors as
  /// client::put_parts: invalid_key, invalid_params (no piece, more than
  /// max_value_pieces, empty total), no_available_handle, too_large, and the
  /// node's / transfer's errors.
  task<result<void>> put_parts(std::string key, std::vector<std::span<const std::byte>> pieces);
  /// Reads `key` (held by the node, or by another node through it) into
  /// `pieces` in order. Returns the value's size. Errors as
  /// client::get_parts: object_not_found, buffer_overflow (the pieces hold
  /// less than the value; nothing written), invalid_params (more than
  /// max_value_pieces); too_large when the value lives on another node and
  /// exceeds the node's staging bound (attach_server_options).
  task<result<std::size_t>> get_parts(std::string key, std::vector<std::span<std::byte>> pieces);
  /// One result per key, in order; one RPC per at most the node's
  /// max_keys_per_call keys (and max_attach_pieces_per_call pieces).
  task<std::vector<result<void>>> batch_put_parts(std::vector<std::string> keys,
                                                  std::vector<std::vector<std::span<const std::byte>>> values);
  task<std::vector<result<std::size_t>>> batch_get_parts(std::vector<std::string> keys,
                                                         std::vector<std::vector<std::span<std::byte>>> pieces);
  /// Per key: whether any node holds it, or the lookup's error.
  task<std::vector<result<bool>>> batch_exists(std::vector<std::string> keys);
  /// Removes `key` everywhere (client::remove). object_not_found if nowhere.
  task<result<void>> remove(std::string key);
  /// The value's size (client::query). object_not_found if absent.
  task<result<std::uint64_t>> size_of(std::string key);

  /// Registers a buffer with the attacher's TransferEngine (RAII; read and
  /// write access for the node): Mooncake's register_buffer, for parity.
  /// Calls still expose their pieces with fresh per-call tokens (revoked
  /// when the call returns); on the attacher's transports (TCP, same-host)
  /// that costs no system call, so this is not needed for speed. Thread-safe.
  /// Errors: invalid_params (empty), shutting_down.
  result<mc::transfer::region> register_buffer(std::span<std::byte> buf);
  /// The buffer of attach_options::local_buffer_bytes (empty when 0);
  /// registered for the lifetime of this object. The caller shares it
  /// between its calls as it sees fit.
  std::span<std::byte> local_buffer() const noexcept;

  /// The node's client id (from the handshake).
  const std::string& node_id() const noexcept;
  /// "127.0.0.1:<attach port>".
  const std::string& attach_endpoint() const noexcept;
  /// The attacher's own TransferEngine endpoint ("127.0.0.1:<port>").
  std::string transfer_endpoint() const;
  mc::transfer::engine& engine() noexcept;

  struct impl;

 private:
  explicit attached_client(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace mc::store
