#pragma once
// Scatter-gather helpers of the store tests: random pieces in a shuffled
// memory order, their bytes gathered back, const views.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

namespace mc::test {

using mut_pieces = std::vector<std::span<std::byte>>;
using const_pieces = std::vector<std::span<const std::byte>>;

/// Cuts `buf` into pieces of random sizes (1 .. max_piece) and returns them
/// in a shuffled memory order (piece k of the value is not next to k + 1).
inline mut_pieces random_pieces(std::vector<std::uint8_t>& buf, std::size_t max_piece, std::uint64_t seed) {
  std::vector<std::pair<std::size_t, std::size_t>> cuts;  // [offset, length) in buf
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t off = 0; off < buf.size();) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    auto n = std::min<std::size_t>(buf.size() - off, 1 + x % max_piece);
    cuts.emplace_back(off, n);
    off += n;
  }
  // Value order = a permutation of memory order.
  std::vector<std::size_t> order(cuts.size());
  std::iota(order.begin(), order.end(), 0);
  for (std::size_t i = order.size(); i > 1; --i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::swap(order[i - 1], order[x % i]);
  }
  mut_pieces out;
  for (auto k : order) out.emplace_back(reinterpret_cast<std::byte*>(buf.data()) + cuts[k].first, cuts[k].second);
  return out;
}

/// The first `n` bytes laid over `pieces`, concatenated in order.
inline std::vector<std::uint8_t> gather(const mut_pieces& pieces, std::size_t n) {
  std::vector<std::uint8_t> out;
  for (auto& p : pieces) {
    auto take = std::min(p.size(), n - out.size());
    auto* b = reinterpret_cast<const std::uint8_t*>(p.data());
    out.insert(out.end(), b, b + take);
    if (out.size() == n) break;
  }
  return out;
}

inline const_pieces to_const(const mut_pieces& p) {
  const_pieces out;
  for (auto& s : p) out.emplace_back(s.data(), s.size());
  return out;
}

}  // namespace mc::test
