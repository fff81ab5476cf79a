#pragma once
// The data plane's binary wire protocol (TCP and the same-host control
// socket). Every message starts with one fixed 48-byte little-endian header:
//
//   off size field
//     0   4  magic       'M','C','X','F'
//     4   1  version     1
//     5   1  op          see `wire_op`
//     6   2  flags       0 (unknown bits are rejected)
//     8   4  status      0 in requests; 0 or an mc::errc value in responses
//    12   4  reserved    0
//    16   8  request_id  chosen by the initiator, echoed in the response
//    24   8  address     target virtual address (requests); pid in shm_hello_resp
//                        (informational only: never used for process_vm_*)
//    32   8  length      bytes of the range; payload bytes that follow for
//                        write_req and an ok read_resp
//    40   8  token       the region's access token (requests)
//
// Payload follows the header only for write_req (exactly `length` bytes) and
// for read_resp with status 0 (exactly the requested length). Everything is
// validated on receipt; a violation closes the connection.
//
// Scatter-gather requests (TCP, since 2026-12): one request for several
// ranges (a value gathered from / scattered into a caller's pieces, each
// piece with its own token), so a piece costs 24 bytes of table instead of a
// request, an answer and a system call each:
//   write_sg_req   address = n, the segment count (1..max_sg_segments);
//                  length = the sum of the segments' lengths; token = 0.
//                  n table entries follow (little-endian u64 address, u64
//                  length, u64 token: the range and the token of the region
//                  it must lie in; every length > 0), then `length` payload
//                  bytes filling the segments in table order. Answer:
//                  write_resp.
//   read_sg_req    the same header and table, no payload. Answer: read_resp
//                  with length = the sum and the segments' bytes in table order.
// A request that is not well formed (n out of range, token != 0, a zero
// length, a range that wraps, a sum other than `length`) closes the
// connection; a segment its token does not grant (unknown token, outside the
// token's region, access) is the uniform refusal for the whole request (a
// refused write's payload is drained). Targets older than this revision
// close the connection on these ops; our initiators send them only for two or
// more pieces (a single range stays a read_req / write_req).
//
// Calls (TCP, since 2026-12): a small request/answer exchange for the layer
// above (the store's small-value reads: one round trip, no Cap'n Proto),
// served by the handler the target's owner installed (engine::set_call_handler):
//   call_req       address = the reply bytes the initiator accepts at most
//                  (1..max_call_reply); length = the request's payload bytes
//                  (1..max_call_request); token = 0; the payload follows.
//   call_resp      status 0: length = the reply's bytes (<= the request's
//                  address), which follow; else the handler's error code, or
//                  unsupported when no handler is installed, and length 0.
// Anything else (a bound exceeded, token != 0) closes the connection. The
// target answers a call after every answer queued before it. Targets older
// than this revision close the connection on these ops.
//
// Same-host control connection (abstract unix socket), revision 2:
//   shm_hello      length = shm_identity_size asks for the identity payload
//   shm_hello_resp length = shm_identity_size + payload (little-endian u64s):
//                  pid-namespace st_dev, pid-namespace st_ino, engine
//                  instance id. Older targets answer length 0 (-> the
//                  initiator does not use same-host with them). token =
//                  the live grants the target holds per connection at most
//                  (the initiator's window; since 2026-12: 256); 0 from
//                  targets that do not tell it, which hold 64. Its bits 32
//                  and up are capabilities (older initiators clamp the token
//                  to their window and never see them): bit 32 =
//                  grant_ranges requests are served (since 2026-12-07).
//   shm_grant      flags grant_write (the initiator writes) | grant_lease
//                  (8-byte payload follows: the requested lease deadline,
//                  CLOCK_MONOTONIC nanoseconds; the transfer's deadline)
//                  | grant_ranges (with grant_lease only, and only to a
//                  target that told the capability: after the lease an
//                  8-byte count n, 2..64, then n - 1 further ranges of 16
//                  bytes each, address and length; the header's address and
//                  length are the first range. One grant for all n ranges,
//                  all inside the region of the header's token: granted
//                  together or refused together)
//   shm_grant_resp status 0: token = the lease deadline (CLOCK_MONOTONIC ns),
//                  the initiator copies only before it; every refusal is
//                  access_denied
//   shm_release    request_id of the grant (unknown / expired ids are ignored)
//   shm_grant_resp of a range inside a shared-memory registration
//                  (engine::allocate_shared) also carries address = where
//                  that memory starts in the target, length = its id
//                  (nonzero); 0 / 0 otherwise. Older initiators ignore both.
//   shm_map        address = the request_id of a live grant of this
//                  connection, token = the id its answer carried: asks for
//                  the memfd (sent only to targets that sent an id)
//   shm_map_resp   status 0: address = where the memory starts in the
//                  target, length = its size, token = the id, and the memfd
//                  rides on the message (SCM_RIGHTS, attached to its first
//                  byte); else access_denied and no descriptor
#include "mc/runtime/error.hpp"
#include "mc/transfer/engine.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mc::transfer::detail {

