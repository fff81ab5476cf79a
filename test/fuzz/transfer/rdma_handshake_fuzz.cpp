// Fuzz target `rdma_handshake`: the RDMA handshake messages, parsed by the
// functions the real code uses (there is no RDMA device here, so no QP is
// created; the target calls the parse/check functions directly):
//   0  a peer's qp_info (mc::verbs::parse_qp_info, lib/verbs);
//   1  the TransferEngine's rdma_connect, target side (rdma_wire.hpp:
//      rdma_connect_header_ok + parse_rdma_connect after wire.hpp's decode);
//   2  its answer rdma_connect_resp, initiator side (check_rdma_connect_resp,
//      then the answer's qp_info);
//   3  the RPC connection's RDMA hello, server side (lib/rpc rdma_hello.hpp
//      parse_hello);
//   4  the RPC hello reply, client side (parse_hello_reply).
// The first input byte picks the message; the rest is copied into a
// guarded_memory of exactly its size (a read one byte past the message
// faults). Invariants, checked against rules written here independently:
// every accepted qp_info has its fields in range and re-encodes to exactly
// the bytes received (no accepted non-canonical encoding), every in-range
// encoding is accepted; a request/answer is accepted exactly when its
// header, length, id and status are what the protocol allows, and what the
// parser returns (endpoint, device index, device count, statuses) equals the
// bytes. Seeds: gen_corpus.cpp (see README.md).
#include <infiniband/verbs.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>  // before fuzz_support.hpp, which uses perror
#include <cstdlib>
#include <cstring>
#include <span>

#include "fuzz_support.hpp"
#include "mc/verbs/device.hpp"
#include "rdma_hello.hpp"  // lib/rpc/src
#include "rdma_wire.hpp"   // lib/transfer/src

namespace {

namespace tx = mc::transfer::detail;
namespace rx = mc::rpc::detail;
namespace vb = mc::verbs;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "rdma_handshake: invariant violated: %s\n", what);
    std::abort();
  }
}

