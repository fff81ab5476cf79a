// RDMA target side (issue 8): what an engine serves on its TCP endpoint for
// RDMA initiators - the QP handshake (rail k -> our device k), the rkey of a
// region on one of our devices, and the classification of a remote access
// error. The data itself never passes through here (the NIC serves it).
#include "engine_impl.hpp"
#include "io.hpp"
#include "rdma.hpp"
#include "rdma_verbs.hpp"
#include "rdma_wire.hpp"
#include "wire.hpp"

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>

namespace mc::transfer::detail {
namespace {

/// Target-side QP, alive as long as its TCP connection (destroyed before
/// the connection's socket is closed: see served_conn). Listed in the
/// context's served QPs (engine::fence) from its handshake on.
struct passive_qp {
  std::shared_ptr<rdma_context> ctx;
  ibv_qp* qp = nullptr;
  ~passive_qp() {
    if (ctx) ctx->remove_served(this);
    if (qp) ibv_destroy_qp(qp);
  }
};

task<bool> respond(tcp_socket& s, wire_op op, std::uint64_t id, errc status, const std::byte* payload = nullptr,
                   std::uint64_t address = 0, std::uint64_t token = 0) {
  std::array<std::byte, header_size + qp_info_size> out{};
  header h;
  h.op = op;
  h.request_id = id;
  h.address = address;
  h.token = token;
  h.status = static_cast<std::int32_t>(status);
  h.length = payload ? qp_info_size : 0;
  header_bytes hb;
  encode(h, hb);
  std::memcpy(out.data(), hb.data(), header_size);
  if (payload) std::memcpy(out.data() + header_size, payload, qp_info_size);
  co_return static_cast<bool>(co_await send_all(s, out.data(), header_size + (payload ? qp_info_size : 0)));
}

}  // namespace

task<bool> rdma_serve(engine_impl& eng, tcp_socket& s, const header& h, std::span<const std::byte> payload,
                      std::shared_ptr<void>& slot) {
  if (h.op == wire_op::rdma_check) {
    // One answer for every "not yours" (unknown token, outside, access not granted).
    const auto need = (h.flags & grant_write) ? region_access::remote_write : region_access::remote_read;
    auto e = eng.registry_->find(h.address, h.length, h.token, need);
    co_return co_await respond(s, wire_op::rdma_check_resp, h.request_id, e ? errc::ok : errc::access_denied);
  }
  if (h.op == wire_op::rdma_rkey) {
    // The rkey of a region on one of our devices (multi-rail initiators).
    if (h.length != 0) co_return false;
    if (!eng.rdma_ctx_) co_return co_await respond(s, wire_op::rdma_rkey_resp, h.request_id, errc::unsupported);
    auto rights = eng.registry_->rights(h.token);
    auto root = eng.registry_->root_of(h.token);  // a derived region uses its root's MRs
    std::optional<std::uint32_t> rk;
    if (rights && root && *rights != region_access::local_only) rk = eng.rdma_ctx_->rkey(*root, h.address);
    co_return co_await respond(s, wire_op::rdma_rkey_resp, h.request_id, rk ? errc::ok : errc::access_denied, nullptr,
                               h.address, rk.value_or(0));
  }
  if (!rdma_connect_header_ok(h) || payload.size() != h.length || slot) co_return false;
  // The payload: the initiator's qp_info, then its own engine endpoint
  // (engine::fence matches on it); an initiator that announces none is fenced
  // by every fence.
  if (!eng.rdma_ctx_) co_return co_await respond(s, wire_op::rdma_connect_resp, h.request_id, errc::unsupported);
  auto req = parse_rdma_connect(h, payload);
  if (!req) co_return co_await respond(s, wire_op::rdma_connect_resp, h.request_id, errc::transfer_fail);
  auto p = std::make_shared<passive_qp>();
  p->ctx = eng.rdma_ctx_;
  // Rail pairing: the initiator's device k -> our device k (modulo our count).
  const std::size_t n = p->ctx->device_count();
  const std::size_t k = req->device % n;
  mc::verbs::device& dev = p->ctx->dev(k);
  p->qp = dev.create_qp(dev.passive_cq(), 1);
  const auto psn = random_psn();
  if (!p->qp || !dev.connect_qp(p->qp, psn, req->qp)) {
    std::fprintf(stderr, "transfer: rdma: cannot set up a QP for a peer: %s\n", std::strerror(errno));
    co_return co_await respond(s, wire_op::rdma_connect_resp, h.request_id, errc::transfer_fail);
  }
  std::array<std::byte, qp_info_size> mine;
  encode_qp_info(dev.local_info(p->qp, psn), mine.data());
  p->ctx->add_served(p.get(), p->qp, s.native_handle(), std::move(req->announced));
  slot = std::move(p);
  co_return co_await respond(s, wire_op::rdma_connect_resp, h.request_id, errc::ok, mine.data(), k, n);
}

}  // namespace mc::transfer::detail
