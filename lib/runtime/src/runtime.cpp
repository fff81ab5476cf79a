#include "mc/runtime/runtime.hpp"

#include "mc/runtime/blocking.hpp"

#include <boost/asio/executor_work_guard.hpp>

#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#ifndef MC_BLOCKING_CHECK
#define MC_BLOCKING_CHECK 0
#endif

namespace mc::runtime {
namespace {
thread_local int tls_index = -1;
thread_local runtime* tls_runtime = nullptr;
thread_local int tls_allow_blocking = 0;           // nesting depth of blocking_scope
thread_local const char* tls_allow_why = nullptr;  // innermost scope's reason
}  // namespace

bool blocking_check_enabled() noexcept { return MC_BLOCKING_CHECK != 0; }

bool may_block() noexcept { return tls_index < 0 || tls_allow_blocking > 0; }

void assert_may_block(const char* what) noexcept {
  if constexpr (MC_BLOCKING_CHECK != 0) {
    if (may_block()) return;
    std::fprintf(stderr,
                 "mc::runtime: blocking call '%s' on runtime thread %d (tid %ld): a runtime thread must "
                 "never block; co_await the asynchronous form instead (mc/runtime/blocking.hpp)\n",
                 what ? what : "?", tls_index, static_cast<long>(::gettid()));
    std::fflush(stderr);
    std::abort();
  } else {
    (void)what;
  }
}

blocking_scope::blocking_scope(const char* why) noexcept : previous_why_(tls_allow_why) {
  ++tls_allow_blocking;
  tls_allow_why = why;
}

blocking_scope::~blocking_scope() {
  --tls_allow_blocking;
  tls_allow_why = previous_why_;
}

runtime::runtime(std::size_t threads) {
  if (threads == 0) throw std::invalid_argument("runtime: thread count must be >= 1");
  for (std::size_t i = 0; i < threads; ++i) contexts_.push_back(std::make_unique<boost::asio::io_context>(1));
}

runtime::~runtime() { stop(); }

void runtime::start() {
  if (!threads_.empty()) return;
  guards_.clear();
  for (std::size_t i = 0; i < contexts_.size(); ++i) {
    contexts_[i]->restart();
    guards_.push_back(std::make_unique<guard_t>(contexts_[i]->get_executor()));
  }
  for (std::size_t i = 0; i < contexts_.size(); ++i) threads_.emplace_back([this, i] { thread_main(i); });
}

void runtime::stop() {
  if (threads_.empty()) return;
  guards_.clear();
  for (auto& c : contexts_) c->stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void runtime::check_block_on() const {
  assert_may_block("mc::runtime::runtime::block_on");
  // Unchecked builds: waiting on our own runtime from one of its threads can
  // deadlock (always, when it is the target thread); refuse it in every build.
  if (tls_runtime == this && tls_allow_blocking == 0)
    throw std::logic_error("mc::runtime::runtime::block_on called on one of its own threads");
}

void runtime::thread_main(std::size_t i) {
  tls_index = static_cast<int>(i);
  tls_runtime = this;
  // "mc-rt-<index>" in top -H, perf and /proc/<pid>/task/*/comm (at most 15 characters).
  char name[16];
  std::snprintf(name, sizeof name, "mc-rt-%zu", i % 1000);
  ::pthread_setname_np(::pthread_self(), name);
  try {
    contexts_[i]->run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mc::runtime: thread %zu: uncaught exception: %s\n", i, e.what());
    std::terminate();
  }
  tls_index = -1;
  tls_runtime = nullptr;
}

int runtime::current_index() noexcept { return tls_index; }
runtime* runtime::current() noexcept { return tls_runtime; }

}  // namespace mc::runtime
