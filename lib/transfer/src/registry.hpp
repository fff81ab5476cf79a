#pragma once
// Registered regions: token -> region, thread-safe, O(1) lookup.
#include "mc/runtime/error.hpp"

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace mc::transfer::detail {

/// One registration. Bytes move into / out of it only while `access` is held
/// shared and `revoked` is false; unregistration takes it exclusively, so it
/// waits for at most one system call / memcpy chunk in progress.
/// Same-host grants (a peer process copies with process_vm_*) are counted in
/// `grants`; unregistration waits for them to be released.
struct region_entry {
  std::uint64_t token = 0;
  std::uint64_t base = 0;
  std::uint64_t length = 0;

  mutable std::shared_mutex access;
  bool revoked = false;  // guarded by access

  std::mutex grant_m;
  std::condition_variable grant_cv;
  std::size_t grants = 0;       // guarded by grant_m
  bool grants_closed = false;   // guarded by grant_m

  bool contains(std::uint64_t addr, std::uint64_t len) const noexcept {
    return addr >= base && len <= length && addr - base <= length - len;
  }
  std::byte* ptr(std::uint64_t addr) const noexcept {
    return reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(addr));
  }
  /// Takes a grant unless revoked.
  bool try_grant();
  void release_grant();
};

/// Shared lock on a region's access while bytes move; false when revoked.
class access_guard {
 public:
  explicit access_guard(const region_entry& e) : lock_(e.access), ok_(!e.revoked) {}
  explicit operator bool() const noexcept { return ok_; }

 private:
  std::shared_lock<std::shared_mutex> lock_;
  bool ok_;
};

class registry {
 public:
  /// Adds a region and returns its fresh random nonzero token. With
  /// `low32` (the RDMA rkey) only the upper 32 bits are random.
  mc::result<std::uint64_t> add(void* addr, std::size_t len, std::optional<std::uint32_t> low32 = {});
  /// Revokes and forgets the region; blocks as documented on
  /// engine::unregister_memory. out_of_range if unknown.
  mc::result<void> remove(std::uint64_t token);
  /// The region `token` names if [addr, addr+len) lies inside it.
  /// access_denied: the token is unknown but the range lies inside some
  /// registered region; out_of_range otherwise (or range outside the token's
  /// region); invalid_params for len == 0.
  mc::result<std::shared_ptr<region_entry>> find(std::uint64_t addr, std::uint64_t len,
                                                 std::uint64_t token) const;
  std::size_t size() const;

  /// Called by remove() after revocation (RDMA: deregisters the MR). Set
  /// once before the first add(); must not throw.
  std::function<void(std::uint64_t token)> on_remove;

 private:
  mutable std::shared_mutex m_;
  std::unordered_map<std::uint64_t, std::shared_ptr<region_entry>> by_token_;
  std::multimap<std::uint64_t, std::shared_ptr<region_entry>> by_base_;
};

}  // namespace mc::transfer::detail
