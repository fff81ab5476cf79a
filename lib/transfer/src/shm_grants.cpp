// Same-host transport, initiator side: the encoding of grant requests (one
// item's range, or a run of ranges under one token; wire.hpp describes both).
#include "shm_common.hpp"

#include <algorithm>

namespace mc::transfer::detail::shm {
namespace {

/// Writes the header of a grant request for [address, address + length)
/// under `it`'s token, in `it`'s direction, with a lease and `extra` flags.
void put_grant_header(std::byte* out, std::uint64_t id, const transfer_item& it, std::uint64_t address,
                      std::uint64_t length, std::uint16_t extra) {
  header g;
  g.op = wire_op::shm_grant;
  g.flags = static_cast<std::uint16_t>((it.op == op_kind::write ? grant_write : 0) | grant_lease | extra);
  g.request_id = id;
  g.address = address;
  g.length = length;
  g.token = it.token;
  header_bytes hb;
  encode(g, hb);
  std::memcpy(out, hb.data(), header_size);
}

}  // namespace

std::size_t encode_grant(std::byte* out, std::uint64_t id, const transfer_item& it, std::uint64_t done) {
  put_grant_header(out, id, it, it.address + done, it.length - done, 0);
  put_u64(out + header_size, to_monotonic_ns(it.deadline));
  return grant_request_size;
}

std::size_t encode_grant_ranges(std::byte* out, std::uint64_t id, std::span<transfer_item* const> run) {
  const auto& first = *run.front();
  put_grant_header(out, id, first, first.address, first.length, grant_ranges);
  auto deadline = first.deadline;
  for (auto* it : run) deadline = std::min(deadline, it->deadline);
  put_u64(out + header_size, to_monotonic_ns(deadline));
  put_u64(out + header_size + 8, run.size());
  std::size_t at = header_size + 16;
  for (auto* it : run.subspan(1)) {
    put_u64(out + at, it->address);
    put_u64(out + at + 8, it->length);
    at += 16;
  }
  return at;
}

}  // namespace mc::transfer::detail::shm
