#pragma once
/// The shared-secret options every binary accepts (see "Security model" in the
/// top README and mc/rpc/auth.hpp): `--auth_token` / `MC_AUTH_TOKEN` /
/// TOML `auth_token`, and `--auth_token_file` / `MC_AUTH_TOKEN_FILE` / TOML
/// `auth_token_file`, so that the token need not appear in /proc/*/cmdline.
#include "mc/config/options.hpp"

#include <cstddef>
#include <optional>
#include <string>

namespace mc::config {

/// Where the token list comes from. Both empty = auth off.
struct auth_options {
  std::string token = {};       ///< "token[,previous]" given directly
  std::string token_file = {};  ///< a file holding that text (trimmed)
};

/// Binds --auth_token and --auth_token_file (and their environment variables
/// MC_AUTH_TOKEN, MC_AUTH_TOKEN_FILE) to `o`. `o` must outlive `s`.
void add_auth_options(option_set& s, auth_options& o);

/// What read_secret_file found.
enum class secret_file_status { ok, unreadable, too_large, empty };

/// Reads a small secret file (a token list, a password): at most
/// `max_bytes`, surrounding whitespace (space, tab, CR, LF) trimmed, into
/// `*text` (cleared unless ok). Callers word the errors (they name their
/// option). Startup only (blocking file I/O).
secret_file_status read_secret_file(const std::string& path, std::size_t max_bytes, std::string* text);

/// Reads the token list text of `o`: `o.token`, or the content of
/// `o.token_file` with surrounding whitespace trimmed (at most 4 KiB). Returns
/// an error message (both given, unreadable, empty or oversize file) or
/// nullopt with `*text` set ("" = auth off). `*warning` is set when the file
/// is readable by group or others. Messages never contain the token. Startup
/// only (blocking file I/O).
std::optional<std::string> read_auth_tokens(const auth_options& o, std::string* text, std::string* warning);

}  // namespace mc::config
