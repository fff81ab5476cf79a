#pragma once
/// Shutdown gate: work enters while open; close() refuses new work and waits
/// for what is in flight.
#include "mc/runtime/task.hpp"

#include <boost/asio/any_completion_handler.hpp>

#include <cstddef>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace mc {

class gate;

/// Proof of entry; leaving happens on destruction. Move-only.
class [[nodiscard]] gate_holder {
 public:
  gate_holder() = default;
  explicit gate_holder(gate* g) noexcept : g_(g) {}
  gate_holder(gate_holder&& o) noexcept : g_(std::exchange(o.g_, nullptr)) {}
  gate_holder& operator=(gate_holder&& o) noexcept;
  ~gate_holder() { leave(); }
  void leave() noexcept;
  explicit operator bool() const noexcept { return g_ != nullptr; }

 private:
  gate* g_ = nullptr;
};

/// Thread-safe. Must outlive its holders.
class gate {
 public:
  gate() = default;
  gate(const gate&) = delete;
  gate& operator=(const gate&) = delete;

  /// Enters unless closed; an empty holder means "shutting down".
  gate_holder try_enter();
  /// Closes the gate and completes when every holder has left (immediately
  /// if none). May be awaited by several coroutines.
  task<void> close();
  bool closed() const;
  std::size_t in_flight() const;

 private:
  friend class gate_holder;
  using handler_t = boost::asio::any_completion_handler<void()>;
  void leave() noexcept;

  mutable std::mutex m_;
  std::size_t count_ = 0;
  bool closed_ = false;
  struct waiter {
    handler_t handler;
    mc::executor ex;
  };
  std::vector<waiter> waiters_;
};

}  // namespace mc
