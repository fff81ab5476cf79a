#pragma once
// The initiator side's per-runtime-thread verbs state (rdma_transport.cpp):
// one rail per device (completion channel + CQ + QP pools), the QPs and their
// posted work requests. Only rdma_*.cpp include this.
#include "engine_impl.hpp"
#include "pool.hpp"
#include "rdma_verbs.hpp"

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace mc::transfer::detail {

inline constexpr std::uint32_t qp_depth = 16;  // outstanding work requests per QP
inline constexpr auto no_rdma_ttl = std::chrono::seconds(30);

struct qp_state;

/// One posted work request; wr_id points here.
struct posted_wr {
  qp_state* owner = nullptr;
  ibv_wc_status status = IBV_WC_SUCCESS;
  bool done = true;
  std::uint32_t slice = 0;
  bool bounce = false;
};

class rdma_thread;  // per runtime thread: the rails and what we know of peers (below)

/// A connected QP pair: our QP plus the TCP connection its target-side QP
/// lives as long as (also used for rdma_check). Heap-pinned: wr_ids point
/// into `slots`.
struct qp_state {
  qp_state(rdma_thread& t, tcp_socket s, std::size_t d)
      : th(t), dev(d), ctrl(std::move(s)), wake(ctrl.get_executor(), boost::asio::steady_timer::time_point::max()) {}
  ~qp_state();
  void to_error() noexcept;
  /// Moves the QP to error and polls inline until our WRs are flushed (after
  /// a cancellation, so that no byte moves after the transfer returned).
  /// False when the flush did not arrive in time (the state must then leak).
  bool drain() noexcept;

  /// A derived token's range the target confirmed live on this QP's
  /// control connection (rdma_transport's validate_derived).
  struct validated {
    std::uint64_t token = 0, address = 0, length = 0;
    bool write = false;
  };
  static constexpr std::size_t max_validated = 64;  // bounded; the oldest goes first

  /// True when [address, address+length) of `token` was validated here for
  /// this direction (`write`).
  bool is_validated(std::uint64_t token, std::uint64_t address, std::uint64_t length, bool write) const noexcept {
    for (const auto& v : checked)
      if (v.token == token && v.write == write && address >= v.address && length <= v.length &&
          address - v.address <= v.length - length)
        return true;
    return false;
  }

  rdma_thread& th;
  std::size_t dev = 0;  // rail: our device index (== the target's device index)
  std::string peer;     // the target's engine endpoint
  std::vector<validated> checked;
  tcp_socket ctrl;
  ibv_qp* qp = nullptr;
  boost::asio::steady_timer wake;
  std::array<posted_wr, qp_depth> slots{};
  std::uint32_t outstanding = 0;
  bool broken = false;
  bool peer_gone = false;  // the control connection closed: the target process is gone
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  std::uint64_t next_id = 1;
  // Registered bounce buffer for local buffers outside every registered MR.
  std::unique_ptr<std::byte[]> bounce;
  ibv_mr* bounce_mr = nullptr;
};

/// What the pool holds (pool.hpp's Socket concept: close / is_open).
struct rdma_link {
  std::unique_ptr<qp_state> s;
  void close(boost::system::error_code&) noexcept {
    if (!s) return;
    s->to_error();
    boost::system::error_code ig;
    s->ctrl.close(ig);
  }
  bool is_open() const noexcept { return s && !s->broken && s->ctrl.is_open(); }
};

/// One device's completion channel + CQ (a CQ belongs to one device
/// context) and its QP pools, on one runtime thread.
struct rdma_rail {
  explicit rdma_rail(mc::executor ex) : sd(ex) {}
  ibv_comp_channel* channel = nullptr;
  ibv_cq* cq = nullptr;
  boost::asio::posix::stream_descriptor sd;
  pool_map<rdma_link> pools;
};

class rdma_thread {
 public:
  rdma_thread(std::shared_ptr<rdma_context> c, mc::executor ex) : ctx(std::move(c)) {
    for (std::size_t k = 0; k < ctx->device_count(); ++k) rails.push_back(std::make_unique<rdma_rail>(ex));
  }
  ~rdma_thread() {
    for (auto& r : rails) r->pools = {};  // every QP before any CQ
    for (auto& r : rails) {
      if (r->sd.is_open()) (void)r->sd.release();
      if (r->cq && ibv_destroy_cq(r->cq) != 0)
        std::fprintf(stderr, "transfer: rdma: CQ still busy at shutdown (a QP leaked after a failed flush)\n");
      if (r->channel) ibv_destroy_comp_channel(r->channel);
    }
  }

  /// Rails usable towards `endpoint`: min(our devices, the target's devices);
  /// 1 until a handshake told us the target's device count.
  std::size_t rails_for(const std::string& endpoint) const {
    auto it = remote_devs.find(endpoint);
    return std::clamp<std::size_t>(it == remote_devs.end() ? 1 : it->second, 1, rails.size());
  }

  /// Polls every available completion of rail `k` and dispatches it.
  void poll(std::size_t k) noexcept {
    ibv_wc wc[32];
    ibv_cq* cq = rails[k]->cq;
    for (;;) {
      int n = ibv_poll_cq(cq, 32, wc);
      if (n <= 0) return;
      for (int i = 0; i < n; ++i) {
        auto* p = reinterpret_cast<posted_wr*>(static_cast<std::uintptr_t>(wc[i].wr_id));
        if (!p || p->done) continue;
        p->status = wc[i].status;
        p->done = true;
        if (--p->owner->outstanding == 0) p->owner->wake.cancel();
      }
    }
  }

  std::shared_ptr<rdma_context> ctx;
  std::vector<std::unique_ptr<rdma_rail>> rails;
  bool stopping = false;
  std::unordered_set<qp_state*> states;
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> no_rdma;
  /// Device count of each peer and when it last completed a handshake.
  std::unordered_map<std::string, std::size_t> remote_devs;
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> rdma_ok;
  /// (endpoint, device, token) -> the target's rkey on that device (k > 0).
  std::map<std::tuple<std::string, std::size_t, std::uint64_t>, std::uint32_t> rkeys;
  std::size_t next_rail = 0;  // rotates the first rail of each batch
};

/// This thread's verbs state, created on first use (a rail per device, each
/// with its poll loop holding the engine's gate).
mc::result<rdma_thread*> thread_of(engine_impl& eng, thread_state& ts);

}  // namespace mc::transfer::detail
