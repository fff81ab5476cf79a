// Running prepared calls: synchronously (GIL released) or through asyncio.
#include "prepared.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace mc::python {

py::object run_sync(store_session& s, prepared& p) {
  bool ran = false;
  {
    py::gil_scoped_release release;
    ran = s.run(p.make);
  }
  return ran ? p.finish() : p.unusable();
}

completion_queue::completion_queue() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
}

completion_queue::~completion_queue() {
  // Finishing callbacks may hold Python buffers: they are released with the
  // GIL only. The last owner is normally Python; if an operation outlived its
  // event loop, the node's thread drops the queue last: leak them then.
  if (PyGILState_Check())
    done_.clear();
  else
    new auto(std::move(done_));  // intentionally leaked
  if (fd_ >= 0) ::close(fd_);
}

void completion_queue::push(std::uint64_t id, std::function<py::object()> finish) {
  {
    std::lock_guard lk(mu_);
    done_.emplace_back(id, std::move(finish));
  }
  std::uint64_t one = 1;
  // Non-blocking: EAGAIN only when the counter is near 2^64, and then the
  // loop is already woken.
  [[maybe_unused]] auto w = ::write(fd_, &one, sizeof one);
}

py::list completion_queue::drain() {
  std::uint64_t count = 0;
  [[maybe_unused]] auto r = ::read(fd_, &count, sizeof count);  // EAGAIN when nothing was written
  std::vector<std::pair<std::uint64_t, std::function<py::object()>>> done;
  {
    std::lock_guard lk(mu_);
    done.swap(done_);
  }
  py::list out;
  for (auto& [id, finish] : done) out.append(py::make_tuple(id, finish()));
  return out;
}

namespace {

/// The Python-visible handle of an asynchronous call.
struct op_handle {
  std::shared_ptr<async_op> op;
  void cancel() {
    if (op) op->cancel();
  }
};

}  // namespace

py::object run_async(store_session& s, prepared& p, std::shared_ptr<completion_queue> q, std::uint64_t id) {
  // `finish` travels to the queue without ever being destroyed off the GIL:
  // the completion moves it into the queue, whose owner drains it.
  auto finish = std::make_shared<std::function<py::object()>>(std::move(p.finish));
  std::shared_ptr<async_op> op;
  {
    py::gil_scoped_release release;
    op = s.spawn(p.make, [q, id, finish]() mutable { q->push(id, std::move(*finish)); });
  }
  if (!op) return py::none();
  return py::cast(op_handle{std::move(op)});
}

void bind_async(py::module_& m) {
  py::class_<op_handle>(m, "_AsyncOp").def("cancel", &op_handle::cancel);
  py::class_<completion_queue, std::shared_ptr<completion_queue>>(m, "_CompletionQueue")
      .def(py::init<>())
      .def("fileno", &completion_queue::fileno)
      .def("drain", &completion_queue::drain);
}

}  // namespace mc::python
