#pragma once
// Helpers of the batch data path shared by client_batch.cpp (gets) and
// client_put.cpp (puts). Internal to lib/store.
#include "mc/store/client_service.hpp"

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace mc::store::detail {

template <class Span>
inline std::uint64_t room_of(const std::vector<Span>& pieces) {
  std::uint64_t n = 0;
  for (auto& p : pieces) n += p.size();
  return n;
}

/// Splits `items` into waves that fit one RPC: at most `max_items` items
/// (itself at most max_batch_items), at most `inline_budget` inline bytes and
/// `transfer_cap` transferred bytes (a single larger item forms a wave of its own).
template <class Item, class IsInline, class SizeOf>
std::vector<std::vector<Item*>> waves_of(const std::vector<Item*>& items, std::size_t max_items,
                                         std::uint64_t inline_budget, std::uint64_t transfer_cap, IsInline is_inline,
                                         SizeOf size_of) {
  max_items = std::clamp<std::size_t>(max_items, 1, max_batch_items);
  std::vector<std::vector<Item*>> out;
  std::uint64_t in_bytes = 0, tx_bytes = 0;
  for (auto* it : items) {
    const auto size = size_of(*it);
    const bool inl = is_inline(*it);
    bool full = out.empty() || out.back().size() >= max_items;
    if (!full && inl && in_bytes + size > inline_budget) full = true;
    if (!full && !inl && tx_bytes > 0 && tx_bytes + size > transfer_cap) full = true;
    if (full) {
      out.emplace_back();
      in_bytes = tx_bytes = 0;
    }
    out.back().push_back(it);
    (inl ? in_bytes : tx_bytes) += size;
  }
  return out;
}

/// `pieces` cut to exactly `size` bytes.
template <class Span>
std::vector<Span> trimmed(const std::vector<Span>& pieces, std::uint64_t size) {
  std::vector<Span> out;
  for (auto& p : pieces) {
    if (size == 0) break;
    auto n = static_cast<std::size_t>(std::min<std::uint64_t>(p.size(), size));
    if (n > 0) out.push_back(p.first(n));
    size -= n;
  }
  return out;
}

}  // namespace mc::store::detail
