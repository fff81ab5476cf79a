#pragma once
// Verbs objects of the RDMA transport (only rdma_*.cpp include this).
#include "mc/runtime/error.hpp"
#include "mc/transfer/engine.hpp"

#include "mc/verbs/device.hpp"

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

using mc::verbs::decode_qp_info;
using mc::verbs::encode_qp_info;
using mc::verbs::qp_info;
using mc::verbs::qp_info_size;
using mc::verbs::random_psn;

/// The device that carries this engine's RDMA traffic plus the engine's MR
/// bookkeeping. Thread-safe.
class rdma_context : public mc::verbs::device {
 public:
  explicit rdma_context(const engine_options& opts);  // throws std::invalid_argument
  ~rdma_context();

  /// Keeps `mr` as the MR of `token` (for deregistration and local lookups).
  void attach(std::uint64_t token, ibv_mr* mr);
  /// Deregisters the MR of `token` (idempotent).
  void detach(std::uint64_t token) noexcept;
  /// lkey of a registered MR that contains [addr, addr+len), if any.
  std::optional<std::uint32_t> local_lkey(const void* addr, std::size_t len) const;

 private:
  mutable std::shared_mutex m_;
  std::unordered_map<std::uint64_t, ibv_mr*> by_token_;
  std::multimap<std::uintptr_t, ibv_mr*> by_base_;
};

}  // namespace mc::transfer::detail
