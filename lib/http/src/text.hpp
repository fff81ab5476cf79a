#pragma once
// Text helpers of lib/http (internal).
#include <optional>
#include <string>
#include <string_view>

namespace mc::http::detail {

/// Decodes %XX escapes (and '+' as a space when `plus_is_space`); nullopt on a
/// malformed escape or an embedded NUL.
std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space);

/// Formats a sample value: integers without a fraction, +Inf/-Inf/NaN as
/// Prometheus spells them.
std::string format_number(double v);

}  // namespace mc::http::detail
