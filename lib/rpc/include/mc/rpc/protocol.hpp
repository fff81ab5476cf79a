#pragma once
/// Transport of the RPC control plane, chosen with MC_RPC_PROTOCOL. KJ-free.
///
/// tcp: Cap'n Proto over TCP. rdma: every connection is still opened over TCP
/// (bootstrap + liveness), then Cap'n Proto runs over an RC queue pair (RDMA
/// SEND/RECV) negotiated on it. A server whose process uses rdma also serves
/// TCP clients, and an rdma client continues over TCP (with a warning) when
/// the server has no RDMA control plane, so mixed clusters keep working.
#include "mc/runtime/error.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace mc::rpc {

/// Control-plane transport.
enum class protocol { tcp, rdma };

/// "tcp" / "rdma".
std::string_view protocol_name(protocol p) noexcept;

/// Parses a protocol name. Empty or "tcp" -> tcp; "rdma" -> rdma
/// (errc::unsupported when this build has no verbs support); anything else
/// -> errc::invalid_params. `protocol_error_message` explains a failure.
mc::result<protocol> parse_protocol(std::string_view text);

/// Reads MC_RPC_PROTOCOL (unset or empty -> tcp). Thread-safe (getenv only).
mc::result<protocol> protocol_from_env();

/// Human message for a failed parse_protocol/protocol_from_env of `text`
/// (names the variable and the allowed values), suitable for a startup error.
std::string protocol_error_message(std::string_view text);

/// Makes `p` the control-plane transport of RPC connections opened (client)
/// and accepted (server) from now on in this process; existing connections
/// keep theirs. rdma opens the RDMA device now: the first usable one of
/// `device_names` (every device when empty). Returns "" on success, else a
/// one-line error (no usable device, no verbs in this build); the protocol is
/// then unchanged. Thread-safe.
std::string use_protocol(protocol p, const std::vector<std::string>& device_names);

/// Reads MC_RPC_PROTOCOL once per process and applies it with use_protocol.
/// Later calls return the first call's outcome. "" on success, else a
/// startup error naming the variable.
std::string use_protocol_from_env(const std::vector<std::string>& device_names);

/// The control-plane transport used for new connections (tcp by default).
protocol current_protocol() noexcept;

/// Name of the RDMA device of the control plane ("" until rdma was applied).
std::string rdma_device_name();

}  // namespace mc::rpc
