#pragma once
/// OFFSET allocator: hands out [offset, offset+size) ranges of an arena of
/// fixed capacity. Best fit over a size-ordered free set plus an
/// address-ordered free map for coalescing: allocate and free are
/// O(log free_blocks). Not thread-safe (the tier holding it locks).
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace mc::tiered {

class offset_allocator {
 public:
  /// `alignment` must be a power of two; capacity is rounded down to it.
  offset_allocator(std::uint64_t capacity, std::uint64_t alignment);

  /// The size actually reserved for a request of `size` bytes (>= 1 unit).
  std::uint64_t rounded(std::uint64_t size) const noexcept;

  /// Offset of a free range of rounded(size) bytes (aligned), or nullopt.
  std::optional<std::uint64_t> allocate(std::uint64_t size);

  /// Returns a range obtained from allocate(offset, size) with the same size.
  /// Freeing something not allocated is a broken invariant (std::logic_error).
  void free(std::uint64_t offset, std::uint64_t size);

  struct stats {
    std::uint64_t capacity = 0;
    std::uint64_t used = 0;            ///< bytes reserved (rounded)
    std::uint64_t free = 0;
    std::uint64_t largest_free = 0;    ///< biggest single allocation that would succeed
    std::uint64_t free_blocks = 0;
    std::uint64_t allocations = 0;     ///< live allocations
    /// 1 - largest_free / free: 0 when free space is one block.
    double fragmentation = 0;
  };
  stats get_stats() const;

  std::uint64_t capacity() const noexcept { return capacity_; }
  std::uint64_t alignment() const noexcept { return alignment_; }
  std::uint64_t used() const noexcept { return used_; }

 private:
  void insert_free(std::uint64_t off, std::uint64_t size);
  void erase_free(std::map<std::uint64_t, std::uint64_t>::iterator it);

  std::uint64_t capacity_;
  std::uint64_t alignment_;
  std::uint64_t used_ = 0;
  std::uint64_t live_ = 0;
  std::map<std::uint64_t, std::uint64_t> by_offset_;              // offset -> size
  std::set<std::pair<std::uint64_t, std::uint64_t>> by_size_;     // (size, offset)
};

}  // namespace mc::tiered