std::uint64_t le(const std::byte* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= std::uint64_t(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return v;
}

/// The rule for a peer's qp_info, written from the wire description.
bool qp_bytes_valid(const std::byte* p) {
  const auto qpn = le(p, 4), psn = le(p + 4, 4), mtu = le(p + 10, 1), ll = le(p + 11, 1), rd = le(p + 12, 1);
  return le(p + 13, 3) == 0 && le(p + 32, 8) == 0 && le(p + 40, 8) == 0 && qpn >= 2 && qpn <= 0xffffff &&
         psn <= 0xffffff && mtu <= IBV_MTU_4096 && ll <= IBV_LINK_LAYER_ETHERNET && rd <= 16;
}

void same_encoding(const vb::qp_info& q, const std::byte* p) {
  std::byte again[vb::qp_info_size];
  vb::encode_qp_info(q, again);
  check(std::memcmp(again, p, vb::qp_info_size) == 0, "an accepted qp_info does not re-encode to its bytes");
}

void qp_info_case(const std::byte* p, std::size_t n) {
  auto q = vb::parse_qp_info(p, n);
  if (n != vb::qp_info_size) {
    check(!q, "a qp_info of the wrong size was accepted");
    return;
  }
  check(static_cast<bool>(q) == qp_bytes_valid(p), "qp_info accepted/refused against the rule");
  if (q) same_encoding(*q, p);
  // Whatever the unchecked decoder makes of it, its canonical re-encoding is
  // accepted exactly when its fields are in range.
  std::byte canon[vb::qp_info_size];
  vb::encode_qp_info(vb::decode_qp_info(p), canon);
  check(static_cast<bool>(vb::parse_qp_info(canon, sizeof canon)) == qp_bytes_valid(canon),
        "a canonical qp_info accepted/refused against the rule");
}

void connect_case(const std::byte* p, std::size_t n) {
  if (n < tx::header_size) return;
  tx::header_bytes hb;
  std::memcpy(hb.data(), p, hb.size());
  auto h = tx::decode(hb);
  if (!h) return;  // wire.hpp's structural check: closed before this code runs
  const bool len_ok = h->op == tx::wire_op::rdma_connect && h->length >= 48 && h->length <= 48 + 255;
  check(tx::rdma_connect_header_ok(*h) == len_ok, "rdma_connect header accepted/refused against the rule");
  const auto payload =
      std::span<const std::byte>(p + tx::header_size, std::min<std::size_t>(n - tx::header_size, h->length));
  auto r = tx::parse_rdma_connect(*h, payload);
  const bool want = len_ok && payload.size() == h->length && qp_bytes_valid(payload.data());
  check(static_cast<bool>(r) == want, "rdma_connect accepted/refused against the rule");
  if (!r) {
    check(r.error() == mc::errc::invalid_params, "rdma_connect refused with an unexpected code");
    return;
  }
  same_encoding(r->qp, payload.data());
  check(r->device == h->address, "device index is not the header's address");
  check(r->announced.size() == payload.size() - 48 &&
            std::memcmp(r->announced.data(), payload.data() + 48, r->announced.size()) == 0,
        "announced endpoint is not the payload's tail");
}

void connect_resp_case(const std::byte* p, std::size_t n) {
  if (n < tx::header_size + 8) return;
  tx::header_bytes hb;
  std::memcpy(hb.data(), p, hb.size());
  const std::uint64_t id = le(p + tx::header_size, 8);  // the id our request carried
  auto h = tx::decode(hb);
  if (!h) return;
  auto r = tx::check_rdma_connect_resp(*h, id);
  const bool ours = h->op == tx::wire_op::rdma_connect_resp && h->request_id == id;
  const auto unsupported = static_cast<std::int32_t>(mc::errc::unsupported);
  if (ours && h->status == 0 && h->length == 48) {
    check(r && *r == std::max<std::uint64_t>(h->token, 1), "a valid answer refused or a wrong device count");
    qp_info_case(p + tx::header_size + 8, n - tx::header_size - 8);
  } else if (ours && h->status == unsupported) {
    check(!r && r.error() == mc::errc::unsupported, "an 'unsupported' answer not reported as unsupported");
  } else {
    check(!r && r.error() == mc::errc::transfer_fail, "an invalid answer not refused with transfer_fail");
  }
}

void hello_case(const std::byte* p, std::size_t n) {
  if (n != rx::hello_size) return;
  const auto h = rx::parse_hello(p);
  const bool magic = std::memcmp(p, "MCRPCRD1", 8) == 0;
  const bool framing = le(p + 56, 4) == 32 && le(p + 60, 4) == 16384;
  const auto want = !magic                   ? rx::hello_verdict::bad_magic
                    : !framing               ? rx::hello_verdict::framing
                    : !qp_bytes_valid(p + 8) ? rx::hello_verdict::bad_qp
                                             : rx::hello_verdict::ok;
  check(h.verdict == want, "RPC hello verdict against the rule");
  if (h.verdict != rx::hello_verdict::ok) return;
  std::byte again[rx::hello_size];
  rx::encode_hello(again, h.qp);
  check(std::memcmp(again, p, rx::hello_size) == 0, "an accepted hello does not re-encode to its bytes");
}

void reply_case(const std::byte* p, std::size_t n) {
  if (n != rx::hello_reply_size) return;
  const auto r = rx::parse_hello_reply(p);
  const bool magic = std::memcmp(p, "MCRPCRA1", 8) == 0;
  const auto status = static_cast<std::uint32_t>(le(p + 8, 4));
  const bool framing = le(p + 60, 4) == 32 && le(p + 64, 4) == 16384;
  const auto want = !magic                                             ? rx::reply_verdict::bad
                    : status == 1 || status == 2                       ? rx::reply_verdict::fallback
                    : status == 0 && framing && qp_bytes_valid(p + 12) ? rx::reply_verdict::ok
                                                                       : rx::reply_verdict::bad;
  check(r.verdict == want, "RPC hello reply verdict against the rule");
  if (magic) check(r.status == status, "reply status is not the bytes'");
  if (r.verdict != rx::reply_verdict::ok) return;
  std::byte again[rx::hello_reply_size];
  rx::encode_hello_reply(again, 0, &r.qp);
  check(std::memcmp(again, p, rx::hello_reply_size) == 0, "an accepted reply does not re-encode to its bytes");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t n = size - 1;
  mc::fuzz::guarded_memory mem(n ? n : 1);  // the message ends at a PROT_NONE page
  std::byte* p = mem.data() + (n ? 0 : 1);
  if (n) std::memcpy(p, data + 1, n);
  switch (data[0] % 5) {
    case 0:
      qp_info_case(p, n);
      break;
    case 1:
      connect_case(p, n);
      break;
    case 2:
      connect_resp_case(p, n);
      break;
    case 3:
      hello_case(p, n);
      break;
    default:
      reply_case(p, n);
      break;
  }
  return 0;
}
