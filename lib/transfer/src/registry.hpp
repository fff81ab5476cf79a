#pragma once
// Registered regions: token -> region, thread-safe, O(1) lookup.
#include "mc/runtime/error.hpp"
#include "mc/transfer/types.hpp"

#include <atomic>
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
/// waits for at most one system call / memcpy chunk (<= 1 MiB) in progress.
/// Same-host grants (a peer process copies with process_vm_*) are counted in
/// `grants`; unregistration never waits for them: it closes the entry to new
/// grants, and outstanding ones end with their release, their connection or
/// their lease (the peer checks the lease before every <= 1 MiB chunk).
struct region_entry {
  std::uint64_t token = 0;
  std::uint64_t base = 0;
  std::uint64_t length = 0;
  region_access rights = region_access::remote_read_write;

  mutable std::shared_mutex access;
  bool revoked = false;  // guarded by access

  std::mutex grant_m;           // held only for a counter update, never across a wait
  std::size_t grants = 0;       // guarded by grant_m
  bool grants_closed = false;   // guarded by grant_m
  std::uint64_t lease_end = 0;  // latest grant lease (CLOCK_MONOTONIC ns), guarded by grant_m

  bool contains(std::uint64_t addr, std::uint64_t len) const noexcept {
    return addr >= base && len <= length && addr - base <= length - len;
  }
  std::byte* ptr(std::uint64_t addr) const noexcept {
    return reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(addr));
  }
  /// Takes a grant with a lease ending at `lease_end_ns` unless revoked.
  bool try_grant(std::uint64_t lease_end_ns);
  void release_grant();
};

/// CLOCK_MONOTONIC in nanoseconds (system-wide: comparable across processes).
std::uint64_t monotonic_ns() noexcept;

/// Returns a non-zero 64-bit value from getrandom() (region tokens, the
/// engine's instance id). Thread-safe. Throws std::runtime_error only when
/// the kernel refuses getrandom (never on a data path: construction and
/// registration).
std::uint64_t random_nonzero_u64();

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
  mc::result<std::uint64_t> add(void* addr, std::size_t len, region_access rights = region_access::remote_read_write,
                                std::optional<std::uint32_t> low32 = {});
  /// Revokes and forgets the region. Never waits for same-host grants (see
  /// engine::unregister_memory); waits only for a copy chunk in progress on
  /// another thread. out_of_range if unknown.
  mc::result<void> remove(std::uint64_t token);
  /// The region `token` names if [addr, addr+len) lies inside it and the
  /// region grants `need`. Every refusal (unknown token, range outside the
  /// token's region, access not granted, revoked) is access_denied: a peer
  /// never learns whether a range is registered. invalid_params for len == 0.
  mc::result<std::shared_ptr<region_entry>> find(std::uint64_t addr, std::uint64_t len, std::uint64_t token,
                                                 region_access need) const;
  std::size_t size() const;
  /// The access `token`'s region grants; nullopt when unknown.
  std::optional<region_access> rights(std::uint64_t token) const;
  /// Unregistrations that happened while a same-host peer held a grant.
  std::uint64_t revoked_with_grants() const noexcept { return revoked_with_grants_.load(std::memory_order_relaxed); }

  /// Called by remove() after revocation (RDMA: deregisters the MR). Set
  /// once before the first add(); must not throw.
  std::function<void(std::uint64_t token)> on_remove;

 private:
  mutable std::shared_mutex m_;
  std::unordered_map<std::uint64_t, std::shared_ptr<region_entry>> by_token_;
  std::atomic<std::uint64_t> revoked_with_grants_{0};
};

}  // namespace mc::transfer::detail
