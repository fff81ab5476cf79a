// The RPC byte stream over an RC queue pair (SEND/RECV with immediate data).
//
// Each side posts `recv_slots` receive buffers of `chunk_bytes` and grants the
// peer `data_credits` of them; one SEND carries up to chunk_bytes of stream
// data and uses one credit. Immediate data (network order) = kind << 30 |
// credits returned: a consumed receive buffer is reposted and its credit rides
// back on the next message, or on a zero-length "credit" message once half of
// the credits are owed. The spare receive buffers absorb those credit
// messages and the shutdownWrite "fin"; rnr_retry = 7 (retry forever) covers
// the rare moment where one arrives before its buffer was reposted.
// Completions arrive through a completion channel whose fd the runtime awaits
// (reactive, like asio_stream): no polling thread, no KJ buffer is ever handed
// to the NIC (data is copied into / out of the registered slots). The
// handshake and the process's device: rdma_handshake.cpp.
#include "rdma_stream.hpp"

#include <boost/asio/posix/stream_descriptor.hpp>
#include <kj/debug.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/socket.h>

#include <cstring>
#include <deque>
#include <vector>

namespace mc::rpc::detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

constexpr std::uint32_t chunk_bytes = rdma_chunk_bytes;
constexpr std::uint32_t data_credits = rdma_data_credits;
constexpr std::uint32_t spare_slots = 8;
constexpr std::uint32_t recv_slots = data_credits + spare_slots;
constexpr std::uint32_t send_slots = 16;
constexpr std::uint64_t send_tag = std::uint64_t{1} << 32;

enum class msg_kind : std::uint32_t { data = 0, credit = 1, fin = 2 };

std::uint32_t make_imm(msg_kind k, std::uint32_t credits) {
  return htonl(static_cast<std::uint32_t>(k) << 30 | (credits & 0xffffff));
}

kj::Exception disconnected(const std::string& why) {
  return kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__, kj::str(why.c_str()));
}

}  // namespace

// ---- the stream --------------------------------------------------------------

/// Everything the asio handlers touch (they hold a shared_ptr; the stream may
/// be gone). Owned verbs objects are released by the destructor, after the
/// last handler let go.
struct rdma_stream::core {
  core(std::shared_ptr<mc::verbs::device> d, mc::executor ex)
      : dev(std::move(d)), ctrl(ex), sd(ex), last_activity(std::chrono::steady_clock::now()) {}
  ~core();

  struct rx {
    std::uint32_t slot;
    std::uint32_t len;
    std::uint32_t pos;
  };

  std::shared_ptr<mc::verbs::device> dev;
  tcp::socket ctrl;
  asio::posix::stream_descriptor sd;
  ibv_comp_channel* channel = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  std::byte* mem = nullptr;  // recv slots, then send slots
  std::uint32_t psn = 0;

  std::deque<rx> rxq;
  std::vector<std::uint32_t> free_send;
  std::uint32_t credits = 0;  // SENDs of data we may still post
  std::uint32_t owed = 0;     // credits we owe the peer
  bool fin_pending = false;   // shutdownWrite() waiting for a send slot
  bool fin_sent = false;
  bool fin_received = false;
  bool read_aborted = false;
  bool failed = false;  // QP error or peer gone: no more sends
  bool closed = false;  // stream destroyed
  std::string error;
  mc::time_point last_activity;
  kj::Own<kj::PromiseFulfiller<void>> read_waiter;
  kj::Own<kj::PromiseFulfiller<void>> write_waiter;

  std::byte* recv_buf(std::uint32_t i) const noexcept { return mem + std::size_t{i} * chunk_bytes; }
  std::byte* send_buf(std::uint32_t i) const noexcept { return mem + (std::size_t{recv_slots} + i) * chunk_bytes; }

  bool post_recv(std::uint32_t slot) noexcept {
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(recv_buf(slot)), chunk_bytes, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(qp, &wr, &bad) == 0;
  }

