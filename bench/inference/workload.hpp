#pragma once
// The data of one inference_bench case: a source and a destination buffer
// laid out like an engine's KV cache, the keys, each key's pieces in both,
// random bytes and checksums.
#include "baselines.hpp"

#include "bench_util.hpp"

#include <cstddef>
#include <cstring>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mc::bench::work {

/// Shape of one case: `keys` values of `value` bytes, each made of `pieces`
/// equal pieces. With pieces > 1 the buffers are paged like a KV cache: one
/// "layer" region per piece index, holding that piece of every key side by
/// side, so piece l of key k sits at l * keys * piece + k * piece (the pieces
/// of one key are keys * piece bytes apart: a gather is real).
struct shape {
  std::size_t keys = 1;
  std::size_t value = 4096;
  std::size_t pieces = 1;
  std::size_t bytes() const { return keys * value; }
  std::size_t piece() const { return value / pieces; }
};

/// 64-bit checksum (FNV-1a over 8-byte words, then the tail bytes).
inline std::uint64_t checksum(const base::pieces& ps) {
  std::uint64_t h = 1469598103934665603ull;
  for (auto& p : ps) {
    std::size_t i = 0;
    for (; i + 8 <= p.size(); i += 8) {
      std::uint64_t w;
      std::memcpy(&w, p.data() + i, 8);
      h = (h ^ w) * 1099511628211ull;
    }
    for (; i < p.size(); ++i) h = (h ^ static_cast<std::uint64_t>(p[i])) * 1099511628211ull;
  }
  return h;
}

/// Buffers, keys and pieces of one case.
class data {
 public:
  data(const std::string& prefix, shape s, bool huge_pages)
      : shape_(s),
        own_src_(std::in_place, s.bytes(), huge_pages),
        own_dst_(std::in_place, s.bytes(), huge_pages),
        src_(*own_src_),
        dst_(*own_dst_) {
    fill(prefix);
  }
  /// The same over buffers the caller provides (each at least shape.bytes()).
  data(const std::string& prefix, shape s, std::span<std::byte> src, std::span<std::byte> dst)
      : shape_(s), src_(src.first(s.bytes())), dst_(dst.first(s.bytes())) {
    fill(prefix);
  }
  data(const data&) = delete;
  data& operator=(const data&) = delete;

 private:
  void fill(const std::string& prefix) {
    const shape s = shape_;
    std::uint64_t x = 0x9e3779b97f4a7c15ull ^ std::hash<std::string>{}(prefix);
    for (std::size_t i = 0; i + 8 <= src_.size(); i += 8) {  // xorshift64: random, fast
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      std::memcpy(src_.data() + i, &x, 8);
    }
    for (std::size_t k = 0; k < s.keys; ++k) {
      keys_.push_back(prefix + "/" + std::to_string(k));
      src_pieces_.push_back(layout(src_, k));
      dst_pieces_.push_back(layout(dst_, k));
    }
  }

 public:
  const shape& dims() const { return shape_; }
  std::vector<std::string>& keys() { return keys_; }
  std::span<std::byte> src() { return src_; }
  std::span<std::byte> dst() { return dst_; }
  std::vector<base::pieces>& src_pieces() { return src_pieces_; }
  std::vector<base::pieces>& dst_pieces() { return dst_pieces_; }

  /// Zeroes the destination (before a verified get).
  void clear_dst() { std::memset(dst_.data(), 0, dst_.size()); }

  /// The first key whose destination pieces differ from its source pieces
  /// (by checksum), or -1.
  long first_mismatch() const {
    for (std::size_t k = 0; k < keys_.size(); ++k)
      if (checksum(src_pieces_[k]) != checksum(dst_pieces_[k])) return static_cast<long>(k);
    return -1;
  }

  /// Every piece of every key, in key order (the memcpy baseline's items).
  static std::vector<std::span<std::byte>> flat(const std::vector<base::pieces>& v) {
    std::vector<std::span<std::byte>> out;
    for (auto& p : v) out.insert(out.end(), p.begin(), p.end());
    return out;
  }

 private:
  base::pieces layout(std::span<std::byte> buf, std::size_t k) const {
    base::pieces ps;
    std::size_t piece = shape_.piece();
    for (std::size_t l = 0; l < shape_.pieces; ++l)
      ps.push_back(std::span<std::byte>(buf.data() + l * shape_.keys * piece + k * piece, piece));
    return ps;
  }

  shape shape_;
  std::optional<page_buffer> own_src_, own_dst_;
  std::span<std::byte> src_, dst_;
  std::vector<std::string> keys_;
  std::vector<base::pieces> src_pieces_, dst_pieces_;
};

}  // namespace mc::bench::work
