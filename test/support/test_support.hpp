#pragma once
/// Small helpers shared by the test suites (not a public header).
#include "mc/runtime/error.hpp"
#include "mc/runtime/runtime.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace mc::test {

/// Deterministic random bytes.
inline std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::uint8_t> v(n);
  std::mt19937_64 g(seed);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    auto x = g();
    for (int k = 0; k < 8; ++k) v[i + k] = static_cast<std::uint8_t>(x >> (8 * k));
  }
  auto x = g();
  for (; i < n; ++i, x >>= 8) v[i] = static_cast<std::uint8_t>(x);
  return v;
}

/// FNV-1a 64 checksum. Not instrumented by ThreadSanitizer: tests checksum
/// buffers that a runtime thread filled from a socket, and the happens-before
/// edge (the peer's completion reply arrives over TCP after the bytes) runs
/// through the kernel, which TSan cannot see.
__attribute__((no_sanitize("thread"))) inline std::uint64_t checksum(const void* p, std::size_t n) {
  auto* b = static_cast<const std::uint8_t*>(p);
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/// A scratch directory under $TMPDIR (default /var/tmp, which is disk-backed
/// so O_DIRECT works), removed by the caller.
std::string make_temp_dir(const char* prefix);
void remove_tree(const std::string& path);

/// `prefix` followed by `n` in decimal. Tests build numbered keys with it
/// instead of `"k" + std::to_string(n)`: GCC 12 at -O3 reports a false
/// -Wrestrict inside operator+(const char*, string&&).
inline std::string numbered(const char* prefix, std::uint64_t n) {
  std::string s(prefix);
  s += std::to_string(n);
  return s;
}

/// Lets every other ready handler of this coroutine's executor run once
/// (a post to it and back).
inline mc::task<void> yield_once() {
  co_await boost::asio::post(co_await boost::asio::this_coro::executor, boost::asio::use_awaitable);
}

}  // namespace mc::test

/// Lets CHECK(result) print "ok" or the error instead of requiring an
/// operator<< for every value type.
namespace doctest {
template <class T>
struct StringMaker<boost::system::result<T, boost::system::error_code>> {
  static String convert(const boost::system::result<T, boost::system::error_code>& r) {
    if (r.has_value()) return "ok";
    return String(r.error().message().c_str());
  }
};
}  // namespace doctest
