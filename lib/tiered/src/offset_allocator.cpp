#include "mc/tiered/offset_allocator.hpp"

#include <bit>
#include <stdexcept>

namespace mc::tiered {

namespace {

// Sizes (in units) map to bins like a small float: 3 mantissa bits, so a bin
// spans at most 1/8 of its lower bound. Sizes below 8 have a bin each.
constexpr unsigned mantissa_bits = 3;

unsigned bin_down(std::uint64_t units) noexcept {
  if (units < (1u << mantissa_bits)) return static_cast<unsigned>(units);
  const unsigned h = 63 - static_cast<unsigned>(std::countl_zero(units));
  const unsigned exp = h - mantissa_bits + 1;
  const unsigned mant = static_cast<unsigned>(units >> (h - mantissa_bits)) & ((1u << mantissa_bits) - 1);
  return (exp << mantissa_bits) | mant;
}

/// The smallest bin whose every block holds `units`.
unsigned bin_up(std::uint64_t units) noexcept {
  const unsigned b = bin_down(units);
  if (units < (1u << mantissa_bits)) return b;
  const unsigned h = 63 - static_cast<unsigned>(std::countl_zero(units));
  const std::uint64_t low = units & ((std::uint64_t{1} << (h - mantissa_bits)) - 1);
  return low ? b + 1 : b;
}

}  // namespace

offset_allocator::offset_allocator(std::uint64_t capacity, std::uint64_t alignment)
    : capacity_(0), alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw std::invalid_argument("offset_allocator: alignment must be a power of two");
  shift_ = static_cast<unsigned>(std::countr_zero(alignment));
  capacity_ = capacity / alignment * alignment;
  head_.fill(none);
  nodes_.reserve(64);
  if (capacity_ > 0) insert_free(new_node(0, capacity_ >> shift_));
}

std::uint64_t offset_allocator::rounded(std::uint64_t size) const noexcept {
  if (size == 0) return alignment_;
  return (size + alignment_ - 1) & ~(alignment_ - 1);
}

