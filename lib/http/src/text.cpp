#include "text.hpp"

#include "mc/http/server.hpp"

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
    case errc::ok: return 200;
    case errc::object_not_found:
    case errc::client_not_found: return 404;
    case errc::invalid_key:
    case errc::invalid_params: return 400;
    case errc::too_large:
    case errc::buffer_overflow: return 413;
    case errc::no_available_handle:
    case errc::no_space: return 507;
    case errc::timeout: return 504;
    case errc::rpc_fail:
    case errc::transfer_fail: return 502;
    case errc::shutting_down:
    case errc::unavailable_in_current_status: return 503;
    default: return 500;
  }
}

response error_response(errc e, std::string_view message) {
  std::string body = "{\"error\":" + json_quote(error_name(e)) + ",\"code\":" + std::to_string(static_cast<int>(e)) +
                     ",\"message\":" + json_quote(message.empty() ? error_message(e) : message) + "}\n";
  return response::json(status_for(e), std::move(body));
}

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace mc::http
