#pragma once
/// Internals shared by the templates of mc/rpc/capnp.hpp: awaiting a
/// kj::Promise from a coroutine and running a coroutine as a kj::Promise.
/// Not an API: use mc/rpc/capnp.hpp.
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"
#include "mc/runtime/deadline.hpp"

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/post.hpp>
#include <capnp/capability.h>
#include <kj/async.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

namespace mc::rpc::detail {

/// The calling thread's task set, creating the thread's KJ loop on first use.
/// Throws std::logic_error off a runtime thread.
kj::TaskSet& thread_tasks();

struct event_port_core;

/// Runs the calling thread's KJ loop here, right after something made it
/// runnable, instead of in a run posted to the io_context: for asio handlers
/// and coroutines that complete or start KJ work (a socket became readable,
/// a served call finished, a request was sent). While one is held, the
/// thread's KJ event port posts no run; `run()` releases it and runs the
/// loop here if it has work. Each posted run is one more trip through the
/// executor's queue, and on asio's epoll backend one more reactor poll
/// (epoll_wait) when other handlers are queued. Inside the KJ loop (a KJ
/// callback), or on a thread without one, it does nothing: the running loop
/// picks the work up. Destroyed without `run()` (an exception), the work is
/// posted as before. Not thread-safe: one thread, stack-scoped.
class kj_turn_here {
 public:
  kj_turn_here() noexcept;
  kj_turn_here(const kj_turn_here&) = delete;
  kj_turn_here& operator=(const kj_turn_here&) = delete;
  ~kj_turn_here();
  /// Releases the hold and runs the loop's ready work here (bounded turns;
  /// what remains is posted). KJ callbacks' exceptions go where they always
  /// go (the task set, rejected promises).
  void run();

 private:
  std::shared_ptr<struct event_port_core> core_;  // null: inactive
};

/// Something with a deadline in the calling thread's deadline queue.
struct timed_op {
  virtual ~timed_op() = default;
  /// Runs on the owning thread, inside the loop, when the deadline passes.
  virtual void on_deadline() = 0;
};
/// Opaque position in the thread's deadline queue.
struct deadline_token {
  mc::time_point when{};
  std::uint64_t id = 0;
};
/// Per-thread deadline queue served by one asio timer (no kernel work per
/// call). `op` is held weakly; cancel with the returned token.
deadline_token add_deadline(mc::time_point when, std::weak_ptr<timed_op> op);
void cancel_deadline(const deadline_token& t) noexcept;

/// Error conversion (src/errors.cpp).
kj::Exception to_kj_exception(const boost::system::error_code& ec);
kj::Exception to_kj_exception(std::exception_ptr e);
/// Maps a failure seen by a caller to an errc (remote "mc:NAME:" -> NAME,
/// anything else -> rpc_fail) and records the text for last_error_message().
mc::errc from_kj_exception(const kj::Exception& e);
/// Records a local failure text for last_error_message().
void set_last_error(std::string_view text);

/// What an awaited kj::Promise produced.
template <class T>
struct outcome {
  using stored = std::conditional_t<std::is_void_v<T>, std::monostate, T>;
  std::optional<stored> value;
  std::optional<kj::Exception> error;
  mc::errc local = mc::errc::ok;  ///< timeout / cancelled / shutting_down
};

/// Shared between the KJ continuation (owner), the deadline timer and the
/// caller's cancellation slot (weak). The completion is always posted to the
/// caller's executor, never run inside a KJ callback.
template <class T, class Handler>
class await_state final : public timed_op, public std::enable_shared_from_this<await_state<T, Handler>> {
 public:
  await_state(Handler h, mc::executor ex) : handler_(std::move(h)), ex_(std::move(ex)) {}
  await_state(const await_state&) = delete;
  await_state& operator=(const await_state&) = delete;
  ~await_state() noexcept override {
    if (deadline_) cancel_deadline(*deadline_);
    if (handler_) {  // the KJ loop dropped us (thread shutdown)
      outcome<T> o;
      o.local = mc::errc::shutting_down;
      finish(std::move(o));
    }
  }

