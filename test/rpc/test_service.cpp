#include "test_service.hpp"

#include "mc/runtime/deadline.hpp"

#include <boost/asio/redirect_error.hpp>

#include <stdexcept>

namespace mc::rpc::test {

hang_counters& counters() {
  static hang_counters c;
  return c;
}

test_service_impl::test_service_impl(mc::executor ex) : service(ex), cancel_event_(ex, mc::time_point::max()) {}

kj::Promise<void> test_service_impl::echo(EchoContext ctx) { return serve(ctx, do_echo(ctx)); }
kj::Promise<void> test_service_impl::fail(FailContext ctx) { return serve(ctx, do_fail(ctx)); }
kj::Promise<void> test_service_impl::hang(HangContext ctx) { return serve(ctx, do_hang()); }
kj::Promise<void> test_service_impl::sleep(SleepContext ctx) { return serve(ctx, do_sleep(ctx)); }
kj::Promise<void> test_service_impl::throwStd(ThrowStdContext ctx) { return serve(ctx, do_throw()); }
kj::Promise<void> test_service_impl::waitCancelled(WaitCancelledContext ctx) {
  return serve(ctx, do_wait_cancelled(ctx));
}
kj::Promise<void> test_service_impl::stats(StatsContext ctx) {
  auto r = ctx.getResults();
  r.setStarted(counters().started.load());
  r.setCancelled(counters().cancelled.load());
  return kj::READY_NOW;
}

mc::task<mc::result<void>> test_service_impl::do_echo(EchoContext ctx) {
  ctx.getResults().setData(ctx.getParams().getData());
  co_return mc::result<void>{};
}

mc::task<mc::result<void>> test_service_impl::do_fail(FailContext ctx) {
  auto name = ctx.getParams().getName();
  co_return mc::fail(mc::errc_from_name(std::string_view(name.cStr(), name.size())));
}

mc::task<mc::result<void>> test_service_impl::do_hang() {
  ++counters().started;
  boost::asio::steady_timer forever(executor(), mc::time_point::max());
  boost::system::error_code ec;
  co_await forever.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
  // Only cancellation gets here.
  ++counters().cancelled;
  ++cancelled_here_;
  cancel_event_.cancel();
  co_return mc::fail(mc::errc::cancelled);
}

mc::task<mc::result<void>> test_service_impl::do_sleep(SleepContext ctx) {
  auto r = co_await mc::sleep_for(std::chrono::milliseconds(ctx.getParams().getMs()));
  if (!r) co_return r;
  ctx.getResults().setDone(true);
  co_return mc::result<void>{};
}

mc::task<mc::result<void>> test_service_impl::do_throw() {
  co_await boost::asio::post(executor(), boost::asio::use_awaitable);
  throw std::runtime_error("thrown by the test service");
}

mc::task<mc::result<void>> test_service_impl::do_wait_cancelled(WaitCancelledContext ctx) {
  auto at_least = ctx.getParams().getAtLeast();
  while (cancelled_here_ < at_least) {
    boost::system::error_code ec;
    co_await cancel_event_.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    auto cs = co_await boost::asio::this_coro::cancellation_state;
    if (cs.cancelled() != boost::asio::cancellation_type::none) co_return mc::fail(mc::errc::cancelled);
  }
  ctx.getResults().setCancelled(cancelled_here_);
  co_return mc::result<void>{};
}

kj::Promise<void> other_service_impl::name(NameContext ctx) {
  ctx.getResults().setName("other");
  return kj::READY_NOW;
}

void add_test_services(mc::rpc::server& srv) {
  srv.add_service("test", mc::rpc::make_service<test_service_impl>());
  srv.add_service("other", mc::rpc::make_service<other_service_impl>());
}

}  // namespace mc::rpc::test