  /// Posts one SEND from a free slot (caller checked free_send non-empty).
  bool post_send(msg_kind k, std::uint32_t len) noexcept {
    const auto slot = free_send.back();
    free_send.pop_back();
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(send_buf(slot)), len, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = send_tag | slot;
    wr.sg_list = len ? &sge : nullptr;
    wr.num_sge = len ? 1 : 0;
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = make_imm(k, owed);
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp, &wr, &bad) != 0) {
      free_send.push_back(slot);
      fail(std::string("ibv_post_send: ") + std::strerror(errno));
      return false;
    }
    owed = 0;
    if (k == msg_kind::data) --credits;
    last_activity = std::chrono::steady_clock::now();
    return true;
  }

  /// Control messages that wait for a send slot.
  void flush_control() noexcept {
    if (failed) return;
    if (fin_pending && !free_send.empty()) {
      fin_pending = false;
      fin_sent = post_send(msg_kind::fin, 0);
    }
    if (owed >= data_credits / 2 && !free_send.empty()) (void)post_send(msg_kind::credit, 0);
  }

  void fail(std::string why) noexcept {
    if (!failed) {
      failed = true;
      error = std::move(why);
    }
    wake();
  }

  void wake() noexcept {
    for (auto* w : {&read_waiter, &write_waiter}) {
      auto f = kj::mv(*w);
      if (f && f->isWaiting()) f->fulfill();  // the loops re-check the state
    }
  }

  /// Takes every completion; called from the channel watch and inline.
  void poll() noexcept {
    ibv_wc wc[32];
    bool got_data = false, got_slot = false;
    for (;;) {
      const int n = ibv_poll_cq(cq, 32, wc);
      if (n <= 0) break;
      for (int i = 0; i < n; ++i) {
        const auto& c = wc[i];
        const bool is_send = (c.wr_id & send_tag) != 0;
        if (c.status != IBV_WC_SUCCESS) {
          if (!closed)
            fail(std::string("RDMA ") + (is_send ? "send" : "receive") + " failed: " + ibv_wc_status_str(c.status));
          continue;
        }
        if (is_send) {
          free_send.push_back(static_cast<std::uint32_t>(c.wr_id & 0xffffffffu));
          got_slot = true;
          continue;
        }
        const auto slot = static_cast<std::uint32_t>(c.wr_id);
        if (!(c.wc_flags & IBV_WC_WITH_IMM) || slot >= recv_slots) {
          fail("RDMA receive without immediate data (protocol error)");
          continue;
        }
        const std::uint32_t imm = ntohl(c.imm_data);
        const auto kind = static_cast<msg_kind>(imm >> 30);
        credits += imm & 0xffffff;
        if (credits > data_credits) {
          fail("peer returned more credits than granted (protocol error)");
          continue;
        }
        last_activity = std::chrono::steady_clock::now();
        if (kind == msg_kind::data && c.byte_len > 0 && c.byte_len <= chunk_bytes) {
          rxq.push_back({slot, c.byte_len, 0});
          got_data = true;
        } else if (kind == msg_kind::credit || kind == msg_kind::fin) {
          if (kind == msg_kind::fin) {
            fin_received = true;
            got_data = true;
          }
          if (!post_recv(slot)) fail(std::string("ibv_post_recv: ") + std::strerror(errno));
          got_slot = true;  // credits may have arrived
        } else {
          fail("malformed RDMA message (protocol error)");
        }
      }
    }
    flush_control();
    if (got_data || got_slot) wake();
  }

  void arm_channel(std::shared_ptr<core> self) {
    sd.async_wait(asio::posix::stream_descriptor::wait_read, [self](boost::system::error_code ec) {
      if (ec || self->closed) return;
      ibv_cq* c = nullptr;
      void* ctx = nullptr;
      unsigned events = 0;
      while (ibv_get_cq_event(self->channel, &c, &ctx) == 0) ++events;  // fd is non-blocking
      if (events) ibv_ack_cq_events(self->cq, events);
      (void)ibv_req_notify_cq(self->cq, 0);
      self->poll();  // after re-arming: nothing is missed
      self->arm_channel(self);
    });
  }

  /// The TCP connection carries nothing after the handshake: readable means
  /// the peer closed it (process gone or stream destroyed).
  void arm_ctrl(std::shared_ptr<core> self) {
    ctrl.async_wait(tcp::socket::wait_read, [self](boost::system::error_code ec) {
      if (ec || self->closed) return;
      char b[16];
      const ssize_t n = ::recv(self->ctrl.native_handle(), b, sizeof b, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        self->arm_ctrl(self);
        return;
      }
      self->poll();  // what already arrived is still delivered
      self->fail(n > 0 ? "unexpected bytes on the RDMA connection's TCP channel" : "peer closed the connection");
    });
  }
};

