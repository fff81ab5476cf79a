// Fuzz target `flags`: the command-line flag parser (mc::config::option_set)
// with the real option declarations of the two node binaries. The first byte
// picks mooncake_client (even: mc::store::make_option_set + the auth options,
// as apps/mooncake_client.cpp) or mooncake_master (odd); the rest is split on
// NUL bytes into argv words (at most 64).
//
// Invariants: parse() never crashes; an error, --help and --version carry a
// message, an error starts with the program's name; a successful parse gives
// durations the binaries can use (mc::fuzz::check_duration), passes or is
// refused with a message by the binary's own validation (resolve / validate),
// and its values rendered as `--name=value` flags (node_options.hpp) parse
// again, into a fresh option set, to exactly the same values.
//
// An input with a `--config` flag is skipped: it would read a file the input
// names (the TOML side is the target `toml_config`).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "node_options.hpp"

namespace {

constexpr std::size_t max_words = 64;

bool names_a_file(const std::vector<std::string>& words) {
  for (auto& w : words) {
    if (w == "--") break;  // the rest is never parsed (and rejected without accept_rest)
    if (w == "--config" || w.rfind("--config=", 0) == 0) return true;
  }
  return false;
}

template <class Cfg>
void run(const std::vector<std::string>& words, const std::string& program) {
  Cfg a;
  auto r = a.set.parse(words);
  mc::fuzz::check_outcome(r, program);
  if (r.what != mc::config::outcome::kind::run) return;
  // The round trip first (check() lets resolve() rewrite some fields).
  Cfg b;
  auto again = b.set.parse(a.render());
  mc::fuzz::check_that(again.what == mc::config::outcome::kind::run);
  mc::fuzz::check_that(a.same_as(b));
  a.check();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  mc::fuzz::clear_option_environment();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool client = data[0] % 2 == 0;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<std::string> words;
  while (!text.empty()) {
    if (words.size() == max_words) return 0;
    auto nul = text.find('\0');
    words.emplace_back(text.substr(0, nul));
    if (nul == std::string_view::npos) break;
    text.remove_prefix(nul + 1);
  }
  if (names_a_file(words)) return 0;
  if (client)
    run<mc::fuzz::client_cfg>(words, "mooncake_client");
  else
    run<mc::fuzz::master_cfg>(words, "mooncake_master");
  return 0;
}
