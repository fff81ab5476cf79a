#pragma once
// Per-thread bounded cache of client connections (LRU + idle close +
// reconnect after failure). Lives in the thread_context; KJ objects inside.
#include "mc/rpc/client.hpp"
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"
#include "mc/runtime/waiter_queue.hpp"
#include "message_stream.hpp"

#include <boost/asio/steady_timer.hpp>
#include <capnp/capability.h>
#include <capnp/rpc-twoparty.h>

#include <list>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

namespace mc::rpc::detail {

class thread_context;
class stream_base;

/// One cached connection to a peer. Members are touched on the owning thread only.
struct client_connection {
  enum class state { connecting, ready, broken, closed };
  explicit client_connection(std::string ep);
  ~client_connection();
  /// Destroys the KJ objects (in order) and wakes waiters.
  void close() noexcept;
  /// Wakes every acquire() waiting for this connection to open.
  void wake_waiters() noexcept;

  std::string endpoint;
  state st = state::connecting;
  mc::time_point last_used;
  boost::system::error_code connect_error;
  std::string connect_message;
  /// acquire()s waiting for this connection to open; all woken when
  /// connecting ends (ready, failed or closed).
  mc::waiter_queue ready_waiters;
  std::list<client_connection*>::iterator lru_pos;

  kj::Own<stream_base> stream;
  kj::Own<pooled_message_stream> messages;  // over `stream`, read by `network`
  kj::Own<capnp::TwoPartyVatNetwork> network;
  kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>> rpc;
  kj::Maybe<capnp::Capability::Client> bootstrap;
  std::map<std::string, capnp::Capability::Client> services;
  /// Lookups in progress: concurrent connect()s share one getService call.
  std::map<std::string, kj::ForkedPromise<capnp::Capability::Client>> lookups;
  kj::Promise<void> watch = nullptr;

  mc::time_point idle_since() const noexcept;
  /// A call made on it has not ended yet (its messages' call_ledger): not
  /// idle however long the wire stays silent, and evicted only when every
  /// cached connection is busy.
  bool busy() const noexcept { return messages && messages->open_calls() > 0; }
};

/// Connection reuse and cancellation (checked, issue 13): a connection is
/// cached only once open() completed (dial and, for RDMA, the handshake):
/// a connect or handshake cut short by a deadline or a cancelled caller
/// returns an error value and the half-open connection is erased, never
/// cached. A ready connection stays reusable when a call on it is cancelled:
/// Cap'n Proto multiplexes calls on one stream, every message is written
/// whole by the connection's own write queue (TwoPartyVatNetwork), not by the
/// call, and cancelling a call only drops its promise and sends a Finish
/// message, so the stream never holds half a message of a cancelled call.
/// A stream that fails mid-message disconnects; onDisconnect marks the
/// connection broken and the next acquire() replaces it.
class client_cache : public std::enable_shared_from_this<client_cache> {
 public:
  client_cache(thread_context& tc, client_options opts);
  ~client_cache();
  client_cache(const client_cache&) = delete;
  client_cache& operator=(const client_cache&) = delete;

  /// A ready connection to `endpoint` (existing or new). Errors: rpc_fail,
  /// timeout (connect_timeout), shutting_down, cancelled (while waiting for
  /// another caller's connect to the same endpoint).
  mc::task<mc::result<std::shared_ptr<client_connection>>> acquire(std::string endpoint);

  /// Closes and forgets every connection.
  void close_all() noexcept;

  const client_options& options() const noexcept { return opts_; }
  client_stats stats() const noexcept;
  bool closed() const noexcept { return closed_; }

 private:
  mc::task<mc::result<void>> open(std::shared_ptr<client_connection> c);
  void erase(const std::shared_ptr<client_connection>& c) noexcept;
  bool make_room() noexcept;
  void touch(client_connection& c) noexcept;
  void arm_sweep();
  void sweep();

  thread_context& tc_;
  client_options opts_;
  std::unordered_map<std::string, std::shared_ptr<client_connection>> by_endpoint_;
  std::list<client_connection*> lru_;  // front = most recently used
  boost::asio::steady_timer sweep_timer_;
  bool sweep_armed_ = false;
  bool closed_ = false;
  client_stats stats_;
};

}  // namespace mc::rpc::detail
