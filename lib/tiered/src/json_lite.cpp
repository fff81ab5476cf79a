#include "json_lite.hpp"

#include <cctype>
#include <charconv>
#include <set>

namespace mc::store::json {
namespace {

class parser {
 public:
  explicit parser(std::string_view t) : t_(t) {}

  bool run(value& out, std::string& err) {
    ws();
    if (!parse_value(out, 0)) return fail_out(err);
    ws();
    if (i_ != t_.size()) {
      msg_ = "unexpected trailing characters";
      return fail_out(err);
    }
    return true;
  }

 private:
  bool fail_out(std::string& err) {
    std::size_t line = 1, col = 1;
    for (std::size_t k = 0; k < i_ && k < t_.size(); ++k) {
      if (t_[k] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    err = "line " + std::to_string(line) + " col " + std::to_string(col) + ": " + msg_;
    return false;
  }
  bool fail(const char* m) {
    msg_ = m;
    return false;
  }
  void ws() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r')) ++i_;
  }
  bool lit(std::string_view w) {
    if (t_.substr(i_, w.size()) != w) return fail("invalid literal");
    i_ += w.size();
    return true;
  }

  bool parse_value(value& out, int depth) {
    if (depth > 64) return fail("nesting too deep");
    if (i_ >= t_.size()) return fail("unexpected end of input");
    switch (t_[i_]) {
      case '{': return parse_object(out, depth);
      case '[': return parse_array(out, depth);
      case '"': {
        std::string s;
        if (!parse_string(s)) return false;
        out.v = std::move(s);
        return true;
      }
      case 't': out.v = true; return lit("true");
      case 'f': out.v = false; return lit("false");
      case 'n': out.v = null_t{}; return lit("null");
      default: return parse_number(out);
    }
  }

  bool parse_object(value& out, int depth) {
    auto obj = std::make_shared<object>();
    std::set<std::string> seen;
    ++i_;
    ws();
    if (i_ < t_.size() && t_[i_] == '}') {
      ++i_;
      out.v = obj;
      return true;
    }
    for (;;) {
      ws();
      if (i_ >= t_.size() || t_[i_] != '"') return fail("expected a string key");
      std::string key;
      if (!parse_string(key)) return false;
      if (!seen.insert(key).second) {
        msg_ = "duplicate key \"" + key + "\"";
        return false;
      }
      ws();
      if (i_ >= t_.size() || t_[i_] != ':') return fail("expected ':'");
      ++i_;
      ws();
      value v;
      if (!parse_value(v, depth + 1)) return false;
      obj->emplace_back(std::move(key), std::move(v));
      ws();
      if (i_ < t_.size() && t_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < t_.size() && t_[i_] == '}') {
        ++i_;
        out.v = obj;
        return true;
      }
      return fail("expected ',' or '}'");
    }
  }

  bool parse_array(value& out, int depth) {
    auto arr = std::make_shared<array>();
    ++i_;
    ws();
    if (i_ < t_.size() && t_[i_] == ']') {
      ++i_;
      out.v = arr;
      return true;
    }
    for (;;) {
      ws();
      value v;
      if (!parse_value(v, depth + 1)) return false;
      arr->push_back(std::move(v));
      ws();
      if (i_ < t_.size() && t_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < t_.size() && t_[i_] == ']') {
        ++i_;
        out.v = arr;
        return true;
      }
      return fail("expected ',' or ']'");
    }
  }

  static void utf8(std::string& s, unsigned cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  bool hex4(unsigned& cp) {
    if (i_ + 4 > t_.size()) return fail("truncated \\u escape");
    cp = 0;
    for (int k = 0; k < 4; ++k) {
      char c = t_[i_++];
      cp <<= 4;
      if (c >= '0' && c <= '9') cp |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') cp |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') cp |= static_cast<unsigned>(c - 'A' + 10);
      else return fail("invalid \\u escape");
    }
    return true;
  }

  bool parse_string(std::string& s) {
    ++i_;  // opening quote
    while (i_ < t_.size()) {
      char c = t_[i_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return fail("control character in string");
      if (c != '\\') {
        s += c;
        continue;
      }
      if (i_ >= t_.size()) break;
      char e = t_[i_++];
      switch (e) {
        case '"': s += '"'; break;
        case '\\': s += '\\'; break;
        case '/': s += '/'; break;
        case 'b': s += '\b'; break;
        case 'f': s += '\f'; break;
        case 'n': s += '\n'; break;
        case 'r': s += '\r'; break;
        case 't': s += '\t'; break;
        case 'u': {
          unsigned cp;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {
            unsigned lo;
            if (t_.substr(i_, 2) != "\\u") return fail("unpaired surrogate");
            i_ += 2;
            if (!hex4(lo) || lo < 0xDC00 || lo > 0xDFFF) return fail("unpaired surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          utf8(s, cp);
          break;
        }
        default: return fail("invalid escape");
      }
    }
    return fail("unterminated string");
  }

  bool parse_number(value& out) {
    std::size_t start = i_;
    if (i_ < t_.size() && t_[i_] == '-') ++i_;
    if (i_ >= t_.size() || !std::isdigit(static_cast<unsigned char>(t_[i_]))) return fail("invalid value");
    if (t_[i_] == '0' && i_ + 1 < t_.size() && std::isdigit(static_cast<unsigned char>(t_[i_ + 1])))
      return fail("leading zero in number");
    bool integral = true;
    while (i_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[i_]))) ++i_;
    if (i_ < t_.size() && t_[i_] == '.') {
      integral = false;
      ++i_;
      if (i_ >= t_.size() || !std::isdigit(static_cast<unsigned char>(t_[i_]))) return fail("invalid number");
      while (i_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[i_]))) ++i_;
    }
    if (i_ < t_.size() && (t_[i_] == 'e' || t_[i_] == 'E')) {
      integral = false;
      ++i_;
      if (i_ < t_.size() && (t_[i_] == '+' || t_[i_] == '-')) ++i_;
      if (i_ >= t_.size() || !std::isdigit(static_cast<unsigned char>(t_[i_]))) return fail("invalid number");
      while (i_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[i_]))) ++i_;
    }
    auto text = t_.substr(start, i_ - start);
    if (integral) {
      std::int64_t n;
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
      if (ec == std::errc()) {
        out.v = n;
        return true;
      }
      return fail("integer out of range");
    }
    double d;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
    if (ec != std::errc()) return fail("invalid number");
    out.v = d;
    return true;
  }

  std::string_view t_;
  std::size_t i_ = 0;
  std::string msg_;
};

}  // namespace

bool parse(std::string_view text, value& out, std::string& error) { return parser(text).run(out, error); }

}  // namespace mc::store::json
