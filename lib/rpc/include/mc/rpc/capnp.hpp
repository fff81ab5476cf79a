#pragma once
/// The Cap'n Proto face of mc::rpc, for service implementers and callers.
/// Exposes capnp/KJ types, so include it only from .cpp files that implement
/// or call a service (never from another component's public header).
///
/// Threads: every object here belongs to the runtime thread that created it
/// (capabilities, responses, promises). Use them only on that thread.
#include "mc/rpc/call_options.hpp"
#include "mc/rpc/client.hpp"
#include "mc/rpc/detail/bridge.hpp"
#include "mc/rpc/method_stats.hpp"
#include "mc/rpc/server.hpp"

#include <capnp/capability.h>
#include <capnp/schema.h>

#include <chrono>

#include <functional>
#include <string>
#include <utility>

namespace mc::rpc {

namespace detail {
/// The method_stats slot of the method whose params/results struct is `T`.
template <class T>
method_counters& method_slot_of(call_side side) {
  return method_slot(method_from_display_name(capnp::Schema::from<T>().getProto().getDisplayName().cStr()), side);
}

/// Runs `body` and records its latency and outcome in `slot`.
inline mc::task<mc::result<void>> timed_serving(mc::task<mc::result<void>> body, method_counters& slot) {
  auto t0 = std::chrono::steady_clock::now();
  bool ok = false;
  try {
    auto r = co_await std::move(body);
    ok = r.has_value();
    slot.record(std::chrono::steady_clock::now() - t0, ok);
    co_return r;
  } catch (...) {
    if (!ok) slot.record(std::chrono::steady_clock::now() - t0, false);
    throw;
  }
}
}  // namespace detail

/// Makes the capability of one service for one serving thread. Runs on that
/// thread, with that thread's executor (pass it to your service object so its
/// coroutines run there).
class service_factory {
 public:
  using function = std::function<capnp::Capability::Client(mc::executor)>;
  /// Gets the connection the service will answer (its peer's address).
  using connection_function = std::function<capnp::Capability::Client(mc::executor, const connection_info&)>;
  service_factory(function f) : make_(std::move(f)) {}  // NOLINT: implicit on purpose
  /// A factory that runs once per connection (on its serving thread), so the
  /// service object knows which peer it serves.
  static service_factory per_connection(connection_function f) {
    service_factory s(function{});
    s.make_conn_ = std::move(f);
    return s;
  }
  bool is_per_connection() const noexcept { return static_cast<bool>(make_conn_); }
  capnp::Capability::Client operator()(mc::executor ex) const { return make_(std::move(ex)); }
  capnp::Capability::Client operator()(mc::executor ex, const connection_info& c) const {
    return make_conn_ ? make_conn_(std::move(ex), c) : make_(std::move(ex));
  }

 private:
  function make_;
  connection_function make_conn_;
};

/// Factory for `Impl`, constructed as Impl(executor, args...) on each serving thread.
template <class Impl, class... Args>
service_factory make_service(Args... args) {
  return service_factory(
      [=](mc::executor ex) -> capnp::Capability::Client { return kj::heap<Impl>(std::move(ex), args...); });
}

/// Per-connection factory for `Impl`, constructed as
/// Impl(executor, connection_info, args...) for each connection.
template <class Impl, class... Args>
service_factory make_connection_service(Args... args) {
  return service_factory::per_connection([=](mc::executor ex, const connection_info& c) -> capnp::Capability::Client {
    return kj::heap<Impl>(std::move(ex), c, args...);
  });
}

/// Serves one call with a coroutine: allows cancellation, runs `body` on `ex`
/// (the executor the factory received; it must be the calling thread's), and
/// completes the call with its result. An mc error travels as a KJ exception
/// "mc:NAME: message" and comes back to the caller as the same errc; an
/// exception thrown by `body` comes back as errc::rpc_fail. When the caller
/// drops the call (timeout, cancellation, disconnect) `body` receives terminal
/// cancellation. `ctx` stays valid until `body` finishes (results written after
/// a cancellation are discarded). While the server drains, new calls fail with
/// errc::shutting_down. `keepalive` (e.g. thisCap()) keeps the service object
/// alive until `body` ends; prefer mc::rpc::service<Iface>::serve, which does it.
template <class Params, class Results>
kj::Promise<void> serve(capnp::CallContext<Params, Results>& ctx, mc::executor ex, mc::task<mc::result<void>> body,
                        kj::Maybe<capnp::Capability::Client> keepalive = nullptr) {
  ctx.allowCancellation();
  if (method_stats_enabled()) {
    static method_counters& slot = detail::method_slot_of<Params>(call_side::server);
    body = detail::timed_serving(std::move(body), slot);
  }
  return detail::spawn_serving(detail::context_hook(ctx), std::move(ex), std::move(body), kj::mv(keepalive));
}

/// Convenience base of a service implementation:
///   class my_impl final : public mc::rpc::service<MyIface> {
///    public:
///     using service::service;
///     kj::Promise<void> get(GetContext ctx) override { return serve(ctx, do_get(ctx)); }
///    private:
///     mc::task<mc::result<void>> do_get(GetContext ctx);
///   };
/// serve() keeps `*this` alive until the coroutine ends.
template <class Iface>
class service : public Iface::Server {
 public:
  explicit service(mc::executor ex) : ex_(std::move(ex)) {}

