#pragma once
// Startup helpers shared by the node binaries.
#include <csignal>
#include <pthread.h>

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

}  // namespace mc::apps
