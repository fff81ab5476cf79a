#pragma once
// Engine internals shared by the transports and the servers.
#include "mc/runtime/deadline_queue.hpp"
#include "mc/runtime/gate.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/transfer/engine.hpp"
#include "pool.hpp"
#include "rdma.hpp"
#include "registry.hpp"
#include "transport.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace mc::transfer::detail {

class rdma_thread;

using tcp_socket = boost::asio::ip::tcp::socket;
using unix_socket = boost::asio::local::stream_protocol::socket;

/// Why the same-host transport is not used for a peer.
enum class same_host_verdict : std::uint8_t {
  no_socket,  ///< no control socket in this network namespace (another host)
  refused,    ///< identity mismatch or the kernel refused process_vm_*: TCP, even when forced
};

/// Per-peer "not same host" verdicts with expiry; bounded (one runtime
/// thread's; no locks).
class peer_verdicts {
 public:
  static constexpr std::size_t capacity = 1024;
  using clock = std::chrono::steady_clock;

  /// The live verdict for `endpoint` (an expired one is forgotten).
  std::optional<same_host_verdict> get(const std::string& endpoint, clock::time_point now) {
    auto it = m_.find(endpoint);
    if (it == m_.end()) return std::nullopt;
    if (now >= it->second.until) {
      m_.erase(it);
      return std::nullopt;
    }
    return it->second.verdict;
  }
  /// Remembers `v` for `endpoint` until `until`. When full, expired entries
  /// go first, then the one expiring soonest.
  void put(const std::string& endpoint, same_host_verdict v, clock::time_point until) {
    if (m_.size() >= capacity && !m_.count(endpoint)) {
      const auto now = clock::now();
      std::erase_if(m_, [&](const auto& kv) { return now >= kv.second.until; });
      if (m_.size() >= capacity)
        m_.erase(std::min_element(m_.begin(), m_.end(),
                                  [](const auto& a, const auto& b) { return a.second.until < b.second.until; }));
    }
    m_[endpoint] = {v, until};
  }
  std::size_t size() const noexcept { return m_.size(); }

 private:
  struct entry {
    same_host_verdict verdict;
    clock::time_point until;
  };
  std::unordered_map<std::string, entry> m_;
};

struct thread_state;

/// A peer's shared memory (engine::allocate_shared there) mapped into this
/// process by the same-host transport, once per process (engine_impl::
/// shared_maps_). Unmapped when its last holder (a thread's cache entry, a
/// copy in progress) lets go.
struct peer_mapping {
  static constexpr std::size_t block = 1u << 20;  // populated in blocks of this size

  std::uint64_t instance = 0;     // the peer engine's instance id
  std::uint64_t id = 0;           // the peer's shared_memory id
  std::uint64_t remote_base = 0;  // where the memory starts in the peer
  std::byte* local = nullptr;     // where it is mapped here
  std::size_t len = 0;
  /// Blocks whose page tables were filled (prepare()).
  std::unique_ptr<std::atomic<bool>[]> ready;

  peer_mapping() = default;
  peer_mapping(const peer_mapping&) = delete;
  peer_mapping& operator=(const peer_mapping&) = delete;
  ~peer_mapping();
  /// Where the peer's [addr, addr + n) lies here; null when not inside.
  std::byte* at(std::uint64_t addr, std::uint64_t n) const noexcept {
    if (addr < remote_base || n > len || addr - remote_base > len - n) return nullptr;
    return local + (addr - remote_base);
  }
  /// Fills the page tables of the blocks [p, p + n) lies in that were not
  /// filled yet (MADV_POPULATE_WRITE, one block per call: a first copy
  /// through a fresh mapping then costs no page fault per 4 KiB page).
  void prepare(const std::byte* p, std::size_t n) const noexcept;
};

/// One runtime thread's use of a peer_mapping: dropped shared_map_ttl after
/// its last use on that thread.
struct mapping_use {
  std::shared_ptr<peer_mapping> m;
  mc::deadline_queue::entry expiry;
  std::chrono::steady_clock::time_point until{};  // when `expiry` fires
  thread_state* owner = nullptr;                  // whose cache holds it
};
inline constexpr std::size_t max_peer_mappings = 16;
inline constexpr auto shared_map_ttl = std::chrono::seconds(5);

