#pragma once
// The store's small-value reads over TransferEngine calls (engine::call, one
// TCP round trip, no Cap'n Proto): the requester names up to max_keys keys,
// each with the largest value it accepts inline; the owner answers, per key,
// a code and a size, and the bytes of every value it found within that
// bound. Internal to lib/store (both ends are here). Little-endian:
//
//   request   u8 kind (1 = read)  u8 0  u16 count (1..max_keys)  u32 timeout_ms
//             then per key: u16 key length (1..max_key_bytes), u32 inline_max
//             (1..max_inline), the key's bytes; nothing after the last key.
//   reply     per key, in order: i32 code (0 or an mc::errc value), u64 size
//             (the value's size when found, also with an error such as
//             invalid_params for a value above inline_max; else 0), then for
//             each key whose code is 0, in order, its `size` bytes.
//
// The reply is at most reply_capacity() bytes of its request. A malformed
// request is refused whole (invalid_params); a reply that breaks these rules
// fails the whole call at the requester (rpc_fail).
#include "mc/runtime/error.hpp"
#include "mc/store/data_manager.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace mc::store::detail::small_read {

inline constexpr std::uint8_t kind_read = 1;
inline constexpr std::size_t header_bytes = 8;
inline constexpr std::size_t key_entry_bytes = 6;
inline constexpr std::size_t result_bytes = 12;
/// Keys one call names at most.
inline constexpr std::size_t max_keys = 256;
/// Largest inline_max a key may ask for (the service's inline value bound
/// applies on top).
inline constexpr std::uint64_t max_inline = std::uint64_t{1} << 20;

namespace le {
template <class T>
inline void put(std::vector<std::byte>& out, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<std::byte>(static_cast<std::uint64_t>(v) >> (8 * i)));
}
template <class T>
inline T get(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= std::uint64_t(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return static_cast<T>(v);
}
}  // namespace le

/// Writes the header both call kinds share (kind, 0, count, timeout_ms).
inline void put_header(std::vector<std::byte>& out, std::uint8_t kind, std::size_t count, std::uint32_t timeout_ms) {
  le::put<std::uint8_t>(out, kind);
  le::put<std::uint8_t>(out, 0);
  le::put<std::uint16_t>(out, static_cast<std::uint16_t>(count));
  le::put<std::uint32_t>(out, timeout_ms);
}

struct header {
  std::uint16_t count = 0;
  std::uint32_t timeout_ms = 0;
};

/// Parses the shared header of a `kind` request (untrusted): nullopt unless
/// it is there, names `kind` with a 0 byte after it, and a count of 1..max_keys.
inline std::optional<header> decode_header(std::span<const std::byte> in, std::uint8_t kind) {
  if (in.size() < header_bytes) return std::nullopt;
  const std::byte* p = in.data();
  if (le::get<std::uint8_t>(p) != kind || le::get<std::uint8_t>(p + 1) != 0) return std::nullopt;
  header h{le::get<std::uint16_t>(p + 2), le::get<std::uint32_t>(p + 4)};
  if (h.count == 0 || h.count > max_keys) return std::nullopt;
  return h;
}

struct key_ask {
  std::string_view key;
  std::uint32_t inline_max = 0;
};

/// The reply bytes a request asking `asks` may take at most.
inline std::uint64_t reply_capacity(std::span<const key_ask> asks) noexcept {
  std::uint64_t n = 0;
  for (auto& a : asks) n += result_bytes + a.inline_max;
  return n;
}

/// The request's bytes, or nullopt when `asks` is outside the bounds above.
inline std::optional<std::vector<std::byte>> encode_request(std::span<const key_ask> asks, std::uint32_t timeout_ms) {
  if (asks.empty() || asks.size() > max_keys) return std::nullopt;
  std::vector<std::byte> out;
  std::size_t n = header_bytes;
  for (auto& a : asks) {
    if (a.key.empty() || a.key.size() > max_key_bytes || a.inline_max == 0 || a.inline_max > max_inline)
      return std::nullopt;
    n += key_entry_bytes + a.key.size();
  }
  out.reserve(n);
  put_header(out, kind_read, asks.size(), timeout_ms);
  for (auto& a : asks) {
    le::put<std::uint16_t>(out, static_cast<std::uint16_t>(a.key.size()));
    le::put<std::uint32_t>(out, a.inline_max);
    for (char c : a.key) out.push_back(static_cast<std::byte>(c));
  }
  return out;
}

struct request {
  std::uint32_t timeout_ms = 0;
  std::vector<key_ask> asks;  // keys point into the decoded bytes
};

/// Parses a peer's request (untrusted): every bound checked, nothing left over.
inline std::optional<request> decode_request(std::span<const std::byte> in) {
  const auto h = decode_header(in, kind_read);
  if (!h) return std::nullopt;
  const std::byte* p = in.data();
  const auto count = h->count;
  request r;
  r.timeout_ms = h->timeout_ms;
  std::size_t at = header_bytes;
  r.asks.reserve(count);
  for (std::size_t k = 0; k < count; ++k) {
    if (in.size() - at < key_entry_bytes) return std::nullopt;
    const auto len = le::get<std::uint16_t>(p + at);
    const auto inline_max = le::get<std::uint32_t>(p + at + 2);
    at += key_entry_bytes;
    if (len == 0 || len > max_key_bytes || inline_max == 0 || inline_max > max_inline || in.size() - at < len)
      return std::nullopt;
    r.asks.push_back({std::string_view(reinterpret_cast<const char*>(p + at), len), inline_max});
    at += len;
  }
  if (at != in.size()) return std::nullopt;
  return r;
}

/// One key's answer as the requester reads it.
struct answer {
  std::int32_t code = 0;
  std::uint64_t size = 0;
  std::span<const std::byte> value;  // code 0: the value's bytes (inside the reply)
};

/// Parses an owner's reply (untrusted) to a request of `asks`: nullopt unless
/// there is exactly one entry per key, every value is within its key's
/// inline_max, and the bytes add up exactly.
inline std::optional<std::vector<answer>> decode_reply(std::span<const std::byte> in, std::span<const key_ask> asks) {
  const std::size_t entries = asks.size() * result_bytes;
  if (in.size() < entries) return std::nullopt;
  std::vector<answer> out(asks.size());
  std::size_t at = entries;
  for (std::size_t k = 0; k < asks.size(); ++k) {
    const std::byte* e = in.data() + k * result_bytes;
    out[k].code = le::get<std::int32_t>(e);
    out[k].size = le::get<std::uint64_t>(e + 4);
    if (out[k].code != 0) continue;
    if (out[k].size > asks[k].inline_max || in.size() - at < out[k].size) return std::nullopt;
    out[k].value = in.subspan(at, static_cast<std::size_t>(out[k].size));
    at += static_cast<std::size_t>(out[k].size);
  }
  if (at != in.size()) return std::nullopt;
  return out;
}

}  // namespace mc::store::detail::small_read