 protected:
  const mc::executor& executor() const noexcept { return ex_; }

  template <class Params, class Results>
  kj::Promise<void> serve(capnp::CallContext<Params, Results>& ctx, mc::task<mc::result<void>> body) {
    return mc::rpc::serve(ctx, ex_, std::move(body), this->thisCap());
  }

 private:
  mc::executor ex_;
};

/// Returns the capability of `service_name` at `endpoint` ("host:port",
/// "[v6]:port"), using the calling thread's bounded connection cache
/// (connecting, or reconnecting after a failure, when needed). Errors:
/// errc::rpc_fail (connect failed/refused, bad endpoint), errc::timeout
/// (connect_timeout), errc::unsupported (no such service), errc::shutting_down.
/// The client is usable on this thread only; if its connection is evicted or
/// breaks, calls fail with rpc_fail and the next connect() reconnects, so
/// connect() per call (a cache hit) is the intended pattern.
template <class Iface>
mc::task<mc::result<typename Iface::Client>> connect(std::string endpoint, std::string service_name) {
  auto cap = co_await detail::connect_service(std::move(endpoint), std::move(service_name));
  if (!cap) co_return cap.error();
  co_return cap->template castAs<Iface>();
}

/// Awaits a sent request: `co_await call(req.send())`. Errors: errc::timeout
/// (deadline expired; the call is cancelled on the server), the remote mc
/// error code, errc::rpc_fail (disconnect or any other failure; the broken
/// connection leaves the cache), errc::cancelled (caller cancelled),
/// errc::shutting_down (thread RPC state destroyed).
template <class T>
mc::task<mc::result<capnp::Response<T>>> call(capnp::RemotePromise<T>&& p,
                                              mc::duration timeout = default_call_timeout) {
  kj::Promise<capnp::Response<T>> promise = kj::mv(p);
  const bool timed = method_stats_enabled();
  const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  auto o = co_await detail::await(kj::mv(promise), timeout);
  if (timed) {
    static method_counters& slot = detail::method_slot_of<T>(call_side::client);
    slot.record(std::chrono::steady_clock::now() - t0, o.value.has_value());
  }
  if (o.value) co_return std::move(*o.value);
  if (o.error) co_return mc::fail(detail::from_kj_exception(*o.error));
  detail::set_last_error(mc::error_message(o.local));
  co_return mc::fail(o.local);
}

template <class T>
mc::task<mc::result<capnp::Response<T>>> call(capnp::RemotePromise<T>&& p, const call_options& opts) {
  return call(kj::mv(p), opts.timeout);
}

/// Awaits any kj::Promise<T> (T non-void) on the calling thread; KJ failures map like call().
template <class T>
mc::task<mc::result<T>> await_promise(kj::Promise<T> p, mc::duration timeout = default_call_timeout) {
  auto o = co_await detail::await(kj::mv(p), timeout);
  if (o.value) co_return std::move(*o.value);
  if (o.error) co_return mc::fail(detail::from_kj_exception(*o.error));
  co_return mc::fail(o.local);
}

}  // namespace mc::rpc