/// State owned by one runtime thread (touched only there).
struct thread_state {
  std::size_t index = 0;
  mc::executor ex;
  bool stopping = false;
  std::unordered_set<closable*> live;  // every open connection of this thread
  pool_map<tcp_socket> tcp_pools;
  pool_map<unix_socket> shm_pools;
  /// Peers the same-host transport skips for now (bounded, expiring).
  peer_verdicts not_same_host;
  /// Verbs objects of this thread (protocol "rdma"; created on first use).
  std::shared_ptr<rdma_thread> rdma;
  /// Deadlines of calls on idle pooled connections (tcp_call_idle; created
  /// on first use, released with the pools).
  std::shared_ptr<mc::deadline_queue> deadlines;
  /// Peers' shared memory this thread uses (at most max_peer_mappings, each
  /// dropped shared_map_ttl after its last use here; see
  /// shm_transport.cpp). After `deadlines`: destroyed before it.
  std::vector<std::unique_ptr<mapping_use>> mappings;
  /// Peers' shared memory we could not map (refused, mmap failed): (peer
  /// instance, id) and until when we do not ask again. Bounded.
  std::vector<std::pair<std::pair<std::uint64_t, std::uint64_t>, std::chrono::steady_clock::time_point>> unmappable;
};

struct atomic_counters {
  std::atomic<std::uint64_t> read_ops{0}, read_bytes{0}, write_ops{0}, write_bytes{0}, errors{0};
};

struct engine_counters {
  std::array<atomic_counters, transport_kind_count> initiated;
  std::atomic<std::uint64_t> served_read_ops{0}, served_read_bytes{0}, served_write_ops{0}, served_write_bytes{0},
      served_rejects{0}, outbound{0}, inbound{0}, same_host_fallbacks{0}, grants_held{0}, derived{0}, rdma_regs{0},
      fences{0}, fenced_qps{0}, served_calls{0}, served_call_errors{0}, initiated_calls{0}, initiated_call_errors{0},
      shared_mappings{0}, shared_maps_served{0}, shared_copies{0}, range_grants_served{0}, releases_deferred{0};
};

inline void bump(std::atomic<std::uint64_t>& c, std::uint64_t v = 1) noexcept {
  c.fetch_add(v, std::memory_order_relaxed);
}

class tcp_server;
class shm_server;

class engine_impl : public std::enable_shared_from_this<engine_impl> {
 public:
  engine_impl(mc::runtime::runtime& rt, engine_options opts);
  ~engine_impl();

  mc::result<void> start();
  task<void> shutdown();
  void stop_unstarted() noexcept;

  /// Runs a batch on the calling runtime thread (which must be one of ours).
  task<std::vector<mc::result<void>>> run_batch(std::vector<request> reqs, std::chrono::steady_clock::duration timeout);

  /// engine::fence with protocol "rdma": served QPs from `peer` (any
  /// thread), then ours to `peer` on every runtime thread.
  task<mc::result<void>> fence_rdma(std::string peer);

  /// engine::call on the calling runtime thread (one of ours).
  task<mc::result<std::size_t>> run_call(std::string endpoint, std::span<const std::byte> request,
                                         std::span<std::byte> reply, std::chrono::steady_clock::duration timeout);
  /// The installed call handler (null: none). Thread-safe.
  std::shared_ptr<const call_handler> call_handler_now() const;
  void set_call_handler(call_handler h);

  thread_state& this_thread_state();
  bool on_own_thread() const noexcept;

