#pragma once
// Engine internals shared by the transports and the servers.
#include "mc/runtime/gate.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/transfer/engine.hpp"
#include "pool.hpp"
#include "rdma.hpp"
#include "registry.hpp"
#include "transport.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace mc::transfer::detail {

class rdma_thread;

using tcp_socket = boost::asio::ip::tcp::socket;
using unix_socket = boost::asio::local::stream_protocol::socket;

/// State owned by one runtime thread (touched only there).
struct thread_state {
  std::size_t index = 0;
  mc::executor ex;
  bool stopping = false;
  std::unordered_set<closable*> live;  // every open connection of this thread
  pool_map<tcp_socket> tcp_pools;
  pool_map<unix_socket> shm_pools;
  /// Endpoints found not to be on this host (same-host probe failed) -> when.
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> not_same_host;
  /// Verbs objects of this thread (protocol "rdma"; created on first use).
  std::shared_ptr<rdma_thread> rdma;
};

struct atomic_counters {
  std::atomic<std::uint64_t> read_ops{0}, read_bytes{0}, write_ops{0}, write_bytes{0}, errors{0};
};

struct engine_counters {
  std::array<atomic_counters, transport_kind_count> initiated;
  std::atomic<std::uint64_t> served_read_ops{0}, served_read_bytes{0}, served_write_ops{0},
      served_write_bytes{0}, served_rejects{0}, outbound{0}, inbound{0}, same_host_fallbacks{0};
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
  task<std::vector<mc::result<void>>> run_batch(std::vector<request> reqs,
                                               std::chrono::steady_clock::duration timeout);

  thread_state& this_thread_state();
  bool on_own_thread() const noexcept;

  mc::runtime::runtime& rt_;
  const engine_options opts_;
  std::shared_ptr<registry> registry_ = std::make_shared<registry>();
  std::string endpoint_;
  std::string shm_name_;  // abstract unix socket name of the same-host server
  std::atomic<bool> stopping_{false};
  std::atomic<bool> started_{false};
  std::atomic<bool> cma_refused_{false};
  bool refuse_cma_for_tests_ = false;  // MC_TRANSFER_TEST_REFUSE_CMA=1
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
  task<void> run_group(thread_state& ts, const std::string& endpoint, std::vector<transfer_item*> items);
  task<void> close_thread(std::size_t i);
  /// Waits until every gate holder left, at most `limit`; false on timeout.
  /// Runs on thread 0 (the gate's waiter and the timer share it).
  task<bool> drain_within(std::chrono::steady_clock::duration limit);
};

// Factories (one .cpp each).
std::unique_ptr<transport> make_tcp_transport(engine_impl& eng);
std::unique_ptr<transport> make_shm_transport(engine_impl& eng);
std::unique_ptr<transport> make_inproc_transport(engine_impl& eng);

/// The TCP listener: accepts on thread 0, serves each connection on a runtime
/// thread (round robin).
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
/// service thread (so that unregistration, which waits for same-host grants,
/// can never wait for its own thread).
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

/// Splits "host:port" / "[v6]:port". False when malformed.
bool split_endpoint(const std::string& ep, std::string& host, std::uint16_t& port);

/// Resolves `endpoint` ("host:port") and connects to the first address that
/// answers; the socket has TCP_NODELAY, keep-alive and non-blocking mode set.
/// Errors: invalid_params (bad endpoint), cancelled, transfer_fail.
task<result<tcp_socket>> connect_tcp(mc::executor ex, std::string endpoint);

}  // namespace mc::transfer::detail
