#pragma once
/// The C++ core of the Python API (no Python types here): one embedded P2P
/// node (mc::store::client on its own runtime) behind the calls of Mooncake's
/// `MooncakeDistributedStore`, with Mooncake's return conventions.
///
/// Every data call exists twice: as a coroutine (`op_*`, run on the node's
/// runtime by the asyncio bridge) and through `run()`, which blocks the
/// calling (Python, never runtime) thread until the coroutine finished.
///
/// Return conventions (Mooncake's `store_py.cpp`): 0 or a negative
/// mc::errc value (the numbers are Mooncake's ErrorCode values); reads return
/// the bytes read or a negative code; existence checks 1 / 0 / negative.
///
/// Thread-safety: every member may be called from any number of non-runtime
/// threads at once. close() waits for the calls in flight (each bounded by the
/// rpc_timeout deadline) and then stops the node; calls after close() (or in a
/// child process forked after setup) return errc::unavailable_in_current_status
/// without touching the node.
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"
#include "mc/store/client.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

namespace mc::runtime {
class runtime;
}

namespace mc::python {

/// Mooncake's health_check() answers.
inline constexpr int hc_healthy = 0;
inline constexpr int hc_not_initialized = 1;
inline constexpr int hc_master_unreachable = 2;

/// A value read into memory owned by the caller of get_buffer (the Python
/// BufferHandle). Independent of the node: it stays valid after close().
/// How a put writes (Mooncake's put vs upsert, ReplicateConfig.replica_num).
struct put_how {
  bool upsert = false;
  std::uint32_t replicas = 1;
};

struct owned_buffer {
  std::unique_ptr<std::byte[]> data;
  std::size_t size = 0;
};

/// A caller buffer given as an integer address and a length (Python passes
/// pointers into its own registered memory as int).
struct raw_span {
  std::uintptr_t ptr = 0;
  std::size_t size = 0;
};

/// What setup() needs: the node's options plus the Python-level extras.
struct setup_config {
  mc::store::client_options opts;
  std::uint64_t global_segment_size = 0;  ///< 0 = pure client (puts go to peers)
  std::uint64_t local_buffer_size = 0;
  std::string hostname;  ///< get_hostname(): local_hostname as given (or derived)
};

/// Parses the keyword form (`setup(config: dict)` / `setup_p2p_real_client`):
/// every key is either one of Mooncake's (local_hostname, metadata_server,
/// global_segment_size, local_buffer_size, protocol, rdma_devices,
/// master_server_addr, ...) or a mooncake_client flag name (client_rpc_port,
/// tiered_backend_config, rpc_thread_num, lock_shard_count, ...). Sizes accept
/// units ("16MB"). Returns the config or an error message (unknown key, bad
/// value, missing local_hostname / master address).
std::optional<setup_config> parse_setup(const std::vector<std::pair<std::string, std::string>>& kv, std::string* why);

/// A started asynchronous operation (asyncio bridge): cancel() from any
/// thread cancels it (the operation then completes with errc::cancelled or the
/// error it ended with; `done` still runs exactly once).
class async_op {
 public:
  virtual ~async_op() = default;
  virtual void cancel() = 0;
};

class store_session : public std::enable_shared_from_this<store_session> {
 public:
  /// The running node (runtime + client); opaque outside session.cpp.
  struct node;

  store_session();
  ~store_session();
  store_session(const store_session&) = delete;
  store_session& operator=(const store_session&) = delete;

  /// Starts the embedded node (runtime + client). 0, or a negative code
  /// (invalid_params for a bad configuration, the node's start error
  /// otherwise, e.g. rpc_fail when the master is unreachable). A session that
  /// is running answers invalid_params (close() first).
  int setup(setup_config cfg, std::string* why);
  /// Standalone mode (Mooncake's setup_dummy): attaches to the mooncake_client
  /// node whose client RPC endpoint is `server_address` (on this host) instead
  /// of embedding one; data moves between this process and that node through
  /// the same-host transport (TCP when it cannot be used). 0 or negative
  /// (rpc_fail: no node there; access_denied: the node refused this process).
  int setup_dummy(std::uint64_t local_buffer_size, std::string server_address, std::string* why);
  /// Stops the node after the calls in flight finished (each is bounded by
  /// its deadline). 0; idempotent. In a forked child it only forgets the
  /// inherited node (never touches its threads).
  int close();
  /// hc_healthy / hc_not_initialized / hc_master_unreachable.
  int health_check();
  /// The advertised host of the node ("" before setup).
  std::string hostname() const;

