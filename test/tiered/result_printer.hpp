#pragma once
// doctest printing of config_result (test_support.hpp covers mc::result).
#include "mc/store/tier_config.hpp"

#include <doctest/doctest.h>

namespace doctest {
template <class T>
struct StringMaker<boost::system::result<T, mc::store::config_error>> {
  static String convert(const boost::system::result<T, mc::store::config_error>& r) {
    return r ? String("value") : String(("error: " + r.error().message).c_str());
  }
};
}  // namespace doctest
