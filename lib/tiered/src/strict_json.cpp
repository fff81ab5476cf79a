// Strict JSON on Boost.JSON's basic_parser: the handler of boost::json::parser
// (a value_stack) plus duplicate-key and integer-range checks, which Boost
// 1.81's parser has no option for (it keeps the last of duplicate keys).
#include "strict_json.hpp"

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/value_stack.hpp>

#include <set>
#include <vector>

namespace mc::tiered::json {

namespace {

namespace bj = boost::json;

class strict_handler {
 public:
  static constexpr std::size_t max_object_size = max_object_members;
  static constexpr std::size_t max_array_size = max_array_elements;
  static constexpr std::size_t max_key_size = max_key_bytes;
  static constexpr std::size_t max_string_size = max_string_bytes;

  bj::value_stack st;
  std::string problem;  ///< set when the handler (not the grammar) refused the input

  bool on_document_begin(bj::error_code&) { return true; }
  bool on_document_end(bj::error_code&) { return true; }
  bool on_object_begin(bj::error_code&) {
    keys_.emplace_back();
    return true;
  }
  bool on_object_end(std::size_t n, bj::error_code&) {
    keys_.pop_back();
    st.push_object(n);
    return true;
  }
  bool on_array_begin(bj::error_code&) { return true; }
  bool on_array_end(std::size_t n, bj::error_code&) {
    st.push_array(n);
    return true;
  }
  bool on_key_part(bj::string_view s, std::size_t, bj::error_code&) {
    key_.append(s.data(), s.size());
    st.push_chars(s);
    return true;
  }
  bool on_key(bj::string_view s, std::size_t, bj::error_code& ec) {
    key_.append(s.data(), s.size());
    if (!keys_.back().insert(key_).second) return refuse(ec, "duplicate key \"" + key_ + "\"");
    key_.clear();
    st.push_key(s);
    return true;
  }
  bool on_string_part(bj::string_view s, std::size_t, bj::error_code&) {
    st.push_chars(s);
    return true;
  }
  bool on_string(bj::string_view s, std::size_t, bj::error_code&) {
    st.push_string(s);
    return true;
  }
  bool on_number_part(bj::string_view s, bj::error_code&) {
    number_.append(s.data(), s.size());
    return true;
  }
  bool on_int64(std::int64_t i, bj::string_view, bj::error_code&) {
    number_.clear();
    st.push_int64(i);
    return true;
  }
  bool on_uint64(std::uint64_t, bj::string_view, bj::error_code& ec) { return refuse(ec, "integer out of range"); }
  bool on_double(double d, bj::string_view s, bj::error_code& ec) {
    number_.append(s.data(), s.size());
    // Boost hands an integer beyond uint64 over as a double: refuse it.
    if (number_.find_first_of(".eE") == std::string::npos) return refuse(ec, "integer out of range");
    number_.clear();
    st.push_double(d);
    return true;
  }
  bool on_bool(bool b, bj::error_code&) {
    st.push_bool(b);
    return true;
  }
  bool on_null(bj::error_code&) {
    st.push_null();
    return true;
  }
  bool on_comment_part(bj::string_view, bj::error_code&) { return true; }
  bool on_comment(bj::string_view, bj::error_code&) { return true; }

 private:
  bool refuse(bj::error_code& ec, std::string why) {
    problem = std::move(why);
    ec = bj::error::syntax;  // any code stops the parser; `problem` says what
    return false;
  }

  std::vector<std::set<std::string, std::less<>>> keys_;  ///< keys seen, per open object
  std::string key_;                                       ///< the key being read (it may come in parts)
  std::string number_;                                    ///< the number being read (it may come in parts)
};

}  // namespace

std::string position(std::string_view text, std::size_t offset) {
  std::size_t line = 1, col = 1;
  for (std::size_t k = 0; k < offset && k < text.size(); ++k) {
    if (text[k] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return "line " + std::to_string(line) + " col " + std::to_string(col);
}

boost::system::result<boost::json::value, std::string> parse_strict(std::string_view text) {
  using failure = boost::system::result<bj::value, std::string>;
  if (text.size() > max_text_bytes)
    return failure(boost::system::in_place_error,
                   "document of " + std::to_string(text.size()) + " bytes exceeds " + std::to_string(max_text_bytes));
  bj::parse_options opt;
  opt.max_depth = max_depth;  // comments, trailing commas and invalid UTF-8 stay refused (the defaults)
  bj::basic_parser<strict_handler> p(opt);
  p.handler().st.reset();
  bj::error_code ec;
  std::size_t used = p.write_some(false, text.data(), text.size(), ec);
  if (!ec && used != text.size()) {
    return failure(boost::system::in_place_error, position(text, used) + ": unexpected trailing characters");
  }
  if (ec) {
    std::string what = p.handler().problem.empty() ? ec.message() : p.handler().problem;
    return failure(boost::system::in_place_error, position(text, used) + ": " + what);
  }
  return p.handler().st.release();
}

}  // namespace mc::tiered::json
