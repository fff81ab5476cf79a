#pragma once
// Registered regions: token -> region, thread-safe, O(1) lookup.
#include "mc/runtime/error.hpp"
#include "mc/transfer/types.hpp"

#include <algorithm>
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
#include <unordered_set>
#include <utility>
#include <vector>

namespace mc::transfer::detail {

/// Memory a registration owns that same-host peers may map
/// (engine::allocate_shared): a memfd, mapped once in this process. Unmapped
/// and closed when its last holder (the region handle, a registry entry, a
/// grant) lets go. Immutable after create().
struct shared_memory {
  int fd = -1;
  std::byte* addr = nullptr;
  std::size_t len = 0;
  std::uint64_t id = 0;  // random nonzero: names it to peers (grant answers, map requests)

  shared_memory() = default;
  shared_memory(const shared_memory&) = delete;
  shared_memory& operator=(const shared_memory&) = delete;
  ~shared_memory();
  /// A memfd of `len` bytes mapped read-write (MAP_SHARED). Errors:
  /// invalid_params (len 0), no_available_handle (memfd_create, ftruncate or
  /// mmap failed: out of memory, fd limit).
  static mc::result<std::shared_ptr<const shared_memory>> create(std::size_t len);
};

/// The allocate_shared_memory() allocation [addr, addr + len) lies in, or
/// null. Thread-safe.
std::shared_ptr<const shared_memory> shared_allocation_of(const void* addr, std::size_t len);

/// One registration. Bytes move into / out of it only while `access` is held
/// shared and `revoked` is false; unregistration takes it exclusively, so it
/// waits for at most one system call / memcpy chunk (<= 1 MiB) in progress.
/// Same-host grants (a peer process copies with process_vm_*) are counted in
/// `grants`; unregistration never waits for them: it closes the entry to new
/// grants, and outstanding ones end with their release, their connection or
/// their lease (the peer checks the lease before every <= 1 MiB chunk).
struct region_entry {
  std::uint64_t token = 0;
  std::uint64_t id = 0;  // registry-wide serial: the RAII handle removes exactly this entry
  std::uint64_t base = 0;
  std::uint64_t length = 0;
  region_access rights = region_access::remote_read_write;
  /// Derived registrations (registry::add_child): the parent's token, else 0.
  std::uint64_t parent = 0;
  /// The token of the top-level registration that owns the memory (and on
  /// RDMA the MRs): the entry's own token, or its root ancestor's.
  std::uint64_t root = 0;
  /// Tokens of live derived registrations (guarded by the registry's mutex).
  std::unordered_set<std::uint64_t> children;
  /// A scatter registration (registry::add_child_ranges): the only ranges
  /// [start, start + length) peers may touch, sorted by start, disjoint and
  /// not adjacent (merged); [base, base + length) is then their span. Empty:
  /// the whole of [base, base + length). Set before the entry is published,
  /// never changed after.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  /// The shared memory the root registration owns (engine::allocate_shared),
  /// else null; derived registrations share their root's. Set before the
  /// entry is published, never changed after.
  std::shared_ptr<const shared_memory> shared;

  mutable std::shared_mutex access;
  bool revoked = false;  // guarded by access

  std::mutex grant_m;           // held only for a counter update, never across a wait
  std::size_t grants = 0;       // guarded by grant_m
  bool grants_closed = false;   // guarded by grant_m
  std::uint64_t lease_end = 0;  // latest grant lease (CLOCK_MONOTONIC ns), guarded by grant_m