rdma_stream::core::~core() {
  boost::system::error_code ig;
  if (sd.is_open()) (void)sd.release();
  if (qp) ibv_destroy_qp(qp);
  if (cq) ibv_destroy_cq(cq);
  if (channel) ibv_destroy_comp_channel(channel);
  if (mr) ibv_dereg_mr(mr);
  std::free(mem);
  ctrl.close(ig);
}

mc::result<kj::Own<rdma_stream>> rdma_stream::create(std::shared_ptr<mc::verbs::device> dev, mc::executor ex,
                                                     std::string* message) {
  auto c = std::make_shared<core>(std::move(dev), ex);
  auto fail_with = [&](std::string what) {
    *message = what + ": " + std::strerror(errno);
    return mc::fail(mc::errc::rpc_fail);
  };
  const std::size_t bytes = std::size_t{recv_slots + send_slots} * chunk_bytes;
  c->mem = static_cast<std::byte*>(std::aligned_alloc(4096, bytes));
  if (!c->mem) return fail_with("allocating RDMA buffers");
  std::memset(c->mem, 0, bytes);
  auto mr = c->dev->reg_mr(c->mem, bytes);
  if (!mr) return fail_with("ibv_reg_mr of " + std::to_string(bytes) + " bytes (memlock limit?)");
  c->mr = *mr;
  c->channel = ibv_create_comp_channel(c->dev->ctx());
  if (!c->channel) return fail_with("ibv_create_comp_channel");
  c->cq = ibv_create_cq(c->dev->ctx(), static_cast<int>(recv_slots + send_slots + 8), nullptr, c->channel, 0);
  if (!c->cq) return fail_with("ibv_create_cq");
  c->qp = c->dev->create_qp(c->cq, send_slots, recv_slots);
  if (!c->qp) return fail_with("ibv_create_qp");
  for (std::uint32_t i = 0; i < recv_slots; ++i)
    if (!c->post_recv(i)) return fail_with("ibv_post_recv");
  for (std::uint32_t i = send_slots; i-- > 0;) c->free_send.push_back(i);
  c->psn = mc::verbs::random_psn();
  const int fl = ::fcntl(c->channel->fd, F_GETFL);
  (void)::fcntl(c->channel->fd, F_SETFL, fl | O_NONBLOCK);
  boost::system::error_code ec;
  c->sd.assign(c->channel->fd, ec);
  if (ec) return fail_with("watching the completion channel");
  return kj::heap<rdma_stream>(std::move(c));
}

rdma_stream::~rdma_stream() noexcept(false) {
  auto& c = *core_;
  c.closed = true;
  c.read_waiter = nullptr;
  c.write_waiter = nullptr;
  if (c.qp) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    (void)ibv_modify_qp(c.qp, &a, IBV_QP_STATE);
  }
  boost::system::error_code ig;
  c.sd.cancel(ig);
  c.ctrl.cancel(ig);
  c.ctrl.shutdown(tcp::socket::shutdown_both, ig);  // the peer sees EOF at once
}

mc::verbs::qp_info rdma_stream::local_info() const noexcept { return core_->dev->local_info(core_->qp, core_->psn); }

bool rdma_stream::connect(const mc::verbs::qp_info& remote, std::string* message) {
  auto& c = *core_;
  if (!c.dev->connect_qp(c.qp, c.psn, remote)) {
    *message = std::string("connecting the RDMA queue pair: ") + std::strerror(errno);
    return false;
  }
  c.credits = data_credits;
  if (ibv_req_notify_cq(c.cq, 0) != 0) {
    *message = "ibv_req_notify_cq failed";
    return false;
  }
  return true;
}

void rdma_stream::start(tcp::socket ctrl) {
  auto& c = *core_;
  c.ctrl = std::move(ctrl);
  c.last_activity = std::chrono::steady_clock::now();
  c.arm_channel(core_);
  c.arm_ctrl(core_);
}

mc::time_point rdma_stream::last_activity() const noexcept { return core_->last_activity; }

void rdma_stream::close() noexcept {
  boost::system::error_code ig;
  core_->ctrl.shutdown(tcp::socket::shutdown_both, ig);
  core_->fail("connection closed locally");
}

