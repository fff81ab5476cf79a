#pragma once
/// Plain data types of the transfer engine: what an RPC carries to describe a
/// peer's registered buffer, the transport kinds, the operation kinds. Light:
/// no asio, no KJ.
#include <cstdint>
#include <string>
#include <string_view>

namespace mc::transfer {

/// A byte range inside a buffer that its owner registered with its engine.
/// This is what the control plane (RPC) carries between peers.
/// `endpoint` is the owner's engine endpoint ("host:port", IPv6 as
/// "[addr]:port"), `token` the registration's access token (a random 64-bit
/// secret for TCP / same-host / in-process; the rkey for RDMA).
/// `instance` is the owner engine's engine::instance_id() as the control
/// plane (the master) published it: 0 = unknown, not checked; nonzero = the
/// same-host transport is used only when the engine behind the endpoint's
/// abstract socket reports exactly this id (else TCP).
struct remote_buffer {
  std::string endpoint;
  std::uint64_t address = 0;
  std::uint64_t length = 0;
  std::uint64_t token = 0;
  /// The owning engine's instance id (engine::instance_id()); 0 = unknown.
  std::uint64_t instance = 0;

  friend bool operator==(const remote_buffer&, const remote_buffer&) = default;
};

/// What peers may do with a registered region (least privilege). Requests a
/// region does not grant are refused with errc::access_denied, exactly like
/// a wrong token. RDMA memory regions get the matching verbs access flags.
enum class region_access : std::uint8_t {
  local_only = 0,         ///< only this process initiates on it (RDMA lkey; peers are refused)
  remote_read = 1,        ///< peers may READ it
  remote_write = 2,       ///< peers may WRITE into it
  remote_read_write = 3,  ///< both
};

/// True when `have` grants everything `need` asks for.
constexpr bool grants(region_access have, region_access need) noexcept {
  return (static_cast<std::uint8_t>(have) & static_cast<std::uint8_t>(need)) == static_cast<std::uint8_t>(need);
}

/// How bytes move between two engines.
enum class transport_kind : std::uint8_t {
  tcp = 0,         ///< sliced over pooled TCP connections (always available)
  same_host = 1,   ///< cross-memory attach (process_vm_readv/writev) after a token check
  in_process = 2,  ///< the peer engine lives in this process: memcpy after a token check
  rdma = 3,        ///< verbs (issue 8; not built yet)
};
inline constexpr std::size_t transport_kind_count = 4;

/// "tcp", "same_host", "in_process", "rdma".
constexpr std::string_view to_string(transport_kind k) noexcept {
  switch (k) {
    case transport_kind::tcp:
      return "tcp";
    case transport_kind::same_host:
      return "same_host";
    case transport_kind::in_process:
      return "in_process";
    case transport_kind::rdma:
      return "rdma";
  }
  return "unknown";
}

/// Direction of a transfer, seen from the initiator.
enum class op_kind : std::uint8_t {
  read = 0,   ///< remote -> local
  write = 1,  ///< local -> remote
};

}  // namespace mc::transfer
