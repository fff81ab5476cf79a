#pragma once
/// OFFSET allocator: hands out [offset, offset+size) ranges of an arena of
/// fixed capacity, in O(1) per allocate and free whatever the number of live
/// allocations (the two-level segregated fit of Mooncake's OFFSET allocator
/// and TLSF):
///  - free blocks sit in 8 bins per power of two of their size (in units of
///    `alignment`), found with two bitmaps (a 64-bit word of non-empty
///    power-of-two groups, one 8-bit word per group) and a count-trailing-zeros;
///  - allocate takes the first block of the smallest bin whose blocks are all
///    large enough ("good fit"); when that finds nothing it also looks at up to
///    `exact_fit_probe` blocks of the bin just below, so a request fails only
///    when no free block is big enough or every candidate was in that probed
///    bin and too small;
///  - free merges with the free neighbours in address order (neighbour links
///    kept in the nodes), so free blocks are always maximal.
/// Each live allocation and each free block is one node of a pool that grows
/// by doubling (amortised O(1)); freed nodes are reused. Not thread-safe: the
/// tier holding it locks.
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

namespace mc::tiered {

/// What allocate() returns and free() takes back: the byte offset, the rounded
/// size reserved and the allocator's node (an O(1) handle).
struct allocation {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;  ///< bytes reserved (rounded to the alignment)
  std::uint32_t node = 0;
};

class offset_allocator {
 public:
  /// Blocks of the bin below the good-fit bin that allocate() examines before
  /// it gives up (bounds the work of one call).
  static constexpr unsigned exact_fit_probe = 16;

  /// `alignment` must be a power of two (std::invalid_argument otherwise);
  /// capacity is rounded down to it.
  offset_allocator(std::uint64_t capacity, std::uint64_t alignment);

  /// The size actually reserved for a request of `size` bytes (>= 1 unit).
  std::uint64_t rounded(std::uint64_t size) const noexcept;

  /// A free range of rounded(size) bytes (aligned), or nullopt when none was
  /// found (see the class comment). O(1).
  std::optional<allocation> allocate(std::uint64_t size);

  /// Returns a range obtained from allocate(). A handle that is not live (a
  /// double free, a foreign or altered handle) is a broken invariant:
  /// std::logic_error, and nothing changes. O(1).
  void free(const allocation& a);

  struct stats {
    std::uint64_t capacity = 0;
    std::uint64_t used = 0;  ///< bytes reserved (rounded)
    std::uint64_t free = 0;
    std::uint64_t largest_free = 0;  ///< biggest free block
    std::uint64_t free_blocks = 0;
    std::uint64_t allocations = 0;  ///< live allocations
    /// 1 - largest_free / free: 0 when free space is one block.
    double fragmentation = 0;
  };
  /// O(bins + blocks in the largest non-empty bin): for metrics, not per operation.
  stats get_stats() const;

  std::uint64_t capacity() const noexcept { return capacity_; }
  std::uint64_t alignment() const noexcept { return alignment_; }
  std::uint64_t used() const noexcept { return used_; }

 private:
  static constexpr std::uint32_t none = UINT32_MAX;
  static constexpr unsigned bins_per_group = 8;
  static constexpr unsigned groups = 64;
  struct node {
    std::uint64_t offset = 0;                          ///< in units
    std::uint64_t size = 0;                            ///< in units
    std::uint32_t bin_prev = none, bin_next = none;    ///< free list of its bin
    std::uint32_t addr_prev = none, addr_next = none;  ///< neighbours in address order
    bool used = false;
    bool live = false;  ///< in use as a block (free or allocated), not in the spare list
  };

  std::uint32_t new_node(std::uint64_t offset, std::uint64_t size);
  void drop_node(std::uint32_t n) noexcept;
  /// Merges `next` (free, not in a bin, right after `keep` in address order) into `keep`.
  void absorb(std::uint32_t keep, std::uint32_t next) noexcept;
  void insert_free(std::uint32_t n) noexcept;
  void remove_free(std::uint32_t n) noexcept;
  std::uint32_t find_free(std::uint64_t units) const noexcept;
  std::uint32_t first_bin_at_least(unsigned bin) const noexcept;

  std::uint64_t capacity_;
  std::uint64_t alignment_;
  unsigned shift_ = 0;  ///< log2(alignment)
  std::uint64_t used_ = 0;
  std::uint64_t live_ = 0;
  std::uint64_t free_blocks_ = 0;
  std::uint64_t group_mask_ = 0;                 ///< bit g: group g has a non-empty bin
  std::array<std::uint8_t, groups> bin_mask_{};  ///< bit b: bin g*8+b is non-empty
  std::array<std::uint32_t, groups * bins_per_group> head_{};
  std::vector<node> nodes_;
  std::uint32_t spare_ = none;  ///< free-list of unused nodes (through bin_next)
};

}  // namespace mc::tiered
