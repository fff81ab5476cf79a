// The inverse of libFuzzer's FuzzedDataProvider, for seed generators: each
// call records a value so that the same sequence of FuzzedDataProvider calls
// on finish()'s bytes returns exactly those values. Integers are taken from
// the end of the data and strings/bytes from the front (as FuzzedDataProvider
// does), so the writer keeps both halves and joins them at the end.
//
// The targets in this folder decode their input into a list of operations
// (plain structs) and then run them; each has the matching encoder, so a seed
// is written as the operations it must make (e.g. register a client, publish
// keys, look them up), and the generator checks that decoding the bytes gives
// back exactly those operations.
//
// Thread-safety: none (one object per input).
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace mc::fuzz {

class fdp_writer {
 public:
  /// Records `v` as the next ConsumeIntegralInRange<T>(min, max).
  template <class T>
  void integral(T v, T min, T max) {
    static_assert(std::is_integral_v<T>);
    if (v < min || v > max) std::abort();
    const std::uint64_t range = static_cast<std::uint64_t>(max) - static_cast<std::uint64_t>(min);
    const std::uint64_t r = static_cast<std::uint64_t>(v) - static_cast<std::uint64_t>(min);
    std::size_t n = 0;
    for (std::size_t off = 0; off < sizeof(T) * CHAR_BIT && (range >> off) > 0; off += CHAR_BIT) ++n;
    // The reader builds (b0 << 8*(n-1)) | ... | b(n-1) from the bytes it pulls
    // off the end, most significant first.
    for (std::size_t i = n; i-- > 0;) back_.push_back(static_cast<std::uint8_t>(r >> (8 * i)));
  }
  /// The next ConsumeBool().
  void boolean(bool b) { integral<std::uint8_t>(b ? 1 : 0, 0, 255); }
  /// The next ConsumeRandomLengthString(max_length) (s.size() <= max_length).
  void string(std::string_view s, std::size_t max_length) {
    if (s.size() > max_length) std::abort();
    for (char c : s) {
      front_.push_back(static_cast<std::uint8_t>(c));
      if (c == '\\') front_.push_back('\\');
    }
    if (s.size() < max_length) {
      front_.push_back('\\');
      front_.push_back('x');  // "\" + anything else ends the string
    }
  }
  /// The bytes ConsumeRemainingBytes() returns (call last).
  void remaining(std::string_view s) { front_.insert(front_.end(), s.begin(), s.end()); }

  std::vector<std::uint8_t> finish() const {
    std::vector<std::uint8_t> out = front_;
    out.insert(out.end(), back_.rbegin(), back_.rend());
    return out;
  }

 private:
  std::vector<std::uint8_t> front_;
  std::vector<std::uint8_t> back_;  // in the order the reader consumes them
};

}  // namespace mc::fuzz
