#pragma once
/// One Python call, prepared once and run either synchronously (the GIL
/// released while the node works) or through the asyncio bridge. Internal to
/// the extension module.
#include "session.hpp"

#include <pybind11/pybind11.h>

#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace mc::python {

namespace py = pybind11;

/// The error every call returns when the store is not set up, closed, or
/// inherited across fork(): Mooncake's answer for an uninitialised client.
inline constexpr int not_ready = static_cast<int>(errc::invalid_params);

/// What a Python method does, split at the GIL boundary:
/// - `make` builds the coroutine (no Python objects; runs without the GIL);
/// - `finish` turns its stored outcome into the Python result (GIL held);
/// - `unusable` is the result when the session cannot run it.
/// Python buffers the coroutine reads or writes are kept alive by `finish`
/// (captured py::buffer_info), which is only ever destroyed with the GIL held.
struct prepared {
  std::function<task<void>(store_session::node&)> make;
  std::function<py::object()> finish;
  std::function<py::object()> unusable;
};

/// Stores the value of `t` in `*out`.
template <class T>
task<void> assign(task<T> t, std::shared_ptr<T> out) {
  *out = co_await std::move(t);
}

/// Runs `p` on `s`, blocking this thread with the GIL released.
py::object run_sync(store_session& s, prepared& p);

/// Completions of asynchronous calls for one asyncio event loop: the node's
/// threads push (never blocking: a short mutex and an eventfd write), the
/// loop's reader callback drains with the GIL held.
class completion_queue {
 public:
  completion_queue();
  ~completion_queue();
  completion_queue(const completion_queue&) = delete;
  completion_queue& operator=(const completion_queue&) = delete;
  /// The eventfd the loop watches (readable when completions are queued).
  int fileno() const noexcept { return fd_; }
  /// Called on a runtime thread: queues `finish` under `id` and wakes the loop.
  void push(std::uint64_t id, std::function<py::object()> finish);
  /// GIL held: every queued completion as (id, result) pairs.
  py::list drain();

 private:
  int fd_ = -1;
  std::mutex mu_;
  std::vector<std::pair<std::uint64_t, std::function<py::object()>>> done_;
};

/// Starts `p` asynchronously; its completion is pushed to `q` under `id`.
/// Returns the operation (cancel()) or None when the session cannot run it
/// (then the caller resolves the future with p.unusable()).
py::object run_async(store_session& s, prepared& p, std::shared_ptr<completion_queue> q, std::uint64_t id);

/// Registers _CompletionQueue and _AsyncOp in `m`.
void bind_async(py::module_& m);
/// Registers MooncakeHostMemAllocator in `m`.
void bind_host_mem(py::module_& m);

}  // namespace mc::python