void rdma_stream::shutdownWrite() {
  auto& c = *core_;
  if (c.fin_sent || c.fin_pending || c.failed) return;
  c.fin_pending = true;
  c.flush_control();
}

void rdma_stream::abortRead() {
  core_->read_aborted = true;
  core_->wake();
}

kj::Promise<void> rdma_stream::wait_readable() {
  auto paf = kj::newPromiseAndFulfiller<void>();
  core_->read_waiter = kj::mv(paf.fulfiller);
  return kj::mv(paf.promise);
}

kj::Promise<void> rdma_stream::wait_writable() {
  auto paf = kj::newPromiseAndFulfiller<void>();
  core_->write_waiter = kj::mv(paf.fulfiller);
  return kj::mv(paf.promise);
}

kj::Promise<size_t> rdma_stream::tryRead(void* buffer, size_t min_bytes, size_t max_bytes) {
  return read_loop(static_cast<kj::byte*>(buffer), min_bytes, max_bytes, 0);
}

kj::Promise<size_t> rdma_stream::read_loop(kj::byte* buf, size_t min_bytes, size_t max_bytes, size_t done) {
  auto& c = *core_;
  if (c.read_aborted) return done;
  while (done < max_bytes && !c.rxq.empty()) {
    auto& r = c.rxq.front();
    const std::size_t n = std::min<std::size_t>(r.len - r.pos, max_bytes - done);
    std::memcpy(buf + done, c.recv_buf(r.slot) + r.pos, n);
    done += n;
    r.pos += static_cast<std::uint32_t>(n);
    if (r.pos == r.len) {
      const auto slot = r.slot;
      c.rxq.pop_front();
      if (!c.failed) {
        if (!c.post_recv(slot)) {
          c.fail(std::string("ibv_post_recv: ") + std::strerror(errno));
        } else {
          ++c.owed;
        }
      }
    }
  }
  c.flush_control();
  if (done >= min_bytes) return done;
  if (c.fin_received || c.failed) return done;  // EOF (a failure shows up as EOF, like a reset TCP read)
  return wait_readable().then(
      [this, buf, min_bytes, max_bytes, done]() { return read_loop(buf, min_bytes, max_bytes, done); });
}

kj::Promise<void> rdma_stream::write(const void* buffer, size_t size) {
  auto pieces = kj::heapArray<kj::ArrayPtr<const kj::byte>>(1);
  pieces[0] = kj::arrayPtr(static_cast<const kj::byte*>(buffer), size);
  return write_loop(kj::mv(pieces), 0, 0);
}

kj::Promise<void> rdma_stream::write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) {
  auto copy = kj::heapArray<kj::ArrayPtr<const kj::byte>>(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) copy[i] = pieces[i];
  return write_loop(kj::mv(copy), 0, 0);
}

kj::Promise<void> rdma_stream::write_loop(kj::Array<kj::ArrayPtr<const kj::byte>> pieces, size_t first, size_t offset) {
  auto& c = *core_;
  for (;;) {
    while (first < pieces.size() && offset == pieces[first].size()) {
      ++first;
      offset = 0;
    }
    if (first == pieces.size()) return kj::READY_NOW;
    if (c.failed || c.closed) return disconnected("RPC over RDMA: " + (c.error.empty() ? "closed" : c.error));
    if (c.fin_sent || c.fin_pending) return disconnected("RPC over RDMA: write after shutdownWrite");
    if (c.credits == 0 || c.free_send.empty()) {
      return wait_writable().then(
          [this, p = kj::mv(pieces), first, offset]() mutable { return write_loop(kj::mv(p), first, offset); });
    }
    // Gather as many bytes as fit into one chunk.
    std::byte* dst = c.send_buf(c.free_send.back());
    std::uint32_t len = 0;
    while (len < chunk_bytes && first < pieces.size()) {
      const auto& p = pieces[first];
      const std::size_t n = std::min<std::size_t>(p.size() - offset, chunk_bytes - len);
      std::memcpy(dst + len, p.begin() + offset, n);
      len += static_cast<std::uint32_t>(n);
      offset += n;
      if (offset == p.size()) {
        ++first;
        offset = 0;
      }
    }
    if (!c.post_send(msg_kind::data, len)) return disconnected("RPC over RDMA: " + c.error);
  }
}

}  // namespace mc::rpc::detail
