#pragma once
// The store's small-value writes over TransferEngine calls (engine::call, one
// TCP round trip, no Cap'n Proto): the requester sends up to max_keys values
// inside the request; the owner stores each as the RPC's inline writes do
// (commit and publish) and answers a code per value. Internal to lib/store
// (both ends are here). Little-endian, the header of small_read_wire.hpp
// with another kind:
//
//   request   u8 kind (2 = write)  u8 0  u16 count (1..max_keys)  u32 timeout_ms
//             then per value: u16 key length (1..max_key_bytes), u32 value
//             size (1..max_value), u64 replication tag, u64 version (the
//             put's, never 0: a call may reach the owner twice, and the same
//             version makes the second commit and publish idempotent), the
//             key's bytes, the value's bytes; nothing after the last value.
//   reply     per value, in order: i32 code (0 or an mc::errc value); nothing else.
//
// A malformed request is refused whole (invalid_params); a reply of another
// length fails the whole call at the requester (rpc_fail).
#include "small_read_wire.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace mc::store::detail::small_write {

namespace le = small_read::le;

inline constexpr std::uint8_t kind_write = 2;
inline constexpr std::size_t header_bytes = small_read::header_bytes;
inline constexpr std::size_t value_entry_bytes = 2 + 4 + 8 + 8;
inline constexpr std::size_t result_bytes = 4;
/// Values one call carries at most.
inline constexpr std::size_t max_keys = small_read::max_keys;
/// Largest value a call carries (the engine's request bound applies on top).
inline constexpr std::uint64_t max_value = small_read::max_inline;

/// One value as the requester sends it (pieces are concatenated).
struct value_out {
  std::string_view key;
  std::span<const std::span<const std::byte>> pieces;
  std::uint64_t size = 0;  // the pieces' total
  std::uint64_t tag = 0;
  std::uint64_t version = 0;
};

/// The request's size for `values` (whether they are within the bounds is
/// checked by encode_request).
inline std::uint64_t request_bytes(std::span<const value_out> values) noexcept {
  std::uint64_t n = header_bytes;
  for (auto& v : values) n += value_entry_bytes + v.key.size() + v.size;
  return n;
}

/// The reply's exact size for a request of `count` values.
inline constexpr std::uint64_t reply_bytes(std::size_t count) noexcept { return count * result_bytes; }

/// Whether one value is within the bounds above.
inline bool value_ok(std::string_view key, std::uint64_t size, std::uint64_t version) noexcept {
  return !key.empty() && key.size() <= max_key_bytes && size != 0 && size <= max_value && version != 0;
}

/// The request's bytes, or nullopt when `values` is outside the bounds above.
inline std::optional<std::vector<std::byte>> encode_request(std::span<const value_out> values,
                                                            std::uint32_t timeout_ms) {
  if (values.empty() || values.size() > max_keys) return std::nullopt;
  for (auto& v : values)
    if (!value_ok(v.key, v.size, v.version)) return std::nullopt;
  std::vector<std::byte> out;
  out.reserve(static_cast<std::size_t>(request_bytes(values)));
  small_read::put_header(out, kind_write, values.size(), timeout_ms);
  for (auto& v : values) {
    le::put<std::uint16_t>(out, static_cast<std::uint16_t>(v.key.size()));
    le::put<std::uint32_t>(out, static_cast<std::uint32_t>(v.size));
    le::put<std::uint64_t>(out, v.tag);
    le::put<std::uint64_t>(out, v.version);
    for (char c : v.key) out.push_back(static_cast<std::byte>(c));
    std::uint64_t total = 0;
    for (auto& p : v.pieces) {
      out.insert(out.end(), p.begin(), p.end());
      total += p.size();
    }
    if (total != v.size) return std::nullopt;
  }
  return out;
}

/// One value as the owner reads it (views into the request's bytes).
struct value_in {
  std::string_view key;
  std::span<const std::byte> data;
  std::uint64_t tag = 0;  // as sent: normalise before use
  std::uint64_t version = 0;
};

struct request {
  std::uint32_t timeout_ms = 0;
  std::vector<value_in> values;
};

/// Parses a peer's request (untrusted): every bound checked, nothing left over.
inline std::optional<request> decode_request(std::span<const std::byte> in) {
  const auto h = small_read::decode_header(in, kind_write);
  if (!h) return std::nullopt;
  const std::byte* p = in.data();
  const auto count = h->count;
  request r;
  r.timeout_ms = h->timeout_ms;
  std::size_t at = header_bytes;
  r.values.reserve(count);
  for (std::size_t k = 0; k < count; ++k) {
    if (in.size() - at < value_entry_bytes) return std::nullopt;
    const auto len = le::get<std::uint16_t>(p + at);
    const auto size = le::get<std::uint32_t>(p + at + 2);
    const auto tag = le::get<std::uint64_t>(p + at + 6);
    const auto version = le::get<std::uint64_t>(p + at + 14);
    at += value_entry_bytes;
    if (in.size() - at < len) return std::nullopt;
    std::string_view key(reinterpret_cast<const char*>(p + at), len);
    if (!value_ok(key, size, version)) return std::nullopt;
    at += len;
    if (in.size() - at < size) return std::nullopt;
    r.values.push_back({key, in.subspan(at, size), tag, version});
    at += size;
  }
  if (at != in.size()) return std::nullopt;
  return r;
}

/// Parses an owner's reply (untrusted) to a request of `count` values: the
/// codes, or nullopt unless it is exactly one code per value.
inline std::optional<std::vector<std::int32_t>> decode_reply(std::span<const std::byte> in, std::size_t count) {
  if (in.size() != reply_bytes(count)) return std::nullopt;
  std::vector<std::int32_t> out(count);
  for (std::size_t k = 0; k < count; ++k) out[k] = le::get<std::int32_t>(in.data() + k * result_bytes);
  return out;
}

}  // namespace mc::store::detail::small_write
