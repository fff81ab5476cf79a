// Field codecs shared by the targets in this folder. Every operation struct
// has one `template <class IO> void io(IO&)` that names its fields in order;
// `reader` fills them from a FuzzedDataProvider (the fuzz target), `writer`
// records them into an fdp_writer (the seed generator), so both directions
// come from one description and cannot drift apart.
//
// Per-handler counters (`handler_stats`) are printed at exit when the
// environment variable MC_FUZZ_STATS is set (the numbers in README.md).
//
// Thread-safety: none (one fuzz iteration at a time).
#pragma once

#include "fdp_writer.hpp"
#include "fuzz_support.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mc::fuzz {

struct reader {
  FuzzedDataProvider& p;
  static constexpr bool writing = false;
  bool more() const { return p.remaining_bytes() > 0; }
  template <class T>
  void range(T& v, T lo, T hi) {
    v = p.ConsumeIntegralInRange<T>(lo, hi);
  }
  void flag(bool& b) { b = p.ConsumeBool(); }
  void text(std::string& s, std::size_t max) { s = p.ConsumeRandomLengthString(max); }
  void rest(std::string& s) { s = p.ConsumeRemainingBytesAsString(); }
};

struct writer {
  fdp_writer& w;
  static constexpr bool writing = true;
  template <class T>
  void range(T& v, T lo, T hi) {
    w.integral<T>(v, lo, hi);
  }
  void flag(bool& b) { w.boolean(b); }
  void text(std::string& s, std::size_t max) { w.string(s, max); }
  void rest(std::string& s) { w.remaining(s); }
};

/// A string that is usually one of `pool` (so that operations of one input
/// meet on the same keys / ids), else free text of at most `max` bytes.
template <class IO>
void pooled(IO& io, std::string& s, std::span<const std::string_view> pool, std::size_t max) {
  auto sel = static_cast<std::uint8_t>(pool.size());
  if constexpr (IO::writing)
    for (std::size_t i = 0; i < pool.size(); ++i)
      if (pool[i] == s) sel = static_cast<std::uint8_t>(i);
  io.range(sel, std::uint8_t{0}, static_cast<std::uint8_t>(pool.size()));
  if (sel < pool.size())
    s = std::string(pool[sel]);
  else
    io.text(s, max);
}

/// A 64-bit count / size / version: 0, small, anything, or the maximum.
template <class IO, class T = std::uint64_t>
void number(IO& io, T& v) {
  constexpr T top = std::numeric_limits<T>::max();
  std::uint8_t sel = v == 0 ? 0 : v <= 255 ? 1 : v == top ? 3 : 2;
  io.range(sel, std::uint8_t{0}, std::uint8_t{3});
  switch (sel) {
    case 0:
      v = 0;
      break;
    case 1: {
      auto b = static_cast<std::uint8_t>(v);
      io.range(b, std::uint8_t{0}, std::uint8_t{255});
      v = b;
      break;
    }
    case 2:
      io.range(v, T{0}, top);
      break;
    default:
      v = top;
  }
}

/// Encodes `ops` (with their own io()) and checks that decoding the bytes
/// gives the same ops back (`same`); writes the file. Aborts on a mismatch:
/// the seed would not make the calls it was written for.
template <class Op, class Same>
void write_seed(const std::filesystem::path& file, std::vector<Op> ops, Same same) {
  fdp_writer w;
  writer out{w};
  for (auto& op : ops) op.io(out);
  auto bytes = w.finish();
  FuzzedDataProvider p(bytes.data(), bytes.size());
  reader in{p};
  for (auto& op : ops) {
    Op back{};
    if constexpr (requires { op.is_header; }) back.is_header = op.is_header;
    back.io(in);
    if (!same(op, back)) {
      std::fprintf(stderr, "write_seed %s: an operation does not decode back\n", file.c_str());
      std::abort();
    }
  }
  if (p.remaining_bytes() != 0) std::abort();
  std::ofstream f(file, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) std::abort();
}

/// One element of a seed whose input starts with a header struct and goes
/// on with operations (write_seed's element type).
template <class Header, class Op>
struct header_or {
  bool is_header = false;
  Header h{};
  Op o{};
  template <class IO>
  void io(IO& x) {
    if (is_header)
      h.io(x);
    else
      o.io(x);
  }
};

/// Call from LLVMFuzzerInitialize (which may rewrite argv before libFuzzer
/// parses its flags): appends -entropic=0 unless the command line says
/// otherwise. With coverage on every library, libFuzzer's entropic power
/// schedule spends most of each run in InputCorpus::UpdateFeatureFrequency
/// (a linear scan of its rare-feature list per feature hit): measured 51
/// exec/s with it, ~20x that without, on master_model's seeds.
inline void without_entropic(int* argc, char*** argv) {
  static std::vector<char*> args;
  for (int i = 0; i < *argc; ++i)
    if (std::string_view((*argv)[i]).starts_with("-entropic")) return;
  static char flag[] = "-entropic=0";
  args.assign(*argv, *argv + *argc);
  args.push_back(flag);
  args.push_back(nullptr);
  *argc += 1;
  *argv = args.data();
}

/// Targets that run threads (runtimes, servers) must stop them before the
/// process's static destructors run, or a thread still serving may touch a
/// destroyed static (seen once at exit: heap-use-after-free from a runtime
/// thread). atexit handlers and static destructors run in reverse order of
/// registration, and function-local statics of the code under test are
/// registered when first reached, so the target calls this after every input:
/// the latest registration runs first, before every static created so far.
/// `stop` runs once.
inline void stop_threads_at_exit(void (*stop)()) {
  static void (*fn)() = nullptr;
  static bool done = false;
  fn = stop;
  std::atexit([] {
    if (!done && fn) {
      done = true;
      fn();
    }
  });
}

[[noreturn]] inline void violated(const char* what) {
  std::fprintf(stderr, "invariant violated: %s\n", what);
  std::abort();
}
#define MC_FUZZ_CHECK(cond)                                                               \
  do {                                                                                    \
    if (!(cond)) ::mc::fuzz::violated(#cond " (" __FILE__ ":" MC_FUZZ_STR(__LINE__) ")"); \
  } while (0)
#define MC_FUZZ_STR2(x) #x
#define MC_FUZZ_STR(x) MC_FUZZ_STR2(x)

}  // namespace mc::fuzz
