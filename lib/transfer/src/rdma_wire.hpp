#pragma once
// The RDMA handshake messages of the TCP wire protocol (wire.hpp:
// rdma_connect, rdma_connect_resp), checked in one place so that the target
// (rdma_serve.cpp), the initiator (rdma_transport.cpp) and the fuzz target
// test/fuzz/transfer/rdma_handshake_fuzz.cpp use the same code. Verbs types
// inside (mc/verbs/device.hpp): include from the verbs transport's .cpp files.
#include "mc/verbs/device.hpp"
#include "wire.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace mc::transfer::detail {

/// Target side: whether the rdma_connect header `h` announces a payload the
/// target reads (a qp_info and an endpoint of at most max_announced_endpoint
/// bytes); false = protocol violation, close. Pure.
inline bool rdma_connect_header_ok(const header& h) noexcept {
  return h.op == wire_op::rdma_connect && h.length >= mc::verbs::qp_info_size &&
         h.length <= mc::verbs::qp_info_size + max_announced_endpoint;
}

/// A checked rdma_connect: the initiator's QP, the endpoint it announced
/// (for engine::fence; may be empty) and the device index it asked for.
struct rdma_connect_request {
  mc::verbs::qp_info qp;
  std::string announced;
  std::uint64_t device = 0;
};

/// Target side: the rdma_connect `h` (rdma_connect_header_ok) with its
/// `payload` (the h.length bytes that followed). Errors: invalid_params
/// (payload size differs from h.length, or a qp_info parse_qp_info refuses).
/// Pure.
inline mc::result<rdma_connect_request> parse_rdma_connect(const header& h, std::span<const std::byte> payload) {
  if (!rdma_connect_header_ok(h) || payload.size() != h.length) return fail(errc::invalid_params);
  auto qp = mc::verbs::parse_qp_info(payload.data(), mc::verbs::qp_info_size);
  if (!qp) return qp.error();
  rdma_connect_request r;
  r.qp = *qp;
  r.announced.assign(reinterpret_cast<const char*>(payload.data()) + mc::verbs::qp_info_size,
                     payload.size() - mc::verbs::qp_info_size);
  r.device = h.address;
  return r;
}

/// Initiator side: the answer header `r` to our rdma_connect with request id
/// `id`; returns the target's device count (>= 1: older targets send 0),
/// after which exactly qp_info_size payload bytes follow. Errors:
/// unsupported (the target has no RDMA: use TCP), transfer_fail (any other
/// answer: wrong op or id, a refusal, a length other than qp_info_size). Pure.
inline mc::result<std::uint64_t> check_rdma_connect_resp(const header& r, std::uint64_t id) noexcept {
  if (r.op != wire_op::rdma_connect_resp || r.request_id != id) return fail(errc::transfer_fail);
  if (r.status == static_cast<std::int32_t>(errc::unsupported)) return fail(errc::unsupported);
  if (r.status != 0 || r.length != mc::verbs::qp_info_size) return fail(errc::transfer_fail);
  return std::max<std::uint64_t>(r.token, 1);
}

}  // namespace mc::transfer::detail