  /// [addr, addr + len) lies inside the region (inside one of `ranges`
  /// when it has them: never across a gap). O(log ranges).
  bool contains(std::uint64_t addr, std::uint64_t len) const noexcept {
    if (!(addr >= base && len <= length && addr - base <= length - len)) return false;
    if (ranges.empty()) return true;
    auto it = std::upper_bound(ranges.begin(), ranges.end(), addr,
                               [](std::uint64_t a, const auto& r) { return a < r.first; });
    if (it == ranges.begin()) return false;
    --it;
    return len <= it->second && addr - it->first <= it->second - len;
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

/// Returns a non-zero unpredictable 64-bit value (region tokens, the engine's
/// instance id) from this thread's ChaCha20 generator (csprng.hpp): seeded
/// from getrandom() once per thread, no system call per draw. Thread-safe.
/// Throws std::runtime_error only when the kernel refuses getrandom at a
/// thread's first draw (never on a data path: construction and registration).
std::uint64_t random_nonzero_u64();

/// Bit 63 of a derived registration's token when the registry makes RDMA
/// tokens ((random 31 bits | this bit) << 32 | rkey): an RDMA initiator
/// validates such a token with the target (rdma_check on the QP's control
/// connection) before its first WRITE/READ with it on a QP, because the NIC
/// only checks the parent's rkey. Top-level RDMA tokens have it clear.
inline constexpr std::uint64_t derived_token_bit = 1ull << 63;

/// What add() / add_child() return: the token peers use and the entry's id.
struct added_region {
  std::uint64_t token = 0;
  std::uint64_t id = 0;
};

/// A top-level registration that contains a range (registry::find_containing).
struct containing_region {
  std::uint64_t token = 0;
  std::uint64_t id = 0;
  std::uint64_t base = 0;
  std::uint64_t length = 0;
  region_access rights = region_access::local_only;
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
  /// Adds a region and returns its fresh random nonzero token and its id.
  /// With `low32` (the RDMA rkey) only the upper 32 bits are random (bit 63
  /// clear: see derived_token_bit).
  /// `derivable` false: a registration for one request, never returned by
  /// find_containing (so never the parent of another request's derived
  /// registration, which its revocation would revoke too). `shared`: the
  /// memory it owns (engine::allocate_shared), kept by the entry.
  mc::result<added_region> add(void* addr, std::size_t len, region_access rights = region_access::remote_read_write,
                               std::optional<std::uint32_t> low32 = {}, bool derivable = true,
                               std::shared_ptr<const shared_memory> shared = nullptr);
  /// Adds a derived registration of [addr, addr+len) inside the live region
  /// `parent_token` (and, when `parent_id` != 0, exactly that entry) with
  /// `rights` <= the parent's. Its token is fresh; when the registry makes
  /// RDMA tokens (rdma_tokens) it keeps the parent's low 32 bits (rkey) and
  /// sets derived_token_bit. No MR is created. Errors: out_of_range (parent
  /// unknown or unregistered), invalid_params (empty range, range not inside
  /// the parent, rights the parent does not grant).
  mc::result<added_region> add_child(std::uint64_t parent_token, std::uint64_t parent_id, std::uint64_t addr,
                                     std::uint64_t len, region_access rights);
  /// The most ranges one scatter registration takes (add_child_ranges).
  static constexpr std::size_t max_child_ranges = 4096;
  /// A derived registration of several ranges of the live region
  /// `parent_token` (exactly the entry `parent_id` when != 0) under ONE
  /// fresh token: peers may touch bytes inside any one of the ranges and
  /// nothing between them (a request across a gap is refused like one
  /// outside). `ranges` are (address, length) in any order; overlapping or
  /// adjacent ones are merged. Token, revocation and access as add_child.
  /// Errors: out_of_range (parent unknown or unregistered), invalid_params
  /// (no ranges or more than max_child_ranges, an empty range, a range not
  /// inside the parent or overflowing, rights the parent does not grant).
  /// One exclusive lock and one entry for all the ranges.
  mc::result<added_region> add_child_ranges(std::uint64_t parent_token, std::uint64_t parent_id,
                                            std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges,
                                            region_access rights);
  /// Revokes and forgets the region and every registration derived from it
  /// (recursively). Never waits for same-host grants (see
  /// engine::unregister_memory); waits only for a copy chunk in progress on
  /// another thread. `id` != 0: only when the entry is exactly that one.
  /// out_of_range if unknown.
  mc::result<void> remove(std::uint64_t token, std::uint64_t id = 0);
  /// The top-level (not derived) registration with the highest base that
  /// contains [addr, addr+len) and grants `need`, looking at the (at most
  /// 16) nearest registrations starting at or below `addr`. O(log n).
  std::optional<containing_region> find_containing(std::uint64_t addr, std::uint64_t len, region_access need) const;
  /// Tokens get the RDMA layout (see add / add_child). Set once before the
  /// first add().
  bool rdma_tokens = false;
  /// The token of the top-level registration owning `token`'s memory (itself
  /// for a top-level one); nullopt when unknown.
  std::optional<std::uint64_t> root_of(std::uint64_t token) const;
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

  /// Called by remove() after revocation of a top-level region (RDMA:
  /// deregisters the MR; derived ones have none). Set once before the first
  /// add(); must not throw.
  std::function<void(std::uint64_t token)> on_remove;

 private:
  std::uint64_t fresh_token(std::uint64_t mask, std::uint64_t set) const;  // m_ held
  /// Makes `e` (base, length, rights and ranges set) a child of `p` and
  /// publishes it. m_ held exclusively.
  added_region publish_child(region_entry& p, std::shared_ptr<region_entry> e);
  void revoke(region_entry& e);

  mutable std::shared_mutex m_;
  std::unordered_map<std::uint64_t, std::shared_ptr<region_entry>> by_token_;
  std::multimap<std::uint64_t, region_entry*> by_base_;  // derivable top-level entries only
  std::uint64_t next_id_ = 1;                            // guarded by m_
  std::atomic<std::uint64_t> revoked_with_grants_{0};
};

}  // namespace mc::transfer::detail
