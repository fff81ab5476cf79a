#pragma once
// Bounded per-thread, per-peer connection pools. Everything here is touched
// only by the runtime thread that owns the pool: no locks.
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"
#include "mc/runtime/waiter_queue.hpp"

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace mc::transfer::detail {

/// Wakes every operation pending on `s` (they complete with
/// operation_aborted) and makes later I/O on it fail at once (EOF / EPIPE),
/// without closing the descriptor; the coroutine that owns the socket closes
/// it when it unwinds. Never close a socket that has an operation in flight:
/// Asio 1.81's io_uring backend recycled the socket's state on close() while
/// the kernel still held the poll, and the cancelled operation's handler was
/// then never called (engine::stop() hung forever on exactly this; Boost <
/// 1.83 builds now use epoll, meson.build, but the rule costs nothing and
/// keeps io_uring builds safe). Works on listening sockets too (a pending
/// accept wakes). Call on the socket's thread.
template <class Socket>
void interrupt_socket(Socket& s) noexcept {
  if (!s.is_open()) return;
  boost::system::error_code ignored;
  s.cancel(ignored);
  ::shutdown(s.native_handle(), SHUT_RDWR);
}

/// Something engine::stop() must interrupt (a pooled or a served connection).
struct closable {
  virtual ~closable() = default;
  /// Interrupts (interrupt_socket), never closes: the owner closes.
  virtual void close_now() noexcept = 0;
};

/// Registers a closable in its thread's live set for its lifetime.
class live_registration {
 public:
  live_registration(std::unordered_set<closable*>& set, closable* c) : set_(&set), c_(c) { set.insert(c); }
  ~live_registration() { set_->erase(c_); }
  live_registration(const live_registration&) = delete;
  live_registration& operator=(const live_registration&) = delete;

 private:
  std::unordered_set<closable*>* set_;
  closable* c_;
};

template <class Socket>
struct pooled_conn final : closable {
  pooled_conn(Socket s, std::unordered_set<closable*>& live, std::atomic<std::uint64_t>* counter)
      : sock(std::move(s)), reg(live, this), counter_(counter) {
    if (counter_) counter_->fetch_add(1, std::memory_order_relaxed);
  }
  ~pooled_conn() override {
    if (counter_) counter_->fetch_sub(1, std::memory_order_relaxed);
  }
  pooled_conn(const pooled_conn&) = delete;
  pooled_conn& operator=(const pooled_conn&) = delete;
  void close_now() noexcept override {
    if constexpr (requires(Socket & x) { x.native_handle(); }) {
      interrupt_socket(sock);
    } else {  // a link with its own stop (rdma_link: QP to error, nothing awaited on its socket)
      boost::system::error_code ignored;
      sock.close(ignored);
    }
  }
  Socket sock;
  live_registration reg;
  std::uint64_t next_id = 1;
  std::uint64_t answered_id = 1;      // TCP: the id the next answer must carry
  std::array<std::byte, 48> ahead{};  // TCP: start of the next answer's header, read with a payload
  std::size_t ahead_have = 0;         // its bytes
  std::int64_t peer_pid = 0;          // same-host control connections
  std::uint64_t peer_instance = 0;    // same-host: the peer engine's instance id
  std::size_t peer_max_grants = 0;    // same-host: live grants the peer holds for us at most
  bool peer_grant_ranges = false;     // same-host: the peer serves grant_ranges requests
  /// Same-host: releases of this connection's last window not sent yet (a
  /// spread batch's windows): they go out in front of the next request on
  /// it, or by shm_transport::flush_deferred. At most one window's releases.
  std::vector<std::byte> deferred;

 private:
  std::atomic<std::uint64_t>* counter_;
};

template <class Socket>
class peer_pool;

/// A checked-out connection. It goes back to the pool only at a clean
/// protocol boundary: a lease starts clean (an idle or a fresh connection);
/// begin() marks an exchange in progress and keep() marks it complete. A
/// lease released mid-exchange (an error, cancellation, an exception
/// unwinding the coroutine, or simply no keep()) discards its connection:
/// a half-used connection never returns to the pool, so the next request's
/// bytes can never become the tail of the previous payload. Owner thread only.
template <class Socket>
class conn_lease {
 public:
  conn_lease() = default;
  conn_lease(peer_pool<Socket>* p, std::unique_ptr<pooled_conn<Socket>> c, bool reused)
      : pool_(p), conn_(std::move(c)), reused_(reused) {}
  conn_lease(conn_lease&& o) noexcept
      : pool_(std::exchange(o.pool_, nullptr)), conn_(std::move(o.conn_)), reused_(o.reused_), clean_(o.clean_) {}
  conn_lease& operator=(conn_lease&& o) noexcept {
    if (this != &o) {
      give_back();
      pool_ = std::exchange(o.pool_, nullptr);
      conn_ = std::move(o.conn_);
      reused_ = o.reused_;
      clean_ = o.clean_;
    }
    return *this;
  }
  ~conn_lease() { give_back(); }

  explicit operator bool() const noexcept { return conn_ != nullptr; }
  pooled_conn<Socket>* operator->() const noexcept { return conn_.get(); }
  pooled_conn<Socket>& operator*() const noexcept { return *conn_; }
  /// Came from the idle list (may be stale if the peer restarted).
  bool reused() const noexcept { return reused_; }
  /// An exchange starts: until keep(), releasing the lease discards the connection.
  void begin() noexcept { clean_ = false; }
  /// The exchange completed (request and whole response): the connection may
  /// be reused.
  void keep() noexcept { clean_ = true; }
  /// Drops the connection now (broken or in an unknown protocol state).
  void discard() noexcept;

 private:
  void give_back() noexcept;
  peer_pool<Socket>* pool_ = nullptr;
  std::unique_ptr<pooled_conn<Socket>> conn_;
  bool reused_ = false;
  bool clean_ = true;
};

/// Bounded pool of connections to one peer, owned by one runtime thread.
/// Callers waiting for a connection queue in FIFO order (mc::waiter_queue):
/// each release or failed connect wakes the oldest one, which then takes the
/// idle connection or opens one in the freed slot.
template <class Socket>
class peer_pool {
 public:
  using connect_fn = std::function<task<result<std::unique_ptr<pooled_conn<Socket>>>>()>;

  /// The executor argument (the owning thread's) is not needed: waiters
  /// resume on their own executor, which is that thread's.
  peer_pool(mc::executor /*owner*/, std::size_t max, const bool* stopping) : max_(max), stopping_(stopping) {}

  /// A connection: an idle one, a new one (while below the bound: the
  /// pool's, or `limit` when larger - calls, see
  /// engine_options::call_connections_per_peer), or, when `wait`, the next
  /// one released (FIFO among waiters; a waiter woken by a closed connection
  /// while the pool is still at its own bound waits again, and the next
  /// release wakes the next one). Without `wait`, an empty lease when the
  /// pool is exhausted. Errors: connect errors, cancelled (while waiting;
  /// nothing is held), shutting_down.
  task<result<conn_lease<Socket>>> acquire(const connect_fn& connect, bool wait, std::size_t limit = 0) {
    const std::size_t cap = std::max(max_, limit);
    for (;;) {
      if (*stopping_) co_return fail(errc::shutting_down);
      if (!idle_.empty()) {
        auto c = std::move(idle_.back());
        idle_.pop_back();
        co_return conn_lease<Socket>(this, std::move(c), true);
      }
      if (total_ < cap) {
        ++total_;
        auto c = co_await connect();
        if (!c) {
          --total_;
          wake_one();
          co_return c.error();
        }
        co_return conn_lease<Socket>(this, std::move(*c), false);
      }
      if (!wait) co_return conn_lease<Socket>();
      ++waiters_;  // counts the woken until they run: the pool is not unused() meanwhile
      auto woken = co_await q_.wait(q_.lock(), 0);
      --waiters_;
      if (!woken) co_return woken.error();
    }
  }

  /// An idle connection now, or an empty lease (none idle, or stopping):
  /// never waits, never connects.
  conn_lease<Socket> try_idle() {
    if (*stopping_ || idle_.empty()) return {};
    auto c = std::move(idle_.back());
    idle_.pop_back();
    return conn_lease<Socket>(this, std::move(c), true);
  }

  /// Closes idle connections (they are likely stale after a failure).
  void drop_idle() noexcept {
    total_ -= idle_.size();
    idle_.clear();
  }
  /// Wakes every waiter (stop: they see stopping and return shutting_down).
  void wake_all() noexcept {
    waiter_queue::wakeups w;
    auto lk = q_.lock();
    q_.grant_all(w, 0);
  }
  bool unused() const noexcept { return total_ == idle_.size() && waiters_ == 0; }
  std::size_t total() const noexcept { return total_; }
  std::uint64_t last_use = 0;

 private:
  friend class conn_lease<Socket>;
  void put_back(std::unique_ptr<pooled_conn<Socket>> c) {
    if (*stopping_ || !c->sock.is_open()) {
      --total_;
    } else {
      idle_.push_back(std::move(c));
    }
    wake_one();
  }
  void forget() noexcept {
    --total_;
    wake_one();
  }
  /// A connection or a slot came free: the oldest waiter retries.
  void wake_one() noexcept {
    waiter_queue::wakeups w;
    auto lk = q_.lock();
    if (!q_.empty()) q_.grant_front(w, 0);
  }

  waiter_queue q_;  // callers waiting for a connection (this thread only, so never contended)
  std::vector<std::unique_ptr<pooled_conn<Socket>>> idle_;
  std::size_t total_ = 0;
  std::size_t waiters_ = 0;
  std::size_t max_;
  const bool* stopping_;
};

template <class Socket>
void conn_lease<Socket>::discard() noexcept {
  if (!conn_) return;
  conn_.reset();
  if (pool_) std::exchange(pool_, nullptr)->forget();
}

template <class Socket>
void conn_lease<Socket>::give_back() noexcept {
  if (!conn_) return;
  if (!clean_) return discard();
  if (pool_) std::exchange(pool_, nullptr)->put_back(std::move(conn_));
  conn_.reset();
}

/// Pools of one kind on one thread, keyed by endpoint, at most `max_peers`
/// (the least recently used unused pool is closed to make room).
template <class Socket>
class pool_map {
 public:
  /// nullptr when max_peers pools are all in use.
  peer_pool<Socket>* get(const std::string& endpoint, mc::executor ex, std::size_t conns, std::size_t max_peers,
                         const bool* stopping) {
    ++clock_;
    auto it = pools_.find(endpoint);
    if (it != pools_.end()) {
      it->second->last_use = clock_;
      return it->second.get();
    }
    if (pools_.size() >= max_peers) {
      auto victim = pools_.end();
      for (auto i = pools_.begin(); i != pools_.end(); ++i)
        if (i->second->unused() && (victim == pools_.end() || i->second->last_use < victim->second->last_use))
          victim = i;
      if (victim == pools_.end()) return nullptr;
      pools_.erase(victim);
    }
    auto p = std::make_unique<peer_pool<Socket>>(ex, conns, stopping);
    p->last_use = clock_;
    return pools_.emplace(endpoint, std::move(p)).first->second.get();
  }
  /// The pool to `endpoint`, or nullptr when there is none (never creates one).
  peer_pool<Socket>* find(const std::string& endpoint) noexcept {
    auto it = pools_.find(endpoint);
    return it == pools_.end() ? nullptr : it->second.get();
  }
  void wake_all() noexcept {
    for (auto& [k, p] : pools_) p->wake_all();
  }
  /// Drops idle connections of every pool (stop).
  void drop_idle() noexcept {
    for (auto& [k, p] : pools_) p->drop_idle();
  }
  /// Drops the idle connections to one peer (fence).
  void drop_idle(const std::string& endpoint) noexcept {
    if (auto it = pools_.find(endpoint); it != pools_.end()) it->second->drop_idle();
  }

 private:
  std::unordered_map<std::string, std::unique_ptr<peer_pool<Socket>>> pools_;
  std::uint64_t clock_ = 0;
};

}  // namespace mc::transfer::detail
