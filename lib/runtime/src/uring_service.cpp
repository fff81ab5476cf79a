// One io_uring per io_context: submission, eventfd-driven completion,
// cancellation, lazily synchronised fixed buffers.
#include "uring_detail.hpp"

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/query.hpp>

#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace mc::runtime::detail {

namespace asio = boost::asio;

namespace {
constexpr unsigned ring_entries = 256;
constexpr std::uint64_t cancel_tag = 0;  // user_data of cancel SQEs
}  // namespace

asio::execution_context::id ring_service::id;

ring_service::ring_service(asio::execution_context& ctx) : asio::execution_context::service(ctx) {}

ring_service::~ring_service() { shutdown(); }

result<ring_service*> ring_service::for_executor(const mc::executor& ex) {
  auto& ctx = asio::query(ex, asio::execution::context);
  auto& svc = asio::use_service<ring_service>(ctx);
  if (!svc.ring_ok_) {
    if (auto r = svc.setup(ex); !r) return r.error();
  }
  return &svc;
}

result<void> ring_service::setup(const mc::executor& ex) {
  io_uring_params p{};
  p.flags = IORING_SETUP_CQSIZE;
  p.cq_entries = ring_entries * 4;
  int rc = io_uring_queue_init_params(ring_entries, &ring_, &p);
  if (rc < 0) return record_errno(-rc, "io_uring_queue_init", "creating the thread's ring");
  efd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (efd_ < 0) {
    int e = errno;
    io_uring_queue_exit(&ring_);
    return record_errno(e, "eventfd", "creating the ring's eventfd");
  }
  rc = io_uring_register_eventfd(&ring_, efd_);
  if (rc < 0) {
    ::close(efd_);
    efd_ = -1;
    io_uring_queue_exit(&ring_);
    return record_errno(-rc, "io_uring_register_eventfd", "registering the eventfd");
  }
  fixed_ok_ = io_uring_register_buffers_sparse(&ring_, max_fixed_slots) == 0;
  desc_ = std::make_unique<asio::posix::stream_descriptor>(ex, efd_);
  ring_ok_ = true;
  return {};
}

