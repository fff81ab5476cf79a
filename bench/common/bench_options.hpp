#pragma once
// Command-line options of the benchmark programs: mc::config::option_set (the
// applications' parser), so every bench takes `--name value` / `--name=value`,
// `--config FILE.toml` with the same names as keys, and `--help` lists every
// option with its default. An unknown option or a bad value is an error naming
// it (exit status 2).
#include "mc/config/options.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace mc::bench {

/// Parses argv into the variables bound to `set`. Returns only when the
/// program should run: `--help` / `--version` print to stdout and exit 0; an
/// error prints "<program>: <what is wrong> (see --help)" to stderr and exits 2.
/// Not thread-safe (call at startup).
inline void parse_options(mc::config::option_set& set, int argc, const char* const* argv) {
  auto r = set.parse(argc, argv);
  switch (r.what) {
    case mc::config::outcome::kind::run:
      return;
    case mc::config::outcome::kind::help:
      std::fputs(r.message.c_str(), stdout);
      std::exit(0);
    case mc::config::outcome::kind::version:
      std::puts(r.message.c_str());
      std::exit(0);
    case mc::config::outcome::kind::error:
      break;
  }
  std::fprintf(stderr, "%s\n", r.message.c_str());
  std::exit(2);
}

/// A check across options that failed after parse_options(): prints
/// "<program>: <message>" to stderr and exits 2, as a parse error does.
[[noreturn]] inline void option_error(const char* program, const std::string& message) {
  std::fprintf(stderr, "%s: %s (see --help)\n", program, message.c_str());
  std::exit(2);
}

/// Every item of the list option `option` must be one of `allowed`; otherwise
/// option_error() naming the option and the choices.
inline void check_choices(const char* program, std::string_view option, const std::vector<std::string>& items,
                          std::initializer_list<std::string_view> allowed) {
  for (auto& item : items) {
    if (std::find(allowed.begin(), allowed.end(), item) != allowed.end()) continue;
    std::string choices;
    for (auto a : allowed) {
      if (!choices.empty()) choices += ", ";
      choices += a;
    }
    std::string m = "--";
    m.append(option).append(" takes ").append(choices).append(" (not '").append(item).append("')");
    option_error(program, m);
  }
}

}  // namespace mc::bench