inline constexpr std::uint32_t wire_magic = 0x4658434du;  // "MCXF" little-endian
inline constexpr std::uint8_t wire_version = 1;
inline constexpr std::size_t header_size = 48;
/// Largest payload of one message (a slice); bigger requests are sliced.
inline constexpr std::uint64_t max_wire_length = 256ull << 20;

enum class wire_op : std::uint8_t {
  read_req = 1,
  read_resp = 2,
  write_req = 3,
  write_resp = 4,
  shm_hello = 5,       // same-host control: first message of a connection
  shm_hello_resp = 6,  // address = server pid
  shm_grant = 7,       // flags: grant_write for a write grant
  shm_grant_resp = 8,
  shm_release = 9,  // request_id of the grant to release; no response
  // RDMA (issue 8), on a TCP connection that then belongs to one QP pair:
  // rdma_connect: payload the initiator's qp_info (48 bytes) followed by the
  // initiator's own engine endpoint (0 .. max_announced_endpoint bytes, for
  // engine::fence; length = 48 + its size); address = the
  // initiator's device index k (multi-rail: the target builds its QP on its
  // device k modulo its device count; older peers ignore it and send 0s).
  rdma_connect = 10,
  // rdma_connect_resp: status 0 + the target's qp_info, or a status
  // (unsupported); address = the target device index used, token = the
  // target's device count (0 from older peers = one device).
  rdma_connect_resp = 11,
  rdma_check = 12,       // address/length/token (+ flags grant_write for a WRITE): classify an access error
  rdma_check_resp = 13,  // status: 0 or access_denied (out_of_range from older targets)
  rdma_rkey = 14,        // token + address = device index: the region's rkey on that device
  rdma_rkey_resp = 15,   // status (0, access_denied, unsupported); token = the rkey
  write_sg_req = 16,     // scatter-gather WRITE (table + payload follow; see above)
  read_sg_req = 17,      // scatter-gather READ (table follows; answered by read_resp)
  call_req = 18,         // an upper layer's request (payload follows; see "Calls" above)
  call_resp = 19,        // its answer
  shm_map = 20,          // same-host: the memfd of a granted shared-memory registration (see above)
  shm_map_resp = 21,     // its answer (the descriptor rides on it)
};

/// Calls: bytes of a call_req's payload and of a call_resp's at most.
inline constexpr std::uint64_t max_call_request = max_call_request_bytes;
inline constexpr std::uint64_t max_call_reply = max_call_reply_bytes;

/// Segments one scatter-gather request names at most, and the bytes of one
/// table entry (u64 address, u64 length, u64 token).
inline constexpr std::uint64_t max_sg_segments = 64;
inline constexpr std::size_t sg_entry_size = 24;

/// Longest endpoint an rdma_connect may announce.
inline constexpr std::uint64_t max_announced_endpoint = 255;
/// Largest payload a target reads for an rdma_connect before it is checked
/// (a longer one closes the connection); the check allows far less.
inline constexpr std::size_t max_rdma_payload = 4096;

inline constexpr std::uint16_t grant_write = 1;
inline constexpr std::uint16_t grant_lease = 2;
inline constexpr std::uint16_t grant_ranges = 4;
/// Payload of a revision-2 shm_hello_resp: pidns st_dev, pidns st_ino, instance id.
inline constexpr std::uint64_t shm_identity_size = 24;

struct header {
  wire_op op{};
  std::uint16_t flags = 0;
  std::int32_t status = 0;
  std::uint64_t request_id = 0;
  std::uint64_t address = 0;
  std::uint64_t length = 0;
  std::uint64_t token = 0;
};

using header_bytes = std::array<std::byte, header_size>;