  mc::runtime::runtime& rt_;
  const engine_options opts_;
  std::shared_ptr<registry> registry_ = std::make_shared<registry>();
  std::string endpoint_;
  std::string shm_name_;  // abstract unix socket name of the same-host server
  std::atomic<bool> stopping_{false};
  std::atomic<bool> started_{false};
  /// Random nonzero id of this engine (engine::instance_id).
  const std::uint64_t instance_id_;
  /// Our pid namespace (st_dev, st_ino of /proc/self/ns/pid); {0, 0} unknown.
  std::pair<std::uint64_t, std::uint64_t> pid_ns_{0, 0};
  bool refuse_cma_for_tests_ = false;  // MC_TRANSFER_TEST_REFUSE_CMA=1
  /// MC_TRANSFER_TEST_LEGACY_GRANTS=1: the control server answers like an
  /// older version (no bound in its hello answer, 64 live grants).
  bool legacy_grants_for_tests_ = false;
  /// Peers' shared memory mapped in this process (same-host transport): one
  /// mapping per peer memory, found by every runtime thread; alive while a
  /// thread's cache (thread_state::mappings) or a copy holds it. Bounded by
  /// what the threads hold (expired entries are purged on insert).
  std::mutex shared_maps_m_;
  std::vector<std::weak_ptr<peer_mapping>> shared_maps_;
  /// Longest same-host grant lease this engine gives (1 s; tests shorten it
  /// with MC_TRANSFER_TEST_MAX_LEASE_US at construction).
  std::uint64_t max_lease_ns_ = 1'000'000'000ull;
  mc::gate gate_;
  engine_counters counters_;
  std::vector<std::unique_ptr<thread_state>> threads_;
  std::unique_ptr<transport> tcp_;
  std::unique_ptr<transport> shm_;
  std::unique_ptr<transport> inproc_;
  std::shared_ptr<rdma_context> rdma_ctx_;  // protocol "rdma" only
  std::unique_ptr<transport> rdma_;
  std::unique_ptr<tcp_server> tcp_server_;
  std::unique_ptr<shm_server> shm_server_;

 private:
  mutable std::mutex call_mu_;
  std::shared_ptr<const call_handler> call_handler_;
  task<void> run_group(thread_state& ts, const std::string& endpoint, std::vector<transfer_item*> items);
  /// How many parts run_group_spread cuts `items` into (1: not cut;
  /// engine_options::spread_bytes).
  std::size_t spread_parts(thread_state& ts, const std::string& endpoint,
                           const std::vector<transfer_item*>& items) const;
  /// run_group, with a large group cut into parts moved concurrently on
  /// several runtime threads (this one moves the first).
  task<void> run_group_spread(thread_state& ts, std::string endpoint, std::vector<transfer_item*> items);
  /// The chunks of a spread group and the threads' claims on them.
  struct spread_claims {
    std::vector<std::vector<transfer_item*>> chunks;  // not empty, read-only once claimed
    std::atomic<std::size_t> next{0};                 // the next chunk to claim
    std::atomic<bool> stop{false};                    // a chunk was left unfinished: claim no more
  };
  /// Claimers per runtime thread of a spread batch: while one waits for its
  /// chunk's grants, the other copies.
  static constexpr std::size_t claimers_per_thread = 2;
  /// The chunk size of a spread batch of `total` bytes for `claimers`
  /// claimers: about four chunks per claimer, but one claimer's share when
  /// that is at most spread_chunk_share (a window's grants then once per
  /// claimer, not per 4 MiB: a 32 MiB put in 8 MiB chunks ran 1.12x the
  /// 4 MiB ones), never below `spread_bytes`.
  static constexpr std::uint64_t spread_chunk_share = 8u << 20;
  static std::uint64_t spread_chunk(std::uint64_t spread_bytes, std::uint64_t total, std::size_t claimers) noexcept {
    return std::max({spread_bytes, total / (4 * claimers), std::min(spread_chunk_share, total / claimers)});
  }
  /// Claims chunks of `c` and moves each with run_group on this thread until
  /// none is left or `stop` (`current`: the chunk being moved, may be null).
  task<void> run_claims(thread_state& ts, const std::string& endpoint, spread_claims& c, std::size_t* current);
  /// run_claims on runtime thread `thread`, bounded by the items' deadline
  /// there; not cancellable from the caller.
  task<int> run_part_on(std::size_t thread, std::string endpoint, spread_claims* claims);
  task<void> close_thread(std::size_t i);
  /// Waits until every gate holder left, at most `limit`; false on timeout.
  /// Runs on thread 0 (the gate's waiter and the timer share it).
  task<bool> drain_within(std::chrono::steady_clock::duration limit);
};

