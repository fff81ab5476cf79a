#pragma once
/// The "never block a runtime thread" check.
///
/// A runtime thread runs one `io_context`; while it blocks (a condition
/// variable, a future, `runtime::block_on`, a sleep, synchronous file I/O),
/// every coroutine, timer and connection scheduled on it stalls. Code that is
/// about to block calls `assert_may_block("what")` first. In checked builds
/// (debug, debugoptimized and sanitizer builds; meson option `blocking_check`,
/// default `auto` = on unless `--buildtype=release`), a call from a runtime
/// thread prints
///
///   mc::runtime: blocking call 'WHAT' on runtime thread I (tid T) ...
///
/// to stderr and aborts (SIGABRT), so the bug is found by the first test that
/// reaches it instead of as a stall under load. In release builds the check
/// compiles to a thread-local read and nothing else.
///
/// `blocking_scope` allow-lists a region for the rare legitimate case (for
/// example start-up code that runs on a runtime thread before the runtime
/// serves anything). Every use must say why in a comment.
#include <cstddef>

namespace mc::runtime {

/// Whether this build aborts on a blocking call from a runtime thread.
/// Thread-safe; constant for the life of the process.
bool blocking_check_enabled() noexcept;

/// Declares that the caller is about to block. `what` names the primitive
/// (e.g. "mc::transfer::engine::stop"); it must be a string literal or
/// otherwise outlive the call. Returns normally on a non-runtime thread,
/// inside a `blocking_scope`, or when the check is compiled out; otherwise
/// prints the message naming `what` and the thread, and aborts. Thread-safe.
void assert_may_block(const char* what) noexcept;

/// True when the calling thread may block (not a runtime thread, or inside a
/// `blocking_scope`). Independent of whether the check is enabled. Thread-safe.
bool may_block() noexcept;

/// RAII allow-list: while alive, `assert_may_block` on this thread passes.
/// Nests. Not movable; must be destroyed on the thread that created it.
class blocking_scope {
 public:
  /// `why` documents the exception; kept for the abort message of nested misuse.
  explicit blocking_scope(const char* why) noexcept;
  ~blocking_scope();
  blocking_scope(const blocking_scope&) = delete;
  blocking_scope& operator=(const blocking_scope&) = delete;

 private:
  const char* previous_why_;
};

}  // namespace mc::runtime
