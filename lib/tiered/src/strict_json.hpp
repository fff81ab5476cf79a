#pragma once
// Strict JSON (RFC 8259, UTF-8) for configuration text, on Boost.JSON. Internal.
#include <boost/json/value.hpp>
#include <boost/system/result.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace mc::tiered::json {

/// The bounds of one document: text from a flag or a file is untrusted.
inline constexpr std::size_t max_text_bytes = std::size_t{1} << 20;
inline constexpr std::size_t max_depth = 16;           ///< nested objects/arrays
inline constexpr std::size_t max_string_bytes = 4096;  ///< a string value (a path fits)
inline constexpr std::size_t max_key_bytes = 256;
inline constexpr std::size_t max_object_members = 256;
inline constexpr std::size_t max_array_elements = 4096;

/// "line L col C" of byte `offset` of `text` (1-based; columns count bytes).
std::string position(std::string_view text, std::size_t offset);

/// Parses `text` as exactly one JSON document (whitespace around it allowed).
/// Stricter than boost::json::parse: a key repeated in one object is an error
/// (Boost 1.81 would keep the last one), an integer beyond int64 is an error
/// (Boost would turn it into a double), and the bounds above hold.
/// Returns the value, or a message "line L col C: what" (e.g.
/// `line 3 col 9: syntax error`, `line 1 col 40: duplicate key "type"`).
/// Never throws on bad input (std::bad_alloc aside). Thread-safe (no state).
boost::system::result<boost::json::value, std::string> parse_strict(std::string_view text);

}  // namespace mc::tiered::json