namespace wire_le {
template <class T>
inline void store(std::byte* p, T v) noexcept {
  for (std::size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<std::byte>(static_cast<std::uint64_t>(v) >> (8 * i));
}
template <class T>
inline T load(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= std::uint64_t(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return static_cast<T>(v);
}
}  // namespace wire_le

inline void encode(const header& h, header_bytes& out) noexcept {
  std::byte* p = out.data();
  wire_le::store<std::uint32_t>(p + 0, wire_magic);
  wire_le::store<std::uint8_t>(p + 4, wire_version);
  wire_le::store<std::uint8_t>(p + 5, static_cast<std::uint8_t>(h.op));
  wire_le::store<std::uint16_t>(p + 6, h.flags);
  wire_le::store<std::uint32_t>(p + 8, static_cast<std::uint32_t>(h.status));
  wire_le::store<std::uint32_t>(p + 12, 0);
  wire_le::store<std::uint64_t>(p + 16, h.request_id);
  wire_le::store<std::uint64_t>(p + 24, h.address);
  wire_le::store<std::uint64_t>(p + 32, h.length);
  wire_le::store<std::uint64_t>(p + 40, h.token);
}

/// Structural validation (magic, version, op range, reserved, flags, length
/// bound, address overflow). Semantic checks (which op is expected, ids,
/// status values) are the receiver's.
inline mc::result<header> decode(const header_bytes& in) noexcept {
  const std::byte* p = in.data();
  if (wire_le::load<std::uint32_t>(p) != wire_magic) return fail(errc::transfer_fail);
  if (wire_le::load<std::uint8_t>(p + 4) != wire_version) return fail(errc::transfer_fail);
  header h;
  auto op = wire_le::load<std::uint8_t>(p + 5);
  if (op < 1 || op > 21) return fail(errc::transfer_fail);
  h.op = static_cast<wire_op>(op);
  h.flags = wire_le::load<std::uint16_t>(p + 6);
  h.status = static_cast<std::int32_t>(wire_le::load<std::uint32_t>(p + 8));
  if (wire_le::load<std::uint32_t>(p + 12) != 0) return fail(errc::transfer_fail);
  h.request_id = wire_le::load<std::uint64_t>(p + 16);
  h.address = wire_le::load<std::uint64_t>(p + 24);
  h.length = wire_le::load<std::uint64_t>(p + 32);
  h.token = wire_le::load<std::uint64_t>(p + 40);
  if (h.flags & ~(grant_write | grant_lease | grant_ranges)) return fail(errc::transfer_fail);
  if (h.flags != 0 && h.op != wire_op::shm_grant && !(h.op == wire_op::rdma_check && h.flags == grant_write))
    return fail(errc::transfer_fail);
  if (h.length > max_wire_length && h.op != wire_op::shm_grant && h.op != wire_op::shm_grant_resp &&
      h.op != wire_op::shm_map_resp)
    return fail(errc::transfer_fail);
  if (h.status > 0) return fail(errc::transfer_fail);
  return h;
}

/// One range of a scatter-gather request's table.
struct sg_segment {
  std::uint64_t address = 0;
  std::uint64_t length = 0;
  std::uint64_t token = 0;
};

/// Writes one table entry (sg_entry_size bytes) at `out`.
inline void encode_sg_entry(const sg_segment& s, std::byte* out) noexcept {
  wire_le::store<std::uint64_t>(out, s.address);
  wire_le::store<std::uint64_t>(out + 8, s.length);
  wire_le::store<std::uint64_t>(out + 16, s.token);
}

/// Parses a table of `n` entries (1..max_sg_segments) at `in` into out[0..n).
/// False (a protocol violation) unless every length is > 0, no range wraps
/// the address space, and the lengths sum to exactly `total` (no overflow).
inline bool decode_sg_table(const std::byte* in, std::uint64_t n, std::uint64_t total, sg_segment* out) noexcept {
  if (n < 1 || n > max_sg_segments) return false;
  std::uint64_t sum = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    auto& s = out[i];
    s.address = wire_le::load<std::uint64_t>(in + i * sg_entry_size);
    s.length = wire_le::load<std::uint64_t>(in + i * sg_entry_size + 8);
    s.token = wire_le::load<std::uint64_t>(in + i * sg_entry_size + 16);
    if (s.length == 0 || s.length > total - sum || s.address > ~std::uint64_t{0} - s.length) return false;
    sum += s.length;
  }
  return sum == total;
}

/// Maps a status received from a peer to an error code: the codes a target
/// may legitimately send map to themselves, anything else to transfer_fail.
inline boost::system::error_code status_to_error(std::int32_t s) noexcept {
  switch (static_cast<errc>(s)) {
    case errc::access_denied:
    case errc::out_of_range:
    case errc::invalid_params:
    case errc::shutting_down:
      return make_error_code(static_cast<errc>(s));
    default:
      return make_error_code(errc::transfer_fail);
  }
}

}  // namespace mc::transfer::detail
