#pragma once
// Verbs objects of the RDMA transport (only rdma_*.cpp include this).
#include "mc/runtime/error.hpp"
#include "mc/transfer/engine.hpp"

#include "mc/verbs/device.hpp"

#include <infiniband/verbs.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <memory>
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

/// The least ibv access flags a region with `rights` needs.
int mr_access_of(region_access rights) noexcept;

/// Bytes / work requests one device carried as initiator (slices that
/// completed successfully).
struct rdma_device_counters {
  std::atomic<std::uint64_t> ops{0}, bytes{0};
};

/// The devices that carry this engine's RDMA traffic plus the engine's MR
/// bookkeeping. Thread-safe.
///
/// Several devices (multi-rail): with an explicit engine_options::device_names
/// list every usable listed device is opened, in list order (device index k).
/// An empty list keeps the single-device behaviour (the first usable device).
/// Every region gets one MR per device; the registry token carries device 0's
/// rkey, the target serves the rkeys of devices k > 0 (wire op rdma_rkey).
class rdma_context {
 public:
  explicit rdma_context(const engine_options& opts);  // throws std::invalid_argument
  ~rdma_context();
  rdma_context(const rdma_context&) = delete;
  rdma_context& operator=(const rdma_context&) = delete;

  std::size_t device_count() const noexcept { return devs_.size(); }
  mc::verbs::device& dev(std::size_t k) const noexcept { return *devs_[k]; }
  rdma_device_counters& counters(std::size_t k) const noexcept { return counters_[k]; }

  /// Registers [addr, addr+len) on every device (all or nothing) with verbs
  /// access flags `access` (see mr_access_of).
  mc::result<std::vector<ibv_mr*>> reg_all(void* addr, std::size_t len, int access) noexcept;
  /// Keeps `mrs` (one per device) as the MRs of `token`.
  void attach(std::uint64_t token, std::vector<ibv_mr*> mrs);
  /// Deregisters the MRs of `token` (idempotent).
  void detach(std::uint64_t token) noexcept;
  /// lkey on device `k` of a registered MR that contains [addr, addr+len).
  std::optional<std::uint32_t> local_lkey(std::size_t k, const void* addr, std::size_t len) const;
  /// rkey on device `k` of the region whose full token is `token`.
  std::optional<std::uint32_t> rkey(std::uint64_t token, std::size_t k) const;

  /// Served (target-side) QPs, for engine::fence. `key` identifies the QP
  /// (its owner), `fd` its control connection, `peer` the endpoint its
  /// initiator announced ("" = none). remove_served before the QP is
  /// destroyed and before `fd` is closed.
  void add_served(const void* key, ibv_qp* qp, int fd, std::string peer);
  void remove_served(const void* key) noexcept;
  /// Moves the served QPs of `peer` (and those without an announced peer)
  /// to the error state, shuts their control connections down and forgets
  /// them; returns how many.
  std::size_t fence_served(const std::string& peer) noexcept;

 private:
  std::vector<std::unique_ptr<mc::verbs::device>> devs_;
  std::unique_ptr<rdma_device_counters[]> counters_;
  mutable std::shared_mutex m_;
  std::unordered_map<std::uint64_t, std::vector<ibv_mr*>> by_token_;
  std::multimap<std::uintptr_t, const std::vector<ibv_mr*>*> by_base_;
  struct served_qp {
    ibv_qp* qp = nullptr;
    int fd = -1;
    std::string peer;
  };
  std::mutex served_m_;  // held for map updates and ibv_modify_qp / shutdown calls only
  std::unordered_map<const void*, served_qp> served_;
};

}  // namespace mc::transfer::detail
