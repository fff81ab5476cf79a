#include "text.hpp"

#include "mc/http/server.hpp"

#include <boost/json/serialize.hpp>

#include <cmath>
#include <cstdio>

namespace mc::http {

namespace detail {

namespace {
int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      int h = hex(s[i + 1]), l = hex(s[i + 2]);
      if (h < 0 || l < 0) return std::nullopt;
      c = static_cast<char>(h * 16 + l);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      c = ' ';
    }
    if (c == '\0') return std::nullopt;
    out.push_back(c);
  }
  return out;
}

namespace {
/// Length of the valid UTF-8 sequence at the start of `s` (RFC 3629: no
/// overlong forms, no surrogates, at most U+10FFFF), 0 when there is none.
std::size_t utf8_sequence(std::string_view s) {
  auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  auto cont = [&](std::size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  unsigned char c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;   // overlong
    if (c == 0xED && b(1) >= 0xA0) return 0;  // a surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && b(1) >= 0x90) return 0;  // beyond U+10FFFF
    return 4;
  }
  return 0;  // a continuation byte, C0/C1, F5..FF
}
}  // namespace

boost::json::string json_string(std::string_view s) {
  boost::json::string out;
  out.reserve(s.size());
  while (!s.empty()) {
    std::size_t n = utf8_sequence(s);
    if (n == 0) {
      out.append("\xEF\xBF\xBD");  // U+FFFD REPLACEMENT CHARACTER
      n = 1;
    } else {
      out.append(s.substr(0, n));
    }
    s.remove_prefix(n);
  }
  return out;
}

response json_response(unsigned status, const boost::json::value& body) {
  std::string text = boost::json::serialize(body);
  text.push_back('\n');
  return response::json(status, std::move(text));
}

response method_not_allowed(std::string allow) {
  auto r = json_response(405, {{"error", "METHOD_NOT_ALLOWED"}});
  r.headers.emplace_back("Allow", std::move(allow));
  return r;
}

std::string format_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

}  // namespace detail

std::optional<std::string> request::query_param(std::string_view name) const {
  std::string_view q = query;
  while (!q.empty()) {
    auto amp = q.find('&');
    auto part = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view{} : q.substr(amp + 1);
    auto eq = part.find('=');
    auto k = detail::percent_decode(part.substr(0, eq), true);
    if (!k || *k != name) continue;
    if (eq == std::string_view::npos) return std::string{};
    return detail::percent_decode(part.substr(eq + 1), true);
  }
  return std::nullopt;
}

response response::make(unsigned status, std::string body, std::string content_type) {
  response r;
  r.status = status;
  r.text = std::move(body);
  r.content_type = std::move(content_type);
  return r;
}

unsigned status_for(errc e) noexcept {
  switch (e) {
    case errc::ok:
      return 200;
    case errc::object_not_found:
    case errc::client_not_found:
      return 404;
    case errc::invalid_key:
    case errc::invalid_params:
      return 400;
    case errc::too_large:
    case errc::buffer_overflow:
      return 413;
    case errc::no_available_handle:
    case errc::no_space:
      return 507;
    case errc::timeout:
      return 504;
    case errc::rpc_fail:
    case errc::transfer_fail:
      return 502;
    case errc::access_denied:
      return 403;
    case errc::object_already_exists:
    case errc::object_has_lease:
    case errc::invalid_version:
      return 409;
    case errc::shutting_down:
    case errc::unavailable_in_current_status:
    case errc::unavailable_in_current_mode:
    case errc::replica_is_not_ready:
    case errc::overloaded:  // "retry later": the caller adds Retry-After
      return 503;
    default:
      return 500;
  }
}

response error_response(errc e, std::string_view message) {
  if (message.empty()) message = error_message(e);
  return detail::json_response(status_for(e), {{"error", detail::json_string(error_name(e))},
                                               {"code", static_cast<int>(e)},
                                               {"message", detail::json_string(message)}});
}

}  // namespace mc::http
