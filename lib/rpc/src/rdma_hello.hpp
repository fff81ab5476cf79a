#pragma once
// The RDMA upgrade of an RPC connection (negotiate.hpp): the client's 64-byte
// hello and the server's 68-byte reply, encoded and checked in one place
// (rdma_handshake.cpp and test/fuzz/transfer/rdma_handshake_fuzz.cpp).
// Verbs types inside: include from lib/rpc/src .cpp files only.
#include "rdma_stream.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mc::rpc::detail {

/// Writes qp_info | our credits | our chunk bytes (56 bytes) at `p`: the
/// tail of the hello and of the reply.
inline void encode_hello_tail(std::byte* p, const mc::verbs::qp_info& q) noexcept {
  mc::verbs::encode_qp_info(q, p);
  put32(p + mc::verbs::qp_info_size, rdma_data_credits);
  put32(p + mc::verbs::qp_info_size + 4, rdma_chunk_bytes);
}

/// The client's hello (hello_size bytes at `out`).
inline void encode_hello(std::byte* out, const mc::verbs::qp_info& q) noexcept {
  std::memcpy(out, hello_magic, 8);
  encode_hello_tail(out + 8, q);
}

/// The server's reply (hello_reply_size bytes at `out`); `q` only with status 0.
inline void encode_hello_reply(std::byte* out, std::uint32_t status, const mc::verbs::qp_info* q) noexcept {
  std::memset(out, 0, hello_reply_size);
  std::memcpy(out, reply_magic, 8);
  put32(out + 8, status);
  if (q) encode_hello_tail(out + 12, *q);
}

/// How a server treats a hello.
enum class hello_verdict {
  bad_magic,  ///< not a hello: the connection is closed (rpc_fail)
  framing,    ///< other credits / chunk size: answered status 1 (TCP)
  bad_qp,     ///< a qp_info parse_qp_info refuses: answered status 2 (TCP)
  ok,         ///< `qp` is the client's queue pair
};
struct parsed_hello {
  hello_verdict verdict = hello_verdict::bad_magic;
  mc::verbs::qp_info qp;
};

/// Server side: checks the hello_size bytes at `p`. Pure, thread-safe.
inline parsed_hello parse_hello(const std::byte* p) noexcept {
  parsed_hello h;
  if (std::memcmp(p, hello_magic, 8) != 0) return h;
  const std::byte* tail = p + 8;
  h.verdict = hello_verdict::framing;
  if (get32(tail + mc::verbs::qp_info_size) != rdma_data_credits ||
      get32(tail + mc::verbs::qp_info_size + 4) != rdma_chunk_bytes)
    return h;
  auto q = mc::verbs::parse_qp_info(tail, mc::verbs::qp_info_size);
  h.verdict = q ? hello_verdict::ok : hello_verdict::bad_qp;
  if (q) h.qp = *q;
  return h;
}

/// What a client learns from a reply.
enum class reply_verdict {
  bad,       ///< not a reply, an unknown status, other framing or a bad qp_info: rpc_fail
  fallback,  ///< status 1 or 2: continue with Cap'n Proto over TCP
  ok,        ///< status 0: `qp` is the server's queue pair
};
struct parsed_reply {
  reply_verdict verdict = reply_verdict::bad;
  std::uint32_t status = 0;  // valid unless the magic was wrong
  mc::verbs::qp_info qp;
};

/// Client side: checks the hello_reply_size bytes at `p`. Pure, thread-safe.
inline parsed_reply parse_hello_reply(const std::byte* p) noexcept {
  parsed_reply r;
  if (std::memcmp(p, reply_magic, 8) != 0) return r;
  r.status = get32(p + 8);
  if (r.status == 1 || r.status == 2) {
    r.verdict = reply_verdict::fallback;
    return r;
  }
  const std::byte* tail = p + 12;
  if (r.status != 0 || get32(tail + mc::verbs::qp_info_size) != rdma_data_credits ||
      get32(tail + mc::verbs::qp_info_size + 4) != rdma_chunk_bytes)
    return r;
  auto q = mc::verbs::parse_qp_info(tail, mc::verbs::qp_info_size);
  if (!q) return r;
  r.verdict = reply_verdict::ok;
  r.qp = *q;
  return r;
}

}  // namespace mc::rpc::detail
