#pragma once
// doctest printing of config_result (test_support.hpp covers mc::result), and
// the error message of a configuration that must be refused.
#include "mc/tiered/tier_config.hpp"

#include <doctest/doctest.h>

#include <string>
#include <string_view>

namespace doctest {
template <class T>
struct StringMaker<boost::system::result<T, mc::tiered::config_error>> {
  static String convert(const boost::system::result<T, mc::tiered::config_error>& r) {
    return r ? String("value") : String(("error: " + r.error().message).c_str());
  }
};
}  // namespace doctest

namespace mc::test {

/// The message of the JSON tier configuration `text`, which must be refused
/// with invalid_params.
inline std::string json_error(std::string_view text) {
  auto r = mc::tiered::parse_tiers_json(text);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == mc::errc::invalid_params);
  return r.error().message;
}

inline bool has(const std::string& s, std::string_view what) { return s.find(what) != std::string::npos; }

}  // namespace mc::test
