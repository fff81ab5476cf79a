#pragma once
/// Tier configuration: the spec's JSON (`{"tiers":[...]}`), the same content
/// as TOML (`[[tiers]]` tables), capacities with units.
#include "mc/runtime/error.hpp"

#include <boost/system/result.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mc::tiered {

enum class tier_type { dram, ssd };

/// "DRAM" / "SSD".
std::string_view tier_type_name(tier_type t) noexcept;

/// One tier. Higher `priority` is preferred for new values.
struct tier_config {
  tier_type type = tier_type::dram;
  std::uint64_t capacity = 0;  ///< bytes (> 0)
  int priority = 0;
  std::string allocator = "OFFSET";  ///< only "OFFSET"
  std::string path;                  ///< SSD: directory holding the tier's cache file
  bool prefault = false;             ///< DRAM: populate the arena at start (after MADV_HUGEPAGE)
};

/// A configuration error: always errc::invalid_params for parse errors (other
/// codes for start-up failures such as an unwritable SSD path), plus a message
/// naming the field and the problem, e.g. `tiers[1].path: missing (required
/// for SSD tiers)`.
struct config_error {
  mc::errc code = mc::errc::invalid_params;
  std::string message;
};

/// Result type of configuration functions. `.value()` on an error throws
/// std::invalid_argument with the message (for start-up code).
template <class T>
using config_result = boost::system::result<T, config_error>;

/// ADL hook used by config_result<T>::value().
[[noreturn]] inline void throw_exception_from_error(const config_error& e, const boost::source_location&) {
  throw std::invalid_argument(e.message);
}

/// Parses the spec's JSON verbatim: `{"tiers":[{"type":"DRAM","capacity":536870912,
/// "priority":100,"allocator_type":"OFFSET"}]}`. `json_or_path` is inline JSON
/// (first non-blank character `{`) or the path of a file containing it.
/// Fields per tier: type (DRAM | SSD, aliases STORAGE, DISK; case-insensitive),
/// capacity (number or string with unit), priority (integer, default 0),
/// allocator_type (OFFSET), path (SSD only, required), prefault (bool, DRAM).
/// Unknown fields, types and allocators are errors. The result is sorted by
/// descending priority (stable). The JSON is strict (RFC 8259, UTF-8, no
/// comments): a key repeated in one object, an integer beyond int64, more
/// than 1 MiB of text (inline or file), nesting deeper than 16, strings over
/// 4096 bytes are errors; syntax errors read "tiers JSON: line L col C: ...".
config_result<std::vector<tier_config>> parse_tiers_json(std::string_view json_or_path);

/// The same content from a TOML document: an array of tables `[[tiers]]` with
/// the same fields (`type`, `capacity`, `priority`, `allocator_type`, `path`,
/// `prefault`). Other top-level keys of the document are ignored (it is the
/// client's whole config file); unknown keys inside `[[tiers]]` are errors.
config_result<std::vector<tier_config>> parse_tiers_toml(std::string_view toml_text);

/// "512MiB", "16GB", "4 KiB", "1024", "2g": units B, K/KB/KiB, M/MB/MiB,
/// G/GB/GiB, T/TB/TiB (case-insensitive; all powers of 1024, as Mooncake does).
config_result<std::uint64_t> parse_capacity(std::string_view text);

/// Checks a parsed list (non-empty, capacities > 0, SSD tiers have paths, at
/// most one SSD tier per path); parse_* call it.
config_result<void> validate_tiers(const std::vector<tier_config>& tiers);

}  // namespace mc::tiered