std::uint32_t offset_allocator::new_node(std::uint64_t offset, std::uint64_t size) {
  std::uint32_t n;
  if (spare_ != none) {
    n = spare_;
    spare_ = nodes_[n].bin_next;
  } else {
    if (nodes_.size() >= none) throw std::length_error("offset_allocator: too many blocks");
    n = static_cast<std::uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  nodes_[n] = node{offset, size, none, none, none, none, false, true};
  return n;
}

void offset_allocator::drop_node(std::uint32_t n) noexcept {
  nodes_[n].live = false;
  nodes_[n].bin_next = spare_;
  spare_ = n;
}

void offset_allocator::insert_free(std::uint32_t n) noexcept {
  auto& nd = nodes_[n];
  const unsigned bin = bin_down(nd.size);
  nd.used = false;
  nd.bin_prev = none;
  nd.bin_next = head_[bin];
  if (head_[bin] != none) nodes_[head_[bin]].bin_prev = n;
  head_[bin] = n;
  bin_mask_[bin / bins_per_group] |= static_cast<std::uint8_t>(1u << (bin % bins_per_group));
  group_mask_ |= std::uint64_t{1} << (bin / bins_per_group);
  ++free_blocks_;
}

void offset_allocator::remove_free(std::uint32_t n) noexcept {
  auto& nd = nodes_[n];
  const unsigned bin = bin_down(nd.size);
  if (nd.bin_prev != none)
    nodes_[nd.bin_prev].bin_next = nd.bin_next;
  else
    head_[bin] = nd.bin_next;
  if (nd.bin_next != none) nodes_[nd.bin_next].bin_prev = nd.bin_prev;
  nd.bin_prev = nd.bin_next = none;
  if (head_[bin] == none) {
    auto& m = bin_mask_[bin / bins_per_group];
    m = static_cast<std::uint8_t>(m & ~(1u << (bin % bins_per_group)));
    if (m == 0) group_mask_ &= ~(std::uint64_t{1} << (bin / bins_per_group));
  }
  --free_blocks_;
}

std::uint32_t offset_allocator::first_bin_at_least(unsigned bin) const noexcept {
  const unsigned g = bin / bins_per_group;
  if (g >= groups) return none;
  const unsigned in_group = bin_mask_[g] & (0xFFu << (bin % bins_per_group)) & 0xFFu;
  if (in_group) return g * bins_per_group + static_cast<unsigned>(std::countr_zero(in_group));
  if (g + 1 >= groups) return none;
  const std::uint64_t later = group_mask_ & (~std::uint64_t{0} << (g + 1));
  if (!later) return none;
  const unsigned g2 = static_cast<unsigned>(std::countr_zero(later));
  return g2 * bins_per_group + static_cast<unsigned>(std::countr_zero(static_cast<unsigned>(bin_mask_[g2])));
}

std::uint32_t offset_allocator::find_free(std::uint64_t units) const noexcept {
  const unsigned up = bin_up(units);
  if (auto bin = first_bin_at_least(up); bin != none) return head_[bin];
  // Good fit found nothing: blocks big enough can only be in the bin below.
  const unsigned down = bin_down(units);
  if (down == up) return none;
  std::uint32_t n = head_[down];
  for (unsigned probed = 0; n != none && probed < exact_fit_probe; ++probed, n = nodes_[n].bin_next)
    if (nodes_[n].size >= units) return n;
  return none;
}

std::optional<allocation> offset_allocator::allocate(std::uint64_t size) {
  if (size > capacity_) return std::nullopt;
  const std::uint64_t units = rounded(size) >> shift_;
  const std::uint32_t n = find_free(units);
  if (n == none) return std::nullopt;
  // Reserve the split node first: a failure to grow leaves the state intact.
  const bool split = nodes_[n].size > units;
  std::uint32_t rest = none;
  if (split) rest = new_node(nodes_[n].offset + units, nodes_[n].size - units);
  remove_free(n);
  auto& nd = nodes_[n];
  if (split) {
    auto& r = nodes_[rest];
    r.addr_prev = n;
    r.addr_next = nd.addr_next;
    if (nd.addr_next != none) nodes_[nd.addr_next].addr_prev = rest;
    nd.addr_next = rest;
    nd.size = units;
    insert_free(rest);
  }
  nd.used = true;
  used_ += units << shift_;
  ++live_;
  return allocation{nd.offset << shift_, units << shift_, n};
}

void offset_allocator::free(const allocation& a) {
  if (a.node >= nodes_.size() || !nodes_[a.node].live || !nodes_[a.node].used ||
      (nodes_[a.node].offset << shift_) != a.offset || (nodes_[a.node].size << shift_) != a.size)
    throw std::logic_error("offset_allocator::free: not a live allocation (double free or foreign handle)");
  std::uint32_t n = a.node;
  used_ -= a.size;
  --live_;
  if (const auto p = nodes_[n].addr_prev; p != none && !nodes_[p].used) {
    remove_free(p);
    absorb(p, n);
    n = p;
  }
  if (const auto q = nodes_[n].addr_next; q != none && !nodes_[q].used) {
    remove_free(q);
    absorb(n, q);
  }
  insert_free(n);
}

void offset_allocator::absorb(std::uint32_t keep, std::uint32_t next) noexcept {
  nodes_[keep].size += nodes_[next].size;
  nodes_[keep].addr_next = nodes_[next].addr_next;
  if (nodes_[next].addr_next != none) nodes_[nodes_[next].addr_next].addr_prev = keep;
  drop_node(next);
}

offset_allocator::stats offset_allocator::get_stats() const {
  stats s;
  s.capacity = capacity_;
  s.used = used_;
  s.free = capacity_ - used_;
  s.free_blocks = free_blocks_;
  s.allocations = live_;
  if (group_mask_) {
    const unsigned g = 63 - static_cast<unsigned>(std::countl_zero(group_mask_));
    const unsigned bin = g * bins_per_group + 7 -
                         static_cast<unsigned>(std::countl_zero(static_cast<std::uint32_t>(bin_mask_[g]) << 24));
    for (auto n = head_[bin]; n != none; n = nodes_[n].bin_next)
      s.largest_free = std::max(s.largest_free, nodes_[n].size << shift_);
  }
  s.fragmentation = s.free ? 1.0 - static_cast<double>(s.largest_free) / static_cast<double>(s.free) : 0.0;
  return s;
}

}  // namespace mc::tiered
