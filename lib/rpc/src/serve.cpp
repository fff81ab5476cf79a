// Running a service method as a coroutine on the runtime thread.
#include "mc/rpc/detail/bridge.hpp"
#include "thread_context.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>

namespace mc::rpc::detail {

namespace {

struct serve_state final : serving_call {
  kj::Own<kj::PromiseFulfiller<void>> fulfiller;
  kj::Own<capnp::CallContextHook> context;
  kj::Maybe<capnp::Capability::Client> keepalive;
  boost::asio::cancellation_signal signal;  // lives as long as the coroutine (asio#1332)
  bool done = false;
  bool registered = false;

  ~serve_state() noexcept override {}

  void release_kj() noexcept override {
    registered = false;  // the thread context is going away
    fulfiller = nullptr;
    context = nullptr;
    keepalive = nullptr;
  }
};

}  // namespace

kj::Promise<void> spawn_serving(capnp::CallContextHook& context, mc::executor ex, mc::task<mc::result<void>> body,
                                kj::Maybe<capnp::Capability::Client> keepalive) {
  auto& tc = thread_context::current();
  auto st = std::make_shared<serve_state>();
  if (!tc.enter_call(st.get())) return to_kj_exception(mc::fail(mc::errc::shutting_down));
  st->registered = true;
  auto paf = kj::newPromiseAndFulfiller<void>();
  st->fulfiller = kj::mv(paf.fulfiller);
  st->context = context.addRef();
  st->keepalive = kj::mv(keepalive);

  boost::asio::co_spawn(
      ex, std::move(body),
      boost::asio::bind_cancellation_slot(st->signal.slot(), [st](std::exception_ptr e, mc::result<void> r) {
        st->done = true;
        kj_turn_here here;  // the reply goes out in this handler, not a posted run
        if (st->fulfiller && st->fulfiller->isWaiting()) {
          if (e)
            st->fulfiller->reject(to_kj_exception(e));
          else if (!r)
            st->fulfiller->reject(to_kj_exception(r.error()));
          else
            st->fulfiller->fulfill();
        }
        if (st->registered) {
          st->registered = false;
          st->release_kj();
          if (auto* c = thread_context::find()) c->leave_call(st.get());
        }
        here.run();
      }));

  return paf.promise.attach(kj::defer([st, ex]() mutable {
    st->fulfiller = nullptr;
    if (st->done) return;
    // The caller dropped the call. Emit only from the coroutine's own executor
    // and only while it still runs (asio#1332).
    boost::asio::post(ex, [st] {
      if (!st->done) st->signal.emit(boost::asio::cancellation_type::terminal);
    });
  }));
}

}  // namespace mc::rpc::detail
