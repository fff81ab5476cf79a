#pragma once
// Text helpers of lib/http (internal).
#include "mc/http/server.hpp"

#include <boost/json/value.hpp>

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

/// `s` as a JSON string value: bytes that are not valid UTF-8 (a key or a
/// message is arbitrary bytes) become U+FFFD, since JSON text is UTF-8;
/// boost::json::serialize escapes quotes, backslashes and control bytes.
boost::json::string json_string(std::string_view s);

/// `body` serialized (boost::json::serialize) plus a newline, as an
/// application/json response with `status`.
response json_response(unsigned status, const boost::json::value& body);

/// 405 {"error":"METHOD_NOT_ALLOWED"} with an `Allow` header listing `allow`
/// (e.g. "GET" or "GET, PUT, DELETE").
response method_not_allowed(std::string allow = "GET");

}  // namespace mc::http::detail
