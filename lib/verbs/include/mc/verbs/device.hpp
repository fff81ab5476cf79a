#pragma once
/// One opened RDMA device (verbs context, protection domain, active port,
/// chosen GID) and the RC queue-pair plumbing shared by the TransferEngine's
/// verbs transport and the RPC control plane over RDMA. Includes
/// <infiniband/verbs.h>: include it from .cpp files only.
#include "mc/runtime/error.hpp"

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mc::verbs {

/// Which device to open.
struct device_options {
  /// Candidate device names (ibv_get_device_name); empty = every device. The
  /// first one with an active port (and, on RoCE, a usable GID) is opened.
  std::vector<std::string> device_names;
  /// GID table index; -1 = automatic (RoCE v2 with an IPv4-mapped address first).
  int gid_index = -1;
  /// Prefix of error messages, e.g. "transfer: protocol 'rdma'".
  std::string who = "rdma";
};

/// What a QP's owner tells its peer in a handshake (wire payload, 48 bytes,
/// little endian).
struct qp_info {
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;
  std::uint16_t lid = 0;
  std::uint8_t mtu = 0;         // enum ibv_mtu
  std::uint8_t link_layer = 0;  // IBV_LINK_LAYER_*
  std::uint8_t max_rd_atomic = 0;
  std::array<std::uint8_t, 16> gid{};
};
inline constexpr std::size_t qp_info_size = 48;
/// Writes the 48-byte wire form of `q` to `out` (reserved bytes 0).
void encode_qp_info(const qp_info& q, std::byte* out) noexcept;
/// Reads the 48 bytes at `in` without checking them (our own encodings).
qp_info decode_qp_info(const std::byte* in) noexcept;
/// Reads a peer's qp_info from the `n` bytes at `in`: exactly qp_info_size
/// bytes that encode_qp_info could have written (reserved bytes 13..15 and
/// 32..47 zero) with every field in range - QP number 2 .. 2^24-1 (0 and 1
/// are the special QPs), PSN < 2^24, MTU 0 (unknown) .. IBV_MTU_4096, link
/// layer at most IBV_LINK_LAYER_ETHERNET, max_rd_atomic at most 16. Errors:
/// invalid_params.
/// Pure, thread-safe.
mc::result<qp_info> parse_qp_info(const std::byte* in, std::size_t n) noexcept;

/// A random 24-bit packet sequence number.
std::uint32_t random_psn() noexcept;

/// Device names visible to verbs (empty when there is none or no verbs).
std::vector<std::string> list_devices();

/// The opened device. Thread-safe after construction (the verbs calls made
/// through it are thread-safe).
class device {
 public:
  /// Throws std::invalid_argument with a clear message (prefixed by
  /// opts.who) when no device is usable.
  explicit device(const device_options& opts);
  ~device();
  device(const device&) = delete;
  device& operator=(const device&) = delete;

  /// ibv_reg_mr with `access` (ibv_access_flags; default LOCAL_WRITE |
  /// REMOTE_READ | REMOTE_WRITE). Errors: buffer_overflow (ENOMEM, e.g. the
  /// memlock limit), io_error.
  mc::result<ibv_mr*> reg_mr(void* addr, std::size_t len,
                             int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                          IBV_ACCESS_REMOTE_WRITE) noexcept;

  /// A fresh RC QP on `cq` (send queue `depth`, receive queue `recv_depth`),
  /// moved to INIT. nullptr on failure (errno kept).
  ibv_qp* create_qp(ibv_cq* cq, std::uint32_t depth, std::uint32_t recv_depth = 1) noexcept;
  /// INIT -> RTR -> RTS towards `remote`; false on failure (errno kept).
  bool connect_qp(ibv_qp* qp, std::uint32_t local_psn, const qp_info& remote) noexcept;
  /// Our half of the handshake for `qp`.
  qp_info local_info(ibv_qp* qp, std::uint32_t psn) const noexcept;

  ibv_context* ctx() const noexcept { return ctx_; }
  ibv_pd* pd() const noexcept { return pd_; }
  /// CQ of target-side QPs that never post anything (never polled).
  ibv_cq* passive_cq() const noexcept { return passive_cq_; }
  const std::string& name() const noexcept { return name_; }
  std::uint64_t max_msg_size() const noexcept { return port_.max_msg_sz; }
  int gid_index() const noexcept { return gid_index_; }

 private:
  std::string name_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* passive_cq_ = nullptr;
  std::uint8_t port_num_ = 1;
  ibv_port_attr port_{};
  ibv_device_attr dev_attr_{};
  int gid_index_ = 0;
  ibv_gid gid_{};
};

}  // namespace mc::verbs
