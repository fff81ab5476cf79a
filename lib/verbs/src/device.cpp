// RDMA device discovery and QP state transitions (shared by the transfer
// engine's verbs transport and the RPC control plane over RDMA).
#include "mc/verbs/device.hpp"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace mc::verbs {
namespace {

bool gid_is_zero(const ibv_gid& g) {
  for (auto b : g.raw)
    if (b) return false;
  return true;
}

bool gid_is_ipv4_mapped(const ibv_gid& g) {
  static const std::uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(g.raw, prefix, 12) == 0;
}

/// Auto GID: RoCE v2 with an IPv4-mapped address, else any RoCE v2, else
/// the first non-zero entry; -1 when the table is empty.
int pick_gid(ibv_context* ctx, std::uint8_t port, const ibv_port_attr& pa) {
  int v2 = -1, any = -1;
  for (int i = 0; i < pa.gid_tbl_len; ++i) {
    ibv_gid_entry e{};
    if (ibv_query_gid_ex(ctx, port, static_cast<std::uint32_t>(i), &e, 0) != 0) continue;
    ibv_gid g;
    std::memcpy(g.raw, e.gid.raw, 16);
    if (gid_is_zero(g)) continue;
    if (any < 0) any = i;
    if (e.gid_type == IBV_GID_TYPE_ROCE_V2) {
      if (gid_is_ipv4_mapped(g)) return i;
      if (v2 < 0) v2 = i;
    }
  }
  return v2 >= 0 ? v2 : any;
}

}  // namespace

void encode_qp_info(const qp_info& q, std::byte* out) noexcept {
  std::memset(out, 0, qp_info_size);
  auto put32 = [&](std::size_t off, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out[off + i] = static_cast<std::byte>(v >> (8 * i));
  };
  put32(0, q.qpn);
  put32(4, q.psn);
  out[8] = static_cast<std::byte>(q.lid & 0xff);
  out[9] = static_cast<std::byte>(q.lid >> 8);
  out[10] = static_cast<std::byte>(q.mtu);
  out[11] = static_cast<std::byte>(q.link_layer);
  out[12] = static_cast<std::byte>(q.max_rd_atomic);
  std::memcpy(out + 16, q.gid.data(), 16);
}

qp_info decode_qp_info(const std::byte* in) noexcept {
  auto get = [&](std::size_t i) { return std::to_integer<std::uint32_t>(in[i]); };
  qp_info q;
  q.qpn = get(0) | get(1) << 8 | get(2) << 16 | get(3) << 24;
  q.psn = get(4) | get(5) << 8 | get(6) << 16 | get(7) << 24;
  q.lid = static_cast<std::uint16_t>(get(8) | get(9) << 8);
  q.mtu = static_cast<std::uint8_t>(get(10));
  q.link_layer = static_cast<std::uint8_t>(get(11));
  q.max_rd_atomic = static_cast<std::uint8_t>(get(12));
  std::memcpy(q.gid.data(), in + 16, 16);
  return q;
}

mc::result<qp_info> parse_qp_info(const std::byte* in, std::size_t n) noexcept {
  if (n != qp_info_size) return mc::fail(mc::errc::invalid_params);
  for (std::size_t i = 13; i < qp_info_size; ++i)  // reserved: 13..15 and 32..47
    if ((i < 16 || i >= 32) && in[i] != std::byte{0}) return mc::fail(mc::errc::invalid_params);
  const qp_info q = decode_qp_info(in);
  if (q.qpn < 2 || q.qpn > 0xffffff || q.psn > 0xffffff || q.mtu > IBV_MTU_4096 ||
      q.link_layer > IBV_LINK_LAYER_ETHERNET || q.max_rd_atomic > 16)
    return mc::fail(mc::errc::invalid_params);
  return q;
}

device::device(const device_options& opts) {
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    const int e = errno;
    if (list) ibv_free_device_list(list);
    throw std::invalid_argument(opts.who + std::string(": no RDMA device found (ibv_get_device_list: ") +
                                (e ? std::strerror(e) : "empty list") +
                                "); load a driver (e.g. rdma_rxe for Soft-RoCE) or use tcp");
  }
  std::string tried;
  for (int i = 0; i < n && !ctx_; ++i) {
    const std::string nm = ibv_get_device_name(list[i]);
    if (!opts.device_names.empty() &&
        std::find(opts.device_names.begin(), opts.device_names.end(), nm) == opts.device_names.end())
      continue;
    if (!tried.empty()) tried += ", ";
    tried += nm;
    ibv_context* c = ibv_open_device(list[i]);
    if (!c) {
      tried += " (cannot open: " + std::string(std::strerror(errno)) + ")";
      continue;
    }
    ibv_device_attr da{};
    ibv_port_attr pa{};
    std::uint8_t port = 0;
    if (ibv_query_device(c, &da) == 0)
      for (std::uint8_t p = 1; p <= da.phys_port_cnt && !port; ++p)
        if (ibv_query_port(c, p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) port = p;
    if (!port) {
      tried += " (no active port)";
      ibv_close_device(c);
      continue;
    }
    int gi = opts.gid_index >= 0 ? opts.gid_index : pick_gid(c, port, pa);
    ibv_gid g{};
    if (pa.link_layer == IBV_LINK_LAYER_ETHERNET && (gi < 0 || ibv_query_gid(c, port, gi, &g) != 0 || gid_is_zero(g))) {
      tried += " (no usable GID at index " + std::to_string(gi) + ")";
      ibv_close_device(c);
      continue;
    }
    if (gi >= 0) (void)ibv_query_gid(c, port, gi, &g);
    ctx_ = c;
    name_ = nm;
    port_num_ = port;
    port_ = pa;
    dev_attr_ = da;
    gid_index_ = std::max(gi, 0);
    gid_ = g;
  }
  ibv_free_device_list(list);
  if (!ctx_) {
    std::string names;
    for (auto& d : opts.device_names) names += (names.empty() ? "" : ",") + d;
    throw std::invalid_argument(opts.who + ": no usable RDMA device" +
                                (names.empty() ? std::string() : " among device_names [" + names + "]") +
                                (tried.empty() ? std::string(" (none matched)") : " (tried: " + tried + ")"));
  }
  pd_ = ibv_alloc_pd(ctx_);
  if (pd_) passive_cq_ = ibv_create_cq(ctx_, 16, nullptr, nullptr, 0);
  if (!pd_ || !passive_cq_) {
    const int e = errno;
    if (pd_) ibv_dealloc_pd(pd_);
    ibv_close_device(ctx_);
    throw std::invalid_argument(opts.who + ": cannot set up device " + name_ + ": " + std::strerror(e));
  }
}