// Factories (one .cpp each).
std::unique_ptr<transport> make_tcp_transport(engine_impl& eng);
/// One call (wire ops call_req / call_resp) over a pooled TCP connection of
/// this thread to `endpoint` (tcp_call.cpp); no deadline of its own.
task<mc::result<std::size_t>> tcp_call(engine_impl& eng, thread_state& ts, const std::string& endpoint,
                                       std::span<const std::byte> request, std::span<std::byte> reply);
/// The same on an idle pooled connection, bounded by `deadline` through the
/// thread's deadline queue (no timer or spawned coroutine of its own);
/// nullopt when no connection is idle, or the idle one turned out stale
/// (then tcp_call, under with_deadline_at, takes over). Errors as tcp_call,
/// plus timeout (the deadline passed) and cancelled (the caller was).
task<std::optional<mc::result<std::size_t>>> tcp_call_idle(engine_impl& eng, thread_state& ts,
                                                           const std::string& endpoint,
                                                           std::span<const std::byte> request,
                                                           std::span<std::byte> reply, mc::time_point deadline);
std::unique_ptr<transport> make_shm_transport(engine_impl& eng);
std::unique_ptr<transport> make_inproc_transport(engine_impl& eng);

/// Largest copy the same-host and in-process transports make between two
/// yields to the runtime (and lease / revocation checks).
inline constexpr std::uint64_t max_copy_chunk = 1u << 20;

/// Lets the other coroutines of this runtime thread run (a post to the
/// executor). False when the calling coroutine was cancelled meanwhile.
task<bool> yield_to_runtime();

/// st_dev / st_ino of /proc/self/ns/pid; {0, 0} when unavailable.
std::pair<std::uint64_t, std::uint64_t> own_pid_namespace() noexcept;

/// Serves one accepted TCP connection until EOF, a protocol violation or
/// stop (tcp_server.cpp); `g` keeps the engine's gate entered meanwhile.
task<void> serve_tcp(engine_impl* eng, mc::gate_holder g, tcp_socket sock);

/// The TCP listener (tcp_listener.cpp): accepts on thread 0, serves each
/// connection on a runtime thread (round robin).
class tcp_server {
 public:
  explicit tcp_server(engine_impl& eng);
  ~tcp_server();
  /// Binds and listens; returns the bound port.
  mc::result<std::uint16_t> listen(const std::string& host, std::uint16_t port);
  void start_accepting();
  /// Closes the acceptor (call on thread 0).
  void close() noexcept;

 private:
  struct state;
  std::unique_ptr<state> s_;
};

/// The same-host control server: an abstract unix socket served on a private
/// service thread (grants are validated there; nothing in it ever waits for
/// a runtime thread or a peer's copy).
class shm_server {
 public:
  explicit shm_server(engine_impl& eng);
  ~shm_server();
  mc::result<void> listen(const std::string& name);
  /// Stops the service thread; releases every grant it still holds.
  void stop() noexcept;

  struct state;

 private:
  std::unique_ptr<state> s_;
};

/// Process-wide directory of started engines, for the in-process transport.
void inproc_publish(const std::string& endpoint, std::weak_ptr<registry> reg);
void inproc_withdraw(const std::string& endpoint);
std::shared_ptr<registry> inproc_lookup(const std::string& endpoint);

/// Resolves `endpoint` ("host:port") and connects to the first address that
/// answers; the socket has TCP_NODELAY, keep-alive and non-blocking mode set.
/// Errors: invalid_params (bad endpoint), cancelled, transfer_fail.
task<result<tcp_socket>> connect_tcp(mc::executor ex, std::string endpoint);

}  // namespace mc::transfer::detail