  // ---- Operations (coroutines on the node's runtime) -------------------------
  // Only through run() / spawn(), which hold the node for their duration.

  /// Mooncake's put: with `how.upsert` false a key that already exists
  /// anywhere is kept (0, nothing written); with it true the value replaces
  /// it. `how.replicas` copies on distinct nodes (put_options::replicas;
  /// -1108 REPLICATION_INCOMPLETE when only some committed (-1109 SUPERSEDED:
  /// a newer put of the key won); an attached
  /// session (setup_dummy) writes one copy and answers -1103 UNSUPPORTED
  /// for more).
  task<int> op_put_parts(node& n, std::string key, std::vector<std::span<const std::byte>> pieces, put_how how);
  task<std::vector<int>> op_batch_put_parts(node& n, std::vector<std::string> keys,
                                            std::vector<std::vector<std::span<const std::byte>>> values, put_how how);
  /// Bytes read into the pieces, or a negative code (buffer_overflow when they
  /// hold less than the value: nothing is written).
  task<std::int64_t> op_get_parts(node& n, std::string key, std::vector<std::span<std::byte>> pieces);
  task<std::vector<std::int64_t>> op_batch_get_parts(node& n, std::vector<std::string> keys,
                                                     std::vector<std::vector<std::span<std::byte>>> pieces);
  /// Reads whole values into new memory; object_not_found when missing.
  task<std::vector<result<owned_buffer>>> op_batch_get_owned(node& n, std::vector<std::string> keys);
  /// 1 / 0 / negative per key.
  task<std::vector<int>> op_batch_exists(node& n, std::vector<std::string> keys);
  /// The value's size, or a negative code (object_not_found).
  task<std::int64_t> op_get_size(node& n, std::string key);
  task<int> op_remove(node& n, std::string key);
  /// op_remove per key, concurrently; 0 or negative per key.
  task<std::vector<int>> op_batch_remove(node& n, std::vector<std::string> keys);
  /// Keys removed everywhere (every key when `all`, else those matching the
  /// ECMAScript regular expression `pattern`), or a negative code.
  task<std::int64_t> op_remove_matching(node& n, std::string pattern, bool all);
  /// Drops this node's own copy (the master forgets it as a holder).
  task<int> op_remove_local(node& n, std::string key);
  /// Drops every value this node holds; the count, or a negative code.
  task<std::int64_t> op_remove_all_local(node& n);

  /// Runs `t` (made by `make` once the node is held) on the node's runtime and
  /// blocks the calling thread until it finished. false (and `make` is not
  /// called) when the session is not usable. Never call from a runtime thread.
  bool run(const std::function<task<void>(node&)>& make);
  /// Starts the task made by `make` on the node's runtime; `done` runs on a
  /// runtime thread after it finished (or was cancelled) and must not block.
  /// nullptr (nothing started, `done` not called) when not usable.
  std::shared_ptr<async_op> spawn(const std::function<task<void>(node&)>& make, std::function<void()> done);

  /// Buffer registrations (register_buffer / unregister_buffer): 0 or negative
  /// (invalid_params: null, empty, overlapping an existing registration, or
  /// unknown address to unregister).
  int register_buffer(std::uintptr_t ptr, std::size_t size);
  int unregister_buffer(std::uintptr_t ptr);

  /// Pieces from integer addresses (null with a non-zero size, or address +
  /// size overflowing, is invalid_params).
  static result<std::vector<std::span<std::byte>>> pieces_of(const std::vector<raw_span>& spans);

 private:
  /// The common part of setup / setup_dummy: a runtime of `threads` threads
  /// and `start` filling the node; refused while a node runs.
  int start_node(std::size_t threads, const std::function<int(node&, std::string*)>& start, std::string* why);
  /// Takes the node for one call (nullptr when not usable); release with
  /// leave().
  std::shared_ptr<node> enter();
  void leave(node& n);

  std::mutex mu_;               // guards node_ and generation_
  std::shared_ptr<node> node_;  // leaked (never destroyed) in a forked child
  std::uint64_t generation_ = 0;
  std::string hostname_;
};

}  // namespace mc::python
