#pragma once
// Verbs objects of the RDMA transport (only rdma_*.cpp include this).
#include "mc/runtime/error.hpp"
#include "mc/transfer/engine.hpp"

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace mc::transfer::detail {

/// What a QP's owner tells its peer in the handshake (wire payload, 48 bytes).
struct qp_info {
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;
  std::uint16_t lid = 0;
  std::uint8_t mtu = 0;          // enum ibv_mtu
  std::uint8_t link_layer = 0;   // IBV_LINK_LAYER_*
  std::uint8_t max_rd_atomic = 0;
  std::array<std::uint8_t, 16> gid{};
};
inline constexpr std::size_t qp_info_size = 48;
void encode_qp_info(const qp_info& q, std::byte* out) noexcept;
qp_info decode_qp_info(const std::byte* in) noexcept;

/// The device that carries this engine's RDMA traffic: opened context,
/// protection domain, port attributes, chosen GID. Thread-safe after open
/// (verbs calls used here are thread-safe).
class rdma_context {
 public:
  explicit rdma_context(const engine_options& opts);  // throws std::invalid_argument
  ~rdma_context();
  rdma_context(const rdma_context&) = delete;
  rdma_context& operator=(const rdma_context&) = delete;

  /// ibv_reg_mr with LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE.
  mc::result<ibv_mr*> reg_mr(void* addr, std::size_t len) noexcept;
  /// Keeps `mr` as the MR of `token` (for deregistration and local lookups).
  void attach(std::uint64_t token, ibv_mr* mr);
  /// Deregisters the MR of `token` (idempotent).
  void detach(std::uint64_t token) noexcept;
  /// lkey of a registered MR that contains [addr, addr+len), if any.
  std::optional<std::uint32_t> local_lkey(const void* addr, std::size_t len) const;

  /// A fresh RC QP on `cq` (send queue depth `depth`), in INIT.
  ibv_qp* create_qp(ibv_cq* cq, std::uint32_t depth) noexcept;
  /// INIT -> RTR -> RTS towards `remote`; false on failure (errno kept).
  bool connect_qp(ibv_qp* qp, std::uint32_t local_psn, const qp_info& remote) noexcept;
  /// Our half of the handshake for `qp`.
  qp_info local_info(ibv_qp* qp, std::uint32_t psn) const noexcept;

  ibv_context* ctx() const noexcept { return ctx_; }
  ibv_pd* pd() const noexcept { return pd_; }
  /// CQ of target-side QPs: nothing is ever posted on them, so it is never polled.
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

  mutable std::shared_mutex m_;
  std::unordered_map<std::uint64_t, ibv_mr*> by_token_;
  std::multimap<std::uintptr_t, ibv_mr*> by_base_;
};

}  // namespace mc::transfer::detail
