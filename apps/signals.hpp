#pragma once
// Startup helpers shared by the node binaries.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <pthread.h>
#include <thread>
#include <unistd.h>

namespace mc::apps {

/// Blocks SIGINT/SIGTERM in every thread started afterwards (sigwait gets them)
/// and ignores SIGPIPE. Call first thing in main().
inline void block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

/// Waits for SIGINT or SIGTERM; returns the signal.
inline int wait_for_stop_signal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

/// Waits up to `ms` milliseconds for SIGINT or SIGTERM; true if one arrived.
inline bool wait_for_stop_signal_for(long ms) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  timespec ts{ms / 1000, (ms % 1000) * 1000000};
  return sigtimedwait(&set, nullptr, &ts) > 0;
}

/// Bounds the shutdown that follows a stop signal: once armed, the process
/// exits with status 1 (after a message on stderr) when the shutdown has not
/// finished within `limit`, or at once on a second SIGINT/SIGTERM. The
/// shutdown paths are bounded by themselves (stop() of every component
/// completes within max(2 s, the RPC deadline) whatever the peers do); this
/// is the operator's guarantee that a bug there still cannot keep a node
/// from exiting. Disarmed by destruction. Construct after
/// block_stop_signals() (the watchdog thread takes the second signal with
/// sigtimedwait). Not thread-safe; one per process.
class shutdown_watchdog {
 public:
  shutdown_watchdog(const char* who, std::chrono::milliseconds limit)
      : thread_([this, who, limit] { watch(who, limit); }) {}
  ~shutdown_watchdog() {
    done_.store(true);
    thread_.join();
  }
  shutdown_watchdog(const shutdown_watchdog&) = delete;
  shutdown_watchdog& operator=(const shutdown_watchdog&) = delete;

 private:
  void watch(const char* who, std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!done_.load()) {
      if (std::chrono::steady_clock::now() >= until) {
        std::fprintf(stderr, "%s: shutdown did not finish within %lld ms: exiting now\n", who,
                     static_cast<long long>(limit.count()));
        std::fflush(stderr);
        ::_exit(1);
      }
      if (wait_for_stop_signal_for(50)) {
        std::fprintf(stderr, "%s: second stop signal during shutdown: exiting now\n", who);
        std::fflush(stderr);
        ::_exit(1);
      }
    }
  }
  std::atomic<bool> done_{false};
  std::thread thread_;
};

/// The shutdown bound of a node: max(2 s, the RPC deadline) plus a margin for
/// the steps that run one after the other (HTTP, RPC server, engine).
inline std::chrono::milliseconds shutdown_limit(std::chrono::steady_clock::duration rpc_timeout) {
  using namespace std::chrono;
  return duration_cast<milliseconds>(std::max<steady_clock::duration>(seconds(2), rpc_timeout)) + seconds(3);
}

}  // namespace mc::apps
