// Process-wide RPC auth tokens (mc/rpc/auth.hpp); the wire frames live in negotiate.cpp.
#include "mc/rpc/auth.hpp"

#include "negotiate.hpp"

#include <atomic>
#include <mutex>

namespace mc::rpc {

namespace {

std::mutex tokens_mutex;
std::shared_ptr<const std::vector<std::string>> process_tokens = std::make_shared<const std::vector<std::string>>();
std::atomic<bool> enabled{false};
std::atomic<std::uint64_t> failures{0};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

}  // namespace

std::string check_auth_token(std::string_view token) {
  if (token.empty()) return "an auth token must not be empty";
  if (token.size() > max_auth_token_bytes)
    return "an auth token must be at most " + std::to_string(max_auth_token_bytes) + " bytes (got " +
           std::to_string(token.size()) + ")";
  for (char c : token) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x21 || u > 0x7e || c == ',')
      return "an auth token must be visible ASCII (0x21-0x7e) without spaces or commas";
  }
  return {};
}

mc::result<std::vector<std::string>> parse_auth_tokens(std::string_view list, std::string* message) {
  std::vector<std::string> out;
  if (trim(list).empty()) {
    *message = "the auth token list is empty";
    return mc::fail(mc::errc::invalid_params);
  }
  for (std::size_t start = 0;;) {
    auto end = list.find(',', start);
    auto piece = trim(list.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (auto why = check_auth_token(piece); !why.empty()) {
      *message = "auth token " + std::to_string(out.size() + 1) + ": " + why;
      return mc::fail(mc::errc::invalid_params);
    }
    out.emplace_back(piece);
    if (out.size() > max_auth_tokens) {
      *message = "at most " + std::to_string(max_auth_tokens) + " auth tokens (current,previous) may be given";
      return mc::fail(mc::errc::invalid_params);
    }
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return out;
}

std::string set_auth_tokens(std::vector<std::string> tokens) {
  if (tokens.size() > max_auth_tokens)
    return "at most " + std::to_string(max_auth_tokens) + " auth tokens may be given";
  for (auto& t : tokens)
    if (auto why = check_auth_token(t); !why.empty()) return why;
  auto next = std::make_shared<const std::vector<std::string>>(std::move(tokens));
  std::lock_guard lk(tokens_mutex);
  enabled.store(!next->empty());
  process_tokens = std::move(next);
  return {};
}

std::vector<std::string> auth_tokens() { return *detail::current_auth_tokens(); }

bool auth_enabled() noexcept { return enabled.load(); }

bool auth_token_accepted(std::string_view presented, const std::vector<std::string>& accepted) noexcept {
  if (presented.empty() || presented.size() > max_auth_token_bytes) return false;
  unsigned match = 0;
  for (auto& a : accepted) {
    // Compare over the accepted token's full length whatever the presented one
    // is: time depends on lengths only, never on where the first difference is.
    unsigned diff = static_cast<unsigned>(a.size() ^ presented.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      auto p = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0u;
      diff |= static_cast<unsigned>(static_cast<unsigned char>(a[i]) ^ p);
    }
    match |= static_cast<unsigned>(diff == 0 && !a.empty());
  }
  return match != 0;
}

std::uint64_t auth_failures() noexcept { return failures.load(std::memory_order_relaxed); }

}  // namespace mc::rpc

namespace mc::rpc::detail {

std::shared_ptr<const std::vector<std::string>> current_auth_tokens() {
  std::lock_guard lk(tokens_mutex);
  return process_tokens;
}

void note_auth_failure() noexcept { failures.fetch_add(1, std::memory_order_relaxed); }

}  // namespace mc::rpc::detail
