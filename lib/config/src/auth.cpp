#include "mc/config/auth.hpp"

#include <sys/stat.h>

#include <fstream>

namespace mc::config {

namespace {
constexpr std::size_t max_token_file_bytes = 4096;

std::string trimmed(std::string s) {
  const char* ws = " \t\r\n";
  auto b = s.find_first_not_of(ws);
  if (b == std::string::npos) return {};
  auto e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}
}  // namespace

secret_file_status read_secret_file(const std::string& path, std::size_t max_bytes, std::string* text) {
  text->clear();
  std::ifstream in(path, std::ios::binary);
  if (!in) return secret_file_status::unreadable;
  std::string content;
  char buf[512];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    content.append(buf, static_cast<std::size_t>(in.gcount()));
    if (content.size() > max_bytes) return secret_file_status::too_large;
  }
  *text = trimmed(std::move(content));
  return text->empty() ? secret_file_status::empty : secret_file_status::ok;
}

void add_auth_options(option_set& s, auth_options& o) {
  s.add("auth_token", &o.token,
        "shared secret(s) \"current[,previous]\": presented on every RPC connection, required on RPC and on the "
        "HTTP endpoints other than /metrics and /health; off when empty. Prefer --auth_token_file or the "
        "environment: flags are visible in /proc/PID/cmdline")
      .env("MC_AUTH_TOKEN", "auth_token")
      .add("auth_token_file", &o.token_file,
           "file holding the --auth_token text (whitespace trimmed; keep it mode 0600)")
      .env("MC_AUTH_TOKEN_FILE", "auth_token_file");
}

std::optional<std::string> read_auth_tokens(const auth_options& o, std::string* text, std::string* warning) {
  text->clear();
  warning->clear();
  if (!o.token.empty() && !o.token_file.empty())
    return "give either auth_token (--auth_token, MC_AUTH_TOKEN) or auth_token_file (--auth_token_file, "
           "MC_AUTH_TOKEN_FILE), not both";
  if (o.token_file.empty()) {
    *text = o.token;
    return std::nullopt;
  }
  struct stat st {};
  if (::stat(o.token_file.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return "auth_token_file '" + o.token_file + "' is not a readable regular file";
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    *warning = "auth_token_file '" + o.token_file + "' is accessible by group or others (chmod 600 it)";
  switch (read_secret_file(o.token_file, max_token_file_bytes, text)) {
    case secret_file_status::unreadable:
      return "cannot read auth_token_file '" + o.token_file + "'";
    case secret_file_status::too_large:
      return "auth_token_file '" + o.token_file + "' is larger than " + std::to_string(max_token_file_bytes) + " bytes";
    case secret_file_status::empty:
      return "auth_token_file '" + o.token_file + "' is empty";
    case secret_file_status::ok:
      break;
  }
  return std::nullopt;
}

}  // namespace mc::config
