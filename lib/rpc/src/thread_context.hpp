#pragma once
// Per-runtime-thread KJ state: an EventLoop hosted on the thread's io_context
// (asio drives; KJ is a guest), the thread's task set, the serving-call
// registry used for draining, and the client connection cache.
#include "mc/rpc/detail/bridge.hpp"
#include "mc/runtime/task.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace mc::rpc::detail {

class client_cache;
class recv_pool;

/// kj::EventPort driven by asio: when KJ has work it posts a bounded
/// loop.run() to the io_context and re-posts while work remains. Never blocks.
class asio_event_port final : public kj::EventPort {
 public:
  explicit asio_event_port(boost::asio::io_context& io);
  ~asio_event_port();
  void attach(kj::EventLoop& loop) noexcept;
  /// Stops scheduling (posted runs become no-ops).
  void detach() noexcept;

  bool wait() override;
  bool poll() override;
  void setRunnable(bool runnable) override;
  void wake() const override;

  using core = event_port_core;
  const std::shared_ptr<core>& shared_core() const noexcept { return core_; }

 private:
  std::shared_ptr<core> core_;
};

class thread_context final : public kj::TaskSet::ErrorHandler {
 public:
  /// The calling thread's context, created on first use. Throws
  /// std::logic_error off a runtime thread.
  static thread_context& current();
  /// The calling thread's context if it exists.
  static thread_context* find() noexcept;
  /// Synchronous teardown of the calling thread's context (inside the loop:
  /// call from an asio handler or coroutine of this thread). No-op if none.
  static void destroy_current() noexcept;

  boost::asio::io_context& io() noexcept { return io_; }
  asio_event_port& port() noexcept { return port_; }
  mc::executor executor() const { return io_.get_executor(); }
  kj::TaskSet& tasks() { return *tasks_; }

  client_cache& clients();
  client_cache* clients_if_exists() noexcept { return clients_.get(); }
  void close_clients() noexcept;
  /// This thread's pool of receive buffers (message_stream.hpp), shared by
  /// every connection of the thread and the messages read from them.
  const std::shared_ptr<recv_pool>& recv_buffers();

  /// Serving-call registry. enter_call fails while any server drains here.
  bool enter_call(serving_call* c) noexcept;
  void leave_call(serving_call* c) noexcept;
  std::size_t calls_in_flight() const noexcept { return calls_; }
  void begin_drain() noexcept { ++draining_; }
  void end_drain() noexcept {
    if (draining_) --draining_;
  }
  /// Completes when no call is in flight or at `deadline`; true if idle.
  mc::task<bool> wait_calls_idle(mc::time_point deadline);

  /// Deadline queue (see bridge.hpp).
  deadline_token add_deadline(mc::time_point when, std::weak_ptr<timed_op> op);
  void cancel_deadline(const deadline_token& t) noexcept;

  /// Hooks run by teardown (servers register the destruction of their
  /// per-thread KJ state so nothing survives the loop).
  void add_teardown_hook(const void* key, std::function<void()> f);
  void remove_teardown_hook(const void* key) noexcept;

  ~thread_context();

 private:
  explicit thread_context(boost::asio::io_context& io);
  void taskFailed(kj::Exception&& e) override;
  void teardown() noexcept;
  void arm_deadline_timer(mc::time_point when);
  void fire_deadlines();

  boost::asio::io_context& io_;
  asio_event_port port_;
  kj::EventLoop loop_;
  kj::WaitScope scope_;
  kj::Own<kj::TaskSet> tasks_;
  std::shared_ptr<client_cache> clients_;
  std::shared_ptr<recv_pool> recv_pool_;
  serving_call* calls_head_ = nullptr;
  std::size_t calls_ = 0;
  std::size_t draining_ = 0;
  std::vector<boost::asio::steady_timer*> idle_waiters_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::vector<std::pair<const void*, std::function<void()>>> hooks_;
  std::map<std::pair<mc::time_point, std::uint64_t>, std::weak_ptr<timed_op>> deadlines_;
  std::uint64_t next_deadline_id_ = 0;
  boost::asio::steady_timer deadline_timer_;
  mc::time_point deadline_armed_ = mc::time_point::max();
};

}  // namespace mc::rpc::detail
