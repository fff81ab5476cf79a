#pragma once
// Startup helper shared by the binaries: --auth_token / --auth_token_file
// (mc/config/auth.hpp) -> the process-wide RPC tokens (mc/rpc/auth.hpp).
#include "mc/config/auth.hpp"
#include "mc/rpc/auth.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace mc::apps {

/// Reads and validates the token options and makes them the process's RPC
/// tokens. Returns "" (and the accepted tokens in `*tokens`, empty = auth off)
/// or a startup error; warns on stderr about a group/world-readable file.
inline std::string apply_auth(const mc::config::auth_options& o, const char* program,
                              std::vector<std::string>* tokens) {
  tokens->clear();
  std::string text, warning;
  if (auto err = mc::config::read_auth_tokens(o, &text, &warning)) return *err;
  if (!warning.empty()) std::fprintf(stderr, "%s: warning: %s\n", program, warning.c_str());
  if (text.empty()) return {};
  std::string why;
  auto parsed = mc::rpc::parse_auth_tokens(text, &why);
  if (!parsed) return "auth_token: " + why;
  if (auto err = mc::rpc::set_auth_tokens(*parsed); !err.empty()) return "auth_token: " + err;
  *tokens = std::move(*parsed);
  return {};
}

}  // namespace mc::apps
