#pragma once
/// Transport of the RPC control plane, chosen with MC_RPC_PROTOCOL. KJ-free.
#include "mc/runtime/error.hpp"

#include <string>
#include <string_view>

namespace mc::rpc {

/// Control-plane transport.
enum class protocol { tcp, rdma };

/// "tcp" / "rdma".
std::string_view protocol_name(protocol p) noexcept;

/// Parses a protocol name. Empty -> tcp. "rdma" -> errc::unsupported (the RDMA
/// control plane is not part of this build); anything else ->
/// errc::invalid_params. `protocol_error_message` explains either failure.
mc::result<protocol> parse_protocol(std::string_view text);

/// Reads MC_RPC_PROTOCOL (unset or empty -> tcp). Thread-safe (getenv only).
mc::result<protocol> protocol_from_env();

/// Human message for a failed parse_protocol/protocol_from_env of `text`
/// (names the variable and the allowed values), suitable for a startup error.
std::string protocol_error_message(std::string_view text);

}  // namespace mc::rpc