void ring_service::shutdown() {
  if (!ring_ok_) return;
  ring_ok_ = false;
  // The kernel may still write into buffers of in-flight operations: wait for
  // every CQE before anything (coroutine frames, buffers) can be destroyed.
  io_uring_submit(&ring_);
  while (pending_cqes_ > 0) {
    io_uring_cqe* cqe = nullptr;
    int rc = io_uring_wait_cqe(&ring_, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0) break;
    auto ud = io_uring_cqe_get_data64(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    --pending_cqes_;
    if (ud != cancel_tag) {
      auto* o = reinterpret_cast<op_base*>(ud);
      o->complete(o, res, false);
    }
  }
  if (desc_) {
    desc_->release();  // we close efd_ ourselves
    desc_.reset();
  }
  io_uring_queue_exit(&ring_);
  if (efd_ >= 0) ::close(efd_);
  efd_ = -1;
}

template <class Handler>
struct ring_service::op : ring_service::op_base {
  explicit op(Handler&& h) : handler(std::move(h)), slot(asio::get_associated_cancellation_slot(handler)) {
    complete = &do_complete;
  }
  static void do_complete(op_base* b, int res, bool invoke) {
    auto* self = static_cast<op*>(b);
    if (self->slot.is_connected()) self->slot.clear();
    Handler h(std::move(self->handler));
    delete self;
    if (invoke) std::move(h)(res);
  }
  Handler handler;
  asio::cancellation_slot slot;
};

task<int> ring_service::submit_rw(op_kind kind, int fd, void* buf, unsigned len, std::uint64_t offset) {
  return asio::async_initiate<decltype(asio::use_awaitable), void(int)>(
      [this, kind, fd, buf, len, offset](auto handler) {
        using H = decltype(handler);
        auto* o = new op<H>(std::move(handler));
        if (o->slot.is_connected()) {
          o->slot.assign([this, o](asio::cancellation_type t) {
            if (t != asio::cancellation_type::none) request_cancel(o);
          });
        }
        start(o, kind, fd, buf, len, offset);
      },
      asio::use_awaitable);
}

io_uring_sqe* ring_service::get_sqe() {
  auto* sqe = io_uring_get_sqe(&ring_);
  if (!sqe) {
    ++stats.submit_calls;
    io_uring_submit(&ring_);
    sqe = io_uring_get_sqe(&ring_);
  }
  return sqe;
}

void ring_service::start(op_base* o, op_kind kind, int fd, void* buf, unsigned len, std::uint64_t offset) {
  auto* sqe = get_sqe();
  if (!sqe) {  // cannot happen after a submit freed the SQ; fail the op, never crash
    asio::post(desc_->get_executor(), [o] { o->complete(o, -EAGAIN, true); });
    return;
  }
  int idx = fixed_index(buf, len);
  if (idx >= 0) {
    if (kind == op_kind::read)
      io_uring_prep_read_fixed(sqe, fd, buf, len, offset, idx);
    else
      io_uring_prep_write_fixed(sqe, fd, buf, len, offset, idx);
    ++stats.fixed_ops;
  } else {
    if (kind == op_kind::read)
      io_uring_prep_read(sqe, fd, buf, len, offset);
    else
      io_uring_prep_write(sqe, fd, buf, len, offset);
    ++stats.plain_ops;
  }
  io_uring_sqe_set_data64(sqe, reinterpret_cast<std::uint64_t>(o));
  ++pending_cqes_;
  // Inside a completion round the coroutines resumed by it queue their next
  // operations; on_ready submits them all with one system call.
  if (!in_round_) submit_now();
  arm();
}

void ring_service::submit_now() {
  ++stats.submit_calls;
  int rc;
  do rc = io_uring_submit(&ring_);
  while (rc == -EINTR);
  // EAGAIN/EBUSY (kernel short of resources, CQ overflow) leave the SQEs
  // queued: retry after the handlers already queued on this thread ran (they
  // include the completion round that reaps the CQ).
  if ((rc == -EAGAIN || rc == -EBUSY) && !retry_posted_ && desc_) {
    retry_posted_ = true;
    asio::post(desc_->get_executor(), [this] {
      retry_posted_ = false;
      if (ring_ok_ && io_uring_sq_ready(&ring_) > 0) submit_now();
    });
  }
}

void ring_service::request_cancel(op_base* o) {
  if (!ring_ok_) return;
  auto* sqe = get_sqe();
  if (!sqe) return;
  io_uring_prep_cancel64(sqe, reinterpret_cast<std::uint64_t>(o), 0);
  io_uring_sqe_set_data64(sqe, cancel_tag);
  ++pending_cqes_;
  ++stats.cancels;
  submit_now();
  arm();
}

void ring_service::arm() {
  if (armed_ || pending_cqes_ == 0 || !desc_) return;
  armed_ = true;
  desc_->async_wait(asio::posix::stream_descriptor::wait_read, [this](boost::system::error_code ec) {
    armed_ = false;
    if (ec) return;  // descriptor closed: the context is shutting down
    on_ready();
  });
}

void ring_service::on_ready() {
  std::uint64_t counter;
  while (::read(efd_, &counter, sizeof counter) < 0 && errno == EINTR) {}
  struct done_t {
    op_base* o;
    int res;
  };
  std::vector<done_t> done;
  io_uring_cqe* cqe = nullptr;
  unsigned head, seen = 0;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    ++seen;
    auto ud = io_uring_cqe_get_data64(cqe);
    if (ud != cancel_tag) done.push_back({reinterpret_cast<op_base*>(ud), cqe->res});
  }
  io_uring_cq_advance(&ring_, seen);
  pending_cqes_ -= seen;
  if (io_uring_sq_ready(&ring_) > 0) submit_now();
  arm();
  // Complete after the ring's state is consistent: handlers resume coroutines
  // (inline) that may start operations again; those are submitted together.
  struct round_guard {
    ring_service* self;
    ~round_guard() {
      self->in_round_ = false;
      if (self->ring_ok_ && io_uring_sq_ready(&self->ring_) > 0) self->submit_now();
    }
  };
  in_round_ = true;
  round_guard g{this};
  for (auto& d : done) d.o->complete(d.o, d.res, true);
}

int ring_service::fixed_index(const void* buf, std::size_t len) {
  if (!fixed_ok_) return -1;
  auto& reg = fixed_registry::instance();
  if (reg.version() != synced_version_) sync_registry();
  auto h = reg.find(buf, len);
  if (h.index < 0) return -1;
  auto i = static_cast<unsigned>(h.index);
  if (ring_gen_[i] == h.s.gen) return h.index;
  if (failed_gen_[i] == h.s.gen) return -1;
  iovec iov{h.s.base, h.s.len};
  int rc = io_uring_register_buffers_update_tag(&ring_, i, &iov, nullptr, 1);
  if (rc < 0) {
    failed_gen_[i] = h.s.gen;
    ++stats.register_failures;
    return -1;
  }
  ring_gen_[i] = h.s.gen;
  return h.index;
}

void ring_service::sync_registry() {
  auto& reg = fixed_registry::instance();
  synced_version_ = reg.version();
  for (unsigned i = 0; i < max_fixed_slots; ++i) {
    if (ring_gen_[i] == 0) continue;
    if (reg.get(i).gen == ring_gen_[i]) continue;
    iovec iov{nullptr, 0};  // unpin what is no longer registered
    io_uring_register_buffers_update_tag(&ring_, i, &iov, nullptr, 1);
    ring_gen_[i] = 0;
  }
}

}  // namespace mc::runtime::detail