device::~device() {
  if (passive_cq_) ibv_destroy_cq(passive_cq_);
  if (pd_) ibv_dealloc_pd(pd_);
  if (ctx_) ibv_close_device(ctx_);
}

mc::result<ibv_mr*> device::reg_mr(void* addr, std::size_t len, int access) noexcept {
  ibv_mr* mr = ibv_reg_mr(pd_, addr, len, access);
  if (!mr) {
    std::fprintf(stderr, "rdma: ibv_reg_mr(%zu bytes) on %s failed: %s\n", len, name_.c_str(), std::strerror(errno));
    return mc::fail(errno == ENOMEM ? mc::errc::buffer_overflow : mc::errc::io_error);
  }
  return mr;
}

ibv_qp* device::create_qp(ibv_cq* cq, std::uint32_t depth, std::uint32_t recv_depth) noexcept {
  ibv_qp_init_attr ia{};
  ia.send_cq = cq;
  ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.sq_sig_all = 0;
  ia.cap.max_send_wr = std::min<std::uint32_t>(depth, static_cast<std::uint32_t>(dev_attr_.max_qp_wr));
  ia.cap.max_recv_wr =
      std::max<std::uint32_t>(1, std::min<std::uint32_t>(recv_depth, static_cast<std::uint32_t>(dev_attr_.max_qp_wr)));
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(pd_, &ia);
  if (!qp) return nullptr;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = port_num_;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    ibv_destroy_qp(qp);
    return nullptr;
  }
  return qp;
}

qp_info device::local_info(ibv_qp* qp, std::uint32_t psn) const noexcept {
  qp_info q;
  q.qpn = qp->qp_num;
  q.psn = psn & 0xffffff;
  q.lid = port_.lid;
  q.mtu = static_cast<std::uint8_t>(port_.active_mtu);
  q.link_layer = port_.link_layer;
  q.max_rd_atomic = static_cast<std::uint8_t>(std::clamp(dev_attr_.max_qp_rd_atom, 1, 16));
  std::memcpy(q.gid.data(), gid_.raw, 16);
  return q;
}

bool device::connect_qp(ibv_qp* qp, std::uint32_t local_psn, const qp_info& remote) noexcept {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu =
      static_cast<ibv_mtu>(std::min<int>(remote.mtu ? int(remote.mtu) : int(IBV_MTU_1024), int(port_.active_mtu)));
  a.dest_qp_num = remote.qpn;
  a.rq_psn = remote.psn & 0xffffff;
  a.max_dest_rd_atomic = static_cast<std::uint8_t>(std::clamp(dev_attr_.max_qp_init_rd_atom, 1, 16));
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = port_num_;
  a.ah_attr.dlid = remote.lid;
  a.ah_attr.sl = 0;
  if (port_.link_layer == IBV_LINK_LAYER_ETHERNET || !gid_is_zero(gid_)) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid.data(), 16);
    a.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(gid_index_);
    a.ah_attr.grh.hop_limit = 64;
  }
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
    return false;
  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_RTS;
  s.timeout = 14;   // 4.096 us * 2^14 = 67 ms per try
  s.retry_cnt = 7;  // a dead peer is detected after ~0.5 s
  s.rnr_retry = 7;
  s.sq_psn = local_psn & 0xffffff;
  s.max_rd_atomic = static_cast<std::uint8_t>(
      std::min<int>(std::clamp(dev_attr_.max_qp_rd_atom, 1, 16), remote.max_rd_atomic ? remote.max_rd_atomic : 1));
  return ibv_modify_qp(qp, &s,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC) == 0;
}

std::uint32_t random_psn() noexcept {
  std::uint32_t v = 0;
  if (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) v = 0x1234;
  return v & 0xffffff;
}

std::vector<std::string> list_devices() {
  std::vector<std::string> out;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) return out;
  for (int i = 0; i < n; ++i) out.emplace_back(ibv_get_device_name(list[i]));
  ibv_free_device_list(list);
  return out;
}

}  // namespace mc::verbs
