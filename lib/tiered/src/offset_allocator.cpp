#include "mc/tiered/offset_allocator.hpp"

#include <stdexcept>

namespace mc::tiered {

offset_allocator::offset_allocator(std::uint64_t capacity, std::uint64_t alignment)
    : capacity_(0), alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw std::invalid_argument("offset_allocator: alignment must be a power of two");
  capacity_ = capacity / alignment * alignment;
  if (capacity_ > 0) insert_free(0, capacity_);
}

std::uint64_t offset_allocator::rounded(std::uint64_t size) const noexcept {
  if (size == 0) return alignment_;
  return (size + alignment_ - 1) & ~(alignment_ - 1);
}

void offset_allocator::insert_free(std::uint64_t off, std::uint64_t size) {
  by_offset_.emplace(off, size);
  by_size_.emplace(size, off);
}

void offset_allocator::erase_free(std::map<std::uint64_t, std::uint64_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  by_offset_.erase(it);
}

std::optional<std::uint64_t> offset_allocator::allocate(std::uint64_t size) {
  if (size > capacity_) return std::nullopt;
  const auto need = rounded(size);
  auto it = by_size_.lower_bound({need, 0});  // best fit, lowest offset among equals
  if (it == by_size_.end()) return std::nullopt;
  const auto [blk_size, off] = *it;
  by_size_.erase(it);
  by_offset_.erase(off);
  if (blk_size > need) insert_free(off + need, blk_size - need);
  used_ += need;
  ++live_;
  return off;
}

void offset_allocator::free(std::uint64_t offset, std::uint64_t size) {
  const auto len = rounded(size);
  if (offset % alignment_ != 0 || offset + len > capacity_ || len > used_)
    throw std::logic_error("offset_allocator::free: range was not allocated");
  auto next = by_offset_.lower_bound(offset);
  if (next != by_offset_.end() && next->first < offset + len)
    throw std::logic_error("offset_allocator::free: double free (overlaps a free block)");
  std::uint64_t start = offset, end = offset + len;
  if (next != by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > offset)
      throw std::logic_error("offset_allocator::free: double free (overlaps a free block)");
    if (prev->first + prev->second == offset) {
      start = prev->first;
      erase_free(prev);
    }
  }
  if (next != by_offset_.end() && next->first == end) {
    end += next->second;
    erase_free(next);
  }
  insert_free(start, end - start);
  used_ -= len;
  --live_;
}

offset_allocator::stats offset_allocator::get_stats() const {
  stats s;
  s.capacity = capacity_;
  s.used = used_;
  s.free = capacity_ - used_;
  s.largest_free = by_size_.empty() ? 0 : by_size_.rbegin()->first;
  s.free_blocks = by_offset_.size();
  s.allocations = live_;
  s.fragmentation = s.free ? 1.0 - static_cast<double>(s.largest_free) / static_cast<double>(s.free) : 0.0;
  return s;
}

}  // namespace mc::tiered
