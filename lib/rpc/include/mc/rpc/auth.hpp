#pragma once
/// Optional shared-secret authentication of RPC connections (and, through the
/// apps, of the HTTP admin endpoints). KJ-free. Off by default.
///
/// A process holds at most two tokens: the first is *presented* on every RPC
/// connection it opens, and every listed token is *accepted* by its servers,
/// so a cluster rotates a token without downtime (deploy "new,old" everywhere,
/// then "new"). Every connection starts with an auth frame
///   "MCAU" | u32 length (LE, 0 = no token) | token bytes
/// before the RDMA hello and before Cap'n Proto, answered by
///   "MCAS" | u32 status (0 accepted, 1 token required, 2 token refused).
/// A server with auth on closes every connection whose first bytes are not an
/// auth frame with an accepted token (within server_options::handshake_timeout);
/// a server with auth off accepts connections with or without the frame.
/// The token travels in cleartext: see "Security model" in the top README.
#include "mc/runtime/error.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mc::rpc {

/// Longest token (bytes).
inline constexpr std::size_t max_auth_token_bytes = 256;
/// Tokens a process may hold at once (current + the one being rotated out).
inline constexpr std::size_t max_auth_tokens = 2;

/// "" when `token` is usable: 1..max_auth_token_bytes bytes of visible ASCII
/// (0x21-0x7e; no spaces, no control bytes, no commas). Else a one-line reason
/// that never contains the token itself. Thread-safe.
std::string check_auth_token(std::string_view token);

/// Parses "token[,token2]" (whitespace around each token is trimmed). Returns
/// the tokens, or errc::invalid_params with `*message` explaining why (empty
/// list, empty token, more than max_auth_tokens, a bad token). Thread-safe.
mc::result<std::vector<std::string>> parse_auth_tokens(std::string_view list, std::string* message);

/// Makes `tokens` the process-wide RPC auth setting: tokens[0] is presented on
/// RPC connections opened from now on, every one is accepted by servers whose
/// server_options::auth_tokens is unset. Empty = auth off (the default).
/// Returns "" or an error (too many / bad tokens; the setting is then
/// unchanged). Existing connections keep their state. Thread-safe; call at
/// startup, before any RPC.
std::string set_auth_tokens(std::vector<std::string> tokens);

/// The process-wide accepted tokens (copy; empty when auth is off). Thread-safe.
std::vector<std::string> auth_tokens();

/// Whether the process-wide setting has at least one token. Thread-safe.
bool auth_enabled() noexcept;

/// Whether `presented` equals one of `accepted`, compared in constant time
/// with respect to the tokens' contents (every accepted token is compared in
/// full; only lengths up to max_auth_token_bytes are ever examined). An empty
/// `presented` is never accepted. Thread-safe.
bool auth_token_accepted(std::string_view presented, const std::vector<std::string>& accepted) noexcept;

/// RPC connections refused for authentication by every server of this
/// process since start (missing, wrong or malformed auth frame). For /metrics
/// (`mc_auth_failures_total{surface="rpc"}`). Thread-safe.
std::uint64_t auth_failures() noexcept;

}  // namespace mc::rpc
