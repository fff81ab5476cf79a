#pragma once
/// Shutdown gate: work enters while open; close() refuses new work and waits
/// for what is in flight. Built on waiter_queue.
#include "mc/runtime/task.hpp"
#include "mc/runtime/waiter_queue.hpp"

#include <cstddef>
#include <utility>

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
  /// Leaves now (idempotent); may be called on any thread.
  void leave() noexcept;
  explicit operator bool() const noexcept { return g_ != nullptr; }

 private:
  gate* g_ = nullptr;
};

/// Thread-safe. Must outlive its holders and every pending close().
class gate {
 public:
  gate() = default;
  gate(const gate&) = delete;
  gate& operator=(const gate&) = delete;

  /// Enters unless closed; an empty holder means "shutting down".
  gate_holder try_enter();
  /// Closes the gate and completes when every holder has left, resuming on
  /// the caller's executor; never inline, even when nothing is in flight
  /// (the completion is posted). May be awaited by several
  /// coroutines. Not cut short by cancellation: it returns only once nothing
  /// is in flight.
  task<void> close();
  /// Snapshots.
  bool closed() const;
  std::size_t in_flight() const;

 private:
  friend class gate_holder;
  void leave() noexcept;

  waiter_queue q_;  // the closers; its lock guards count_ and closed_ too
  std::size_t count_ = 0;
  bool closed_ = false;
};

}  // namespace mc