  kj::Promise<void> start(kj::Promise<T>&& p, std::optional<mc::duration> timeout) {
    auto paf = kj::newPromiseAndFulfiller<outcome<T>>();
    interrupt_ = kj::mv(paf.fulfiller);
    std::weak_ptr<await_state> weak = this->shared_from_this();
    auto slot = boost::asio::get_associated_cancellation_slot(*handler_);
    if (slot.is_connected())
      slot.assign([weak](boost::asio::cancellation_type) {
        if (auto s = weak.lock()) s->interrupt(mc::errc::cancelled);
      });
    if (timeout)
      deadline_ =
          add_deadline(std::chrono::steady_clock::now() + *timeout, std::weak_ptr<timed_op>(this->shared_from_this()));
    kj::Promise<outcome<T>> wrapped = nullptr;
    if constexpr (std::is_void_v<T>) {
      wrapped = p.then(
          []() {
            outcome<T> o;
            o.value.emplace();
            return o;
          },
          [](kj::Exception&& e) {
            outcome<T> o;
            o.error.emplace(kj::mv(e));
            return o;
          });
    } else {
      wrapped = p.then(
          [](T&& v) {
            outcome<T> o;
            o.value.emplace(kj::mv(v));
            return o;
          },
          [](kj::Exception&& e) {
            outcome<T> o;
            o.error.emplace(kj::mv(e));
            return o;
          });
    }
    // exclusiveJoin: an interrupt drops the real promise (capnp then sends Finish).
    return wrapped.exclusiveJoin(kj::mv(paf.promise)).then([self = this->shared_from_this()](outcome<T>&& o) mutable {
      self->finish(kj::mv(o));
    });
  }

 private:
  void on_deadline() override {
    deadline_.reset();
    interrupt(mc::errc::timeout);
  }
  void interrupt(mc::errc why) {
    if (!handler_ || !interrupt_ || !interrupt_->isWaiting()) return;
    outcome<T> o;
    o.local = why;
    interrupt_->fulfill(kj::mv(o));
  }
  void finish(outcome<T>&& o) {
    if (!handler_) return;
    if (deadline_) {
      cancel_deadline(*deadline_);
      deadline_.reset();
    }
    auto slot = boost::asio::get_associated_cancellation_slot(*handler_);
    if (slot.is_connected()) slot.clear();
    Handler h(std::move(*handler_));
    handler_.reset();
    boost::asio::post(ex_, [h = std::move(h), o = std::move(o)]() mutable { std::move(h)(std::move(o)); });
  }

  std::optional<Handler> handler_;
  mc::executor ex_;
  std::optional<deadline_token> deadline_;
  kj::Own<kj::PromiseFulfiller<outcome<T>>> interrupt_;
};

/// Awaits `p` on the calling runtime thread (the thread whose KJ loop owns `p`).
/// Never throws for KJ failures: they come back in the outcome. Cancellation of
/// the awaiting coroutine (or `timeout`) drops `p`.
template <class T>
mc::task<outcome<T>> await(kj::Promise<T> p, std::optional<mc::duration> timeout = std::nullopt) {
  return boost::asio::async_initiate<const boost::asio::use_awaitable_t<>, void(outcome<T>)>(
      [](auto handler, kj::Promise<T> p, std::optional<mc::duration> timeout) {
        using handler_t = decltype(handler);
        auto ex = boost::asio::get_associated_executor(handler);
        auto st = std::make_shared<await_state<T, handler_t>>(std::move(handler), ex);
        kj_turn_here here;  // sends a request queued by req.send() now
        thread_tasks().add(st->start(kj::mv(p), timeout));
        here.run();
      },
      boost::asio::use_awaitable, kj::mv(p), timeout);
}

/// Server side: a call being served by a coroutine. Registered with the
/// thread so that shutdown can release its KJ references if the coroutine
/// outlives the loop.
struct serving_call {
  virtual ~serving_call() = default;
  /// Drops every KJ object held (called inside the loop).
  virtual void release_kj() noexcept = 0;
  serving_call* prev = nullptr;
  serving_call* next = nullptr;
};

/// Runs `body` on `ex` (must be the calling thread's executor) and returns a
/// promise for it. Dropping the promise cancels the coroutine. `context` is
/// kept alive until the coroutine ends (so late writes to results are safe);
/// `keepalive` (usually thisCap()) likewise keeps the service object alive.
kj::Promise<void> spawn_serving(capnp::CallContextHook& context, mc::executor ex, mc::task<mc::result<void>> body,
                                kj::Maybe<capnp::Capability::Client> keepalive);

/// The hook behind a typed CallContext (capnp 0.9.2 keeps it private: a
/// CallContext is exactly one CallContextHook*).
template <class Params, class Results>
capnp::CallContextHook& context_hook(capnp::CallContext<Params, Results>& ctx) {
  static_assert(sizeof(ctx) == sizeof(capnp::CallContextHook*));
  static_assert(std::is_standard_layout_v<capnp::CallContext<Params, Results>>);
  capnp::CallContextHook* hook = nullptr;
  std::memcpy(static_cast<void*>(&hook), static_cast<const void*>(&ctx), sizeof hook);
  return *hook;
}

/// Cached connection lookup (src/connect.cpp).
mc::task<mc::result<capnp::Capability::Client>> connect_service(std::string endpoint, std::string service);

}  // namespace mc::rpc::detail
