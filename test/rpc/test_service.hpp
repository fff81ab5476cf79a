#pragma once
// Test service implementations (shared by the unit tests and rpc_test_server).
#include "mc/rpc/capnp.hpp"
#include "test_service.capnp.h"

#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <cstdint>

namespace mc::rpc::test {

/// Process-wide counters of hang() calls.
struct hang_counters {
  std::atomic<std::uint64_t> started{0};
  std::atomic<std::uint64_t> cancelled{0};
};
hang_counters& counters();

class test_service_impl final : public mc::rpc::service<TestService> {
 public:
  explicit test_service_impl(mc::executor ex);
  kj::Promise<void> echo(EchoContext ctx) override;
  kj::Promise<void> fail(FailContext ctx) override;
  kj::Promise<void> hang(HangContext ctx) override;
  kj::Promise<void> sleep(SleepContext ctx) override;
  kj::Promise<void> throwStd(ThrowStdContext ctx) override;
  kj::Promise<void> waitCancelled(WaitCancelledContext ctx) override;
  kj::Promise<void> stats(StatsContext ctx) override;

 private:
  mc::task<mc::result<void>> do_echo(EchoContext ctx);
  mc::task<mc::result<void>> do_fail(FailContext ctx);
  mc::task<mc::result<void>> do_hang();
  mc::task<mc::result<void>> do_sleep(SleepContext ctx);
  mc::task<mc::result<void>> do_throw();
  mc::task<mc::result<void>> do_wait_cancelled(WaitCancelledContext ctx);

  std::uint64_t cancelled_here_ = 0;        // hang() cancellations on this thread
  boost::asio::steady_timer cancel_event_;  // cancelled on each such cancellation
};

class other_service_impl final : public mc::rpc::service<OtherService> {
 public:
  using service::service;
  kj::Promise<void> name(NameContext ctx) override;
};

/// Registers "test" and "other" on `srv`.
void add_test_services(mc::rpc::server& srv);

}  // namespace mc::rpc::test
