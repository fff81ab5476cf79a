#include "mc/runtime/runtime.hpp"

#include <boost/asio/executor_work_guard.hpp>

#include <cstdio>
#include <stdexcept>

namespace mc::runtime {
namespace {
thread_local int tls_index = -1;
thread_local runtime* tls_runtime = nullptr;
}  // namespace

runtime::runtime(std::size_t threads) {
  if (threads == 0) throw std::invalid_argument("runtime: thread count must be >= 1");
  for (std::size_t i = 0; i < threads; ++i)
    contexts_.push_back(std::make_unique<boost::asio::io_context>(1));
}

runtime::~runtime() { stop(); }

void runtime::start() {
  if (!threads_.empty()) return;
  guards_.clear();
  for (std::size_t i = 0; i < contexts_.size(); ++i) {
    contexts_[i]->restart();
    guards_.push_back(std::make_unique<guard_t>(contexts_[i]->get_executor()));
  }
  for (std::size_t i = 0; i < contexts_.size(); ++i)
    threads_.emplace_back([this, i] { thread_main(i); });
}

void runtime::stop() {
  if (threads_.empty()) return;
  guards_.clear();
  for (auto& c : contexts_) c->stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void runtime::thread_main(std::size_t i) {
  tls_index = static_cast<int>(i);
  tls_runtime = this;
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
