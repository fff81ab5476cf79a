#pragma once
// How a new RPC connection authenticates (mc/rpc/auth.hpp) and picks its byte
// stream (MC_RPC_PROTOCOL).
//
// Every connection starts as TCP. The client first sends the auth frame
//   "MCAU" | u32 token length (LE, 0 = no token, at most 256) | token
// and waits for the server's answer
//   "MCAS" | u32 status (0 accepted, 1 token required, 2 token refused)
// before anything else (the RDMA hello, Cap'n Proto). "MCAU" can start neither
// a Cap'n Proto frame (1.4 billion segments) nor the RDMA hello ("MCRP"). A
// server with auth on refuses (answers 1/2, then closes) a frame without an
// accepted token, and closes at once a connection whose first bytes are not an
// auth frame. A server with auth off answers 0 to any frame and also serves
// connections that start directly with the hello or Cap'n Proto.
//
// Then a client whose process uses the RDMA
// control plane sends a 64-byte hello first:
//   "MCRPCRD1" | qp_info (48) | u32 receive credits | u32 chunk bytes   (LE)
// and the server answers 68 bytes:
//   "MCRPCRA1" | u32 status | qp_info (48) | u32 credits | u32 chunk
// status 0: both sides continue over an RC queue pair (rdma_stream); the TCP
// connection stays open as the liveness signal (its EOF = the peer is gone).
// status 1 (server has no RDMA control plane) or 2 (the server could not set
// up RDMA for this connection): both continue with Cap'n Proto over the same
// TCP connection, so mixed clusters work. A Cap'n Proto frame never starts
// with "MCRP" (that would be a 1.3-billion-segment message), so the server
// tells the two apart by peeking at the first four bytes.
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"
#include "stream_base.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mc::rpc::detail {

inline constexpr std::size_t hello_size = 64;
inline constexpr std::size_t hello_reply_size = 68;
inline constexpr char hello_magic[9] = "MCRPCRD1";
inline constexpr char reply_magic[9] = "MCRPCRA1";

inline constexpr char auth_magic[5] = "MCAU";
inline constexpr char auth_reply_magic[5] = "MCAS";
inline constexpr std::size_t auth_header_size = 8;
inline constexpr std::size_t auth_reply_size = 8;
enum class auth_status : std::uint32_t { accepted = 0, required = 1, refused = 2 };

/// Writes `v` little-endian into the 4 bytes at `p` (the handshake frames).
inline void put32(std::byte* p, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
/// Returns the little-endian u32 in the 4 bytes at `p`.
inline std::uint32_t get32(const std::byte* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::to_integer<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

/// Tokens accepted by a server (empty = auth off). Shared, immutable.
using token_list = std::shared_ptr<const std::vector<std::string>>;
/// The process-wide setting (auth.cpp). Thread-safe.
token_list current_auth_tokens();
/// Counts one refused connection in mc::rpc::auth_failures().
void note_auth_failure() noexcept;

/// Server side, on the connection's serving thread: waits (at most `timeout`)
/// for the first bytes, checks the auth frame against `tokens` (non-empty =
/// auth on) and returns the stream to run Cap'n Proto on. Errors:
/// access_denied (auth on: no auth frame, malformed frame, token missing or
/// not accepted), rpc_fail (peer closed, bad hello), timeout.
/// `rdma` false: RDMA hellos are answered status 1 (TCP).
mc::task<mc::result<kj::Own<stream_base>>> server_negotiate(boost::asio::ip::tcp::socket s, mc::duration timeout,
                                                            bool rdma, token_list tokens);

/// Client side, after the TCP connect: the auth frame (the process's first
/// token, or none), then plain TCP when the process uses the TCP control
/// plane; else the RDMA handshake, falling back to TCP on the same connection
/// when the server answers status 1/2 (`*fell_back` = true). `message`
/// explains failures without naming the peer (the caller prefixes it with
/// "RPC handshake with <endpoint>: "). Errors: access_denied (the server requires a token or
/// refused ours), rpc_fail, cancelled (the caller's deadline: the coroutine is
/// cancellable).
mc::task<mc::result<kj::Own<stream_base>>> client_negotiate(boost::asio::ip::tcp::socket s, bool* fell_back,
                                                            std::string* message);

/// Process-wide counters behind mc::rpc::connection_counts().
void note_connection(bool server, bool rdma, bool fell_back) noexcept;

// ---- implemented by rdma_stream.cpp (verbs) or rdma_none.cpp --------------

/// True when this build can carry RPC over RDMA.
bool rdma_rpc_built() noexcept;
/// Opens the process's RPC device (first usable of `names`; all when empty).
/// False with `*message` when none is usable. Idempotent after success.
bool rdma_rpc_open(const std::vector<std::string>& names, std::string* message);
/// Name of the opened device ("" when none).
std::string rdma_rpc_device_name();

/// Server: `hello` (64 bytes) has been read from `s`; answers it (status 1
/// when `enabled` is false or no device is open). Returns the
/// RDMA stream (owning `s`) on status 0, nullptr after answering 1/2 (the
/// caller continues with TCP on `s`), or an error (reply could not be sent).
mc::task<mc::result<kj::Own<stream_base>>> rdma_accept(boost::asio::ip::tcp::socket& s, const std::byte* hello,
                                                       bool enabled);
/// Client: sends the hello, reads the reply. RDMA stream on status 0;
/// nullptr on status 1/2 (continue with TCP on `s`, *message says why).
mc::task<mc::result<kj::Own<stream_base>>> rdma_connect(boost::asio::ip::tcp::socket& s, std::string* message);

}  // namespace mc::rpc::detail
