// Per-runtime-thread verbs state of the RDMA initiator: QP teardown and
// flush, one poll loop per rail awaiting its completion channel, creation on
// first use and the two-phase stop.
#include "rdma_thread.hpp"

#include "rdma.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fcntl.h>

#include <cerrno>
#include <cstring>

namespace mc::transfer::detail {

namespace asio = boost::asio;

qp_state::~qp_state() {
  if (outstanding > 0 && !drain()) {
    std::fprintf(stderr, "transfer: rdma: QP %u did not flush; leaking it\n", qp ? qp->qp_num : 0u);
    qp = nullptr;  // the CQ keeps referring to it; never destroyed
    bounce_mr = nullptr;
    (void)bounce.release();
  }
  *alive = false;
  th.states.erase(this);
  if (qp) ibv_destroy_qp(qp);
  if (bounce_mr) ibv_dereg_mr(bounce_mr);
}

void qp_state::to_error() noexcept {
  broken = true;
  if (!qp) return;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  (void)ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

bool qp_state::drain() noexcept {
  to_error();
  // Flushes are generated right away by the driver; bounded wait, no sleep.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (outstanding > 0 && std::chrono::steady_clock::now() < until) th.poll(dev);
  return outstanding == 0;
}

namespace {

task<void> poll_loop(rdma_thread* th, std::size_t k, [[maybe_unused]] gate_holder g) {
  rdma_rail& r = *th->rails[k];
  for (;;) {
    auto [ec] =
        co_await r.sd.async_wait(asio::posix::stream_descriptor::wait_read, asio::as_tuple(asio::use_awaitable));
    if (ec || th->stopping) co_return;
    ibv_cq* cq = nullptr;
    void* cctx = nullptr;
    unsigned events = 0;
    while (ibv_get_cq_event(r.channel, &cq, &cctx) == 0) ++events;  // fd is non-blocking
    if (events) ibv_ack_cq_events(r.cq, events);
    (void)ibv_req_notify_cq(r.cq, 0);
    th->poll(k);  // after re-arming: nothing is missed
  }
}

}  // namespace

mc::result<rdma_thread*> thread_of(engine_impl& eng, thread_state& ts) {
  if (ts.rdma) return ts.rdma.get();
  if (ts.stopping) return fail(errc::shutting_down);
  auto th = std::make_shared<rdma_thread>(eng.rdma_ctx_, ts.ex);
  std::vector<gate_holder> holders;
  for (std::size_t k = 0; k < th->rails.size(); ++k) {
    auto holder = eng.gate_.try_enter();
    if (!holder) return fail(errc::shutting_down);
    holders.push_back(std::move(holder));
    rdma_rail& r = *th->rails[k];
    ibv_context* vc = th->ctx->dev(k).ctx();
    r.channel = ibv_create_comp_channel(vc);
    const std::size_t want = eng.opts_.max_peers * eng.opts_.connections_per_peer * qp_depth + 64;
    const int cqe = static_cast<int>(std::min<std::size_t>(want, 65536));
    if (r.channel) r.cq = ibv_create_cq(vc, cqe, nullptr, r.channel, 0);
    if (!r.cq) {
      std::fprintf(stderr, "transfer: rdma: cannot create a completion queue (%d entries) on %s: %s\n", cqe,
                   th->ctx->dev(k).name().c_str(), std::strerror(errno));
      return fail(errc::transfer_fail);
    }
    int fl = ::fcntl(r.channel->fd, F_GETFL);
    ::fcntl(r.channel->fd, F_SETFL, fl | O_NONBLOCK);
    boost::system::error_code ec;
    r.sd.assign(r.channel->fd, ec);
    if (ec || ibv_req_notify_cq(r.cq, 0) != 0) return fail(errc::transfer_fail);
  }
  ts.rdma = th;
  for (std::size_t k = 0; k < th->rails.size(); ++k)
    asio::co_spawn(ts.ex, poll_loop(th.get(), k, std::move(holders[k])), asio::detached);
  return th.get();
}

void rdma_close_thread(thread_state& ts) noexcept {
  auto* th = ts.rdma.get();
  if (!th) return;
  th->stopping = true;
  for (auto* q : th->states) {
    q->to_error();
    q->wake.cancel();
  }
  for (auto& r : th->rails) {
    r->pools.drop_idle();
    r->pools.wake_all();
    boost::system::error_code ig;
    r->sd.cancel(ig);
  }
}

void rdma_release_thread(thread_state& ts) noexcept { ts.rdma.reset(); }

std::size_t rdma_fence_thread(thread_state& ts, const std::string& peer) noexcept {
  auto* th = ts.rdma.get();
  if (!th) return 0;
  std::size_t n = 0;
  for (auto* q : th->states)
    if (q->peer == peer && !q->broken) {
      // In use: its WRs are flushed and retried on a fresh QP; idle: dropped below.
      q->to_error();
      ++n;
    }
  for (auto& r : th->rails) r->pools.drop_idle(peer);
  return n;
}

}  // namespace mc::transfer::detail
