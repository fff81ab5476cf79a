#include "mc/config/options.hpp"

#include "mc/config/version.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <type_traits>

namespace mc::config {
namespace {

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  std::uint64_t v = 0;
  if (s.empty()) return std::nullopt;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::pair<std::string_view, std::string_view> split_number(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  auto unit = s.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  return {s.substr(0, i), unit};
}

// n units of `ms_per_unit` milliseconds, or nullopt past max_duration (the
// product never wraps: it is compared before it is formed).
std::optional<std::chrono::milliseconds> checked_duration(std::uint64_t n, std::uint64_t ms_per_unit) {
  const auto max = static_cast<std::uint64_t>(max_duration.count());
  if (n > max / ms_per_unit) return std::nullopt;
  return std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(n * ms_per_unit));
}

}  // namespace

std::optional<std::uint64_t> parse_size(std::string_view text) {
  auto [num, unit_raw] = split_number(text);
  auto n = parse_u64(num);
  if (!n) return std::nullopt;
  auto unit = lower(unit_raw);
  std::uint64_t mul = 0;
  if (unit.empty() || unit == "b")
    mul = 1;
  else if (unit == "k" || unit == "kib")
    mul = 1ull << 10;
  else if (unit == "m" || unit == "mib")
    mul = 1ull << 20;
  else if (unit == "g" || unit == "gib")
    mul = 1ull << 30;
  else if (unit == "t" || unit == "tib")
    mul = 1ull << 40;
  else if (unit == "kb")
    mul = 1ull << 10;
  else if (unit == "mb")
    mul = 1ull << 20;
  else if (unit == "gb")
    mul = 1ull << 30;
  else if (unit == "tb")
    mul = 1ull << 40;
  else
    return std::nullopt;
  if (*n > UINT64_MAX / mul) return std::nullopt;
  return *n * mul;
}

std::optional<std::chrono::milliseconds> parse_duration_ms(std::string_view text) {
  auto [num, unit_raw] = split_number(text);
  auto n = parse_u64(num);
  if (!n) return std::nullopt;
  auto unit = lower(unit_raw);
  std::uint64_t ms_per_unit = 0;
  if (unit.empty() || unit == "ms")
    ms_per_unit = 1;
  else if (unit == "s")
    ms_per_unit = 1000;
  else if (unit == "m" || unit == "min")
    ms_per_unit = 60'000;
  else if (unit == "us" && *n % 1000 == 0)
    return checked_duration(*n / 1000, 1);
  else
    return std::nullopt;
  return checked_duration(*n, ms_per_unit);
}

option_set::option_set(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

option_set& option_set::add_custom(std::string name, std::string default_text, std::string help,
                                   std::function<std::optional<std::string>(std::string_view)> set) {
  options_.push_back(
      {std::move(name), std::move(default_text), std::move(help), std::move(set), false, false, false, {}});
  return *this;
}

option_set& option_set::add(std::string name, std::string* target, std::string help) {
  return add_custom(std::move(name), *target, std::move(help),
                    [target](std::string_view v) -> std::optional<std::string> {
                      *target = std::string(v);
                      return std::nullopt;
                    });
}

option_set& option_set::add(std::string name, bool* target, std::string help) {
  add_custom(std::move(name), *target ? "true" : "false", std::move(help),
             [target](std::string_view v) -> std::optional<std::string> {
               auto l = lower(v);
               if (l == "true" || l == "1" || l == "yes" || l == "on")
                 *target = true;
               else if (l == "false" || l == "0" || l == "no" || l == "off")
                 *target = false;
               else
                 return "expected true or false";
               return std::nullopt;
             });
  options_.back().is_bool = true;
  return *this;
}

namespace {
// Setter of an unsigned integer option bounded to [min, max].
template <class T>
std::function<std::optional<std::string>(std::string_view)> bounded_setter(T* target, std::uint64_t min,
                                                                           std::uint64_t max) {
  return [target, min, max](std::string_view v) -> std::optional<std::string> {
    auto n = parse_u64(v);
    if (!n) return "expected a non-negative integer";
    if (*n < min || *n > max) return "must be between " + std::to_string(min) + " and " + std::to_string(max);
    *target = static_cast<T>(*n);
    return std::nullopt;
  };
}
}  // namespace

option_set& option_set::add(std::string name, std::uint64_t* target, std::string help, std::uint64_t min,
                            std::uint64_t max) {
  return add_custom(std::move(name), std::to_string(*target), std::move(help), bounded_setter(target, min, max));
}

option_set& option_set::add(std::string name, std::uint16_t* target, std::string help, std::uint16_t min,
                            std::uint16_t max) {
  return add_custom(std::move(name), std::to_string(*target), std::move(help), bounded_setter(target, min, max));
}

option_set& option_set::add_size(std::string name, std::uint64_t* target, std::string help) {
  return add_custom(std::move(name), std::to_string(*target), std::move(help),
                    [target](std::string_view v) -> std::optional<std::string> {
                      auto n = parse_size(v);
                      if (!n) return "expected a size such as 1048576, 512MiB or 16GB";
                      *target = *n;
                      return std::nullopt;
                    });
}

option_set& option_set::add(std::string name, std::chrono::milliseconds* target, std::string help) {
  return add_custom(std::move(name), std::to_string(target->count()) + "ms", std::move(help),
                    [target](std::string_view v) -> std::optional<std::string> {
                      auto d = parse_duration_ms(v);
                      if (!d) return "expected a duration such as 10s or 500ms (at most 365 days)";
                      *target = *d;
                      return std::nullopt;
                    });
}

namespace {
std::string format_real(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

// Splits a comma list and runs `item` on every element; an error names the item.
std::optional<std::string> for_each_item(std::string_view v,
                                         const std::function<std::optional<std::string>(std::string_view)>& item) {
  std::size_t n = 0;
  while (true) {
    auto comma = v.find(',');
    auto x = v.substr(0, comma);
    if (x.empty()) return std::string("empty item in the comma-separated list");
    if (++n > option_set::max_list_items) return "more than " + std::to_string(option_set::max_list_items) + " items";
    if (auto err = item(x)) return "item '" + std::string(x) + "': " + *err;
    if (comma == std::string_view::npos) return std::nullopt;
    v.remove_prefix(comma + 1);
  }
}

template <class T>
std::string join(const std::vector<T>& xs) {
  std::string out;
  for (auto& x : xs) {
    if (!out.empty()) out += ',';
    if constexpr (std::is_same_v<T, std::string>)
      out += x;
    else
      out += std::to_string(x);
  }
  return out;
}
}  // namespace

option_set& option_set::add(std::string name, double* target, std::string help, double min, double max) {
  return add_custom(std::move(name), format_real(*target), std::move(help),
                    [target, min, max](std::string_view v) -> std::optional<std::string> {
                      double d = 0;
                      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
                      if (v.empty() || ec != std::errc{} || p != v.data() + v.size() || !std::isfinite(d))
                        return "expected a number such as 0.5";
                      if (d < min || d > max) return "must be between " + format_real(min) + " and " + format_real(max);
                      *target = d;
                      return std::nullopt;
                    });
}

option_set& option_set::add_list(std::string name, std::vector<std::string>* target, std::string help) {
  add_custom(std::move(name), join(*target), std::move(help),
             [target](std::string_view v) -> std::optional<std::string> {
               std::vector<std::string> out;
               if (auto err = for_each_item(v, [&](std::string_view x) -> std::optional<std::string> {
                     out.emplace_back(x);
                     return std::nullopt;
                   }))
                 return err;
               *target = std::move(out);
               return std::nullopt;
             });
  options_.back().is_list = true;
  return *this;
}

option_set& option_set::add_list(std::string name, std::vector<std::uint64_t>* target, std::string help,
                                 std::uint64_t min, std::uint64_t max) {
  add_custom(std::move(name), join(*target), std::move(help),
             [target, min, max](std::string_view v) -> std::optional<std::string> {
               std::vector<std::uint64_t> out;
               std::uint64_t n = 0;
               auto one = bounded_setter(&n, min, max);
               if (auto err = for_each_item(v, [&](std::string_view x) -> std::optional<std::string> {
                     if (auto e = one(x)) return e;
                     out.push_back(n);
                     return std::nullopt;
                   }))
                 return err;
               *target = std::move(out);
               return std::nullopt;
             });
  options_.back().is_list = true;
  return *this;
}

option_set& option_set::add_size_list(std::string name, std::vector<std::uint64_t>* target, std::string help) {
  add_custom(std::move(name), join(*target), std::move(help),
             [target](std::string_view v) -> std::optional<std::string> {
               std::vector<std::uint64_t> out;
               if (auto err = for_each_item(v, [&](std::string_view x) -> std::optional<std::string> {
                     auto n = parse_size(x);
                     if (!n) return std::string("expected a size such as 4096, 64K or 1MiB");
                     out.push_back(*n);
                     return std::nullopt;
                   }))
                 return err;
               *target = std::move(out);
               return std::nullopt;
             });
  options_.back().is_list = true;
  return *this;
}

option_set& option_set::accept_rest(std::string what) {
  rest_what_ = std::move(what);
  return *this;
}

option_set& option_set::env(std::string var, std::string name) {
  if (auto* o = find(name)) o->env_var = std::move(var);
  return *this;
}

option_set& option_set::allow_file_key(std::string key) {
  file_keys_.push_back(std::move(key));
  return *this;
}

option_set::option* option_set::find(std::string_view name) {
  for (auto& o : options_)
    if (o.name == name) return &o;
  return nullptr;
}

bool option_set::file_has_key(std::string_view key) const {
  return std::find(file_keys_seen_.begin(), file_keys_seen_.end(), key) != file_keys_seen_.end();
}

bool option_set::was_set(std::string_view name) const {
  for (auto& o : options_)
    if (o.name == name) return o.set_explicitly;
  return false;
}

std::optional<std::string> option_set::assign(option& o, std::string_view value, std::string_view source) {
  if (auto err = o.set(value))
    return std::string(source) + ": invalid value '" + std::string(value) + "' for " + o.name + ": " + *err;
  o.set_explicitly = true;
  return std::nullopt;
}

std::optional<std::string> option_set::load_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "cannot read config file '" + path + "'";
  std::stringstream ss;
  ss << in.rdbuf();
  file_text_ = ss.str();
  file_path_ = path;
  toml::table tbl;
  try {
    tbl = toml::parse(file_text_, path);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << path << ":" << e.source().begin.line << ":" << e.source().begin.column
        << ": TOML parse error: " << e.description();
    return msg.str();
  }
  for (auto& [k, node] : tbl) {
    std::string key(k.str());
    if (std::find(file_keys_.begin(), file_keys_.end(), key) != file_keys_.end()) {
      file_keys_seen_.push_back(key);
      continue;
    }
    auto* o = find(key);
    if (!o) return path + ": unknown key '" + key + "' (see --help for the option names)";
    std::string value;
    if (auto s = node.value<std::string>(); s && node.is_string())
      value = *s;
    else if (node.is_integer()) {
      auto i = node.value<std::int64_t>().value_or(0);
      if (i < 0) return path + ": key '" + key + "' must not be negative";
      value = std::to_string(i);
    } else if (node.is_boolean())
      value = node.value<bool>().value_or(false) ? "true" : "false";
    else if (node.is_floating_point())
      value = format_real(node.value<double>().value_or(0));
    else if (auto* arr = node.as_array(); arr && o->is_list) {
      // A list option: the items joined by commas (each a string or a non-negative integer).
      for (auto& item : *arr) {
        if (!value.empty()) value += ',';
        if (auto s = item.value<std::string>(); s && item.is_string())
          value += *s;
        else if (auto i = item.value<std::int64_t>(); i && item.is_integer() && *i >= 0)
          value += std::to_string(*i);
        else
          return path + ": key '" + key + "' must be an array of strings or non-negative integers";
      }
    } else
      return path + ": key '" + key + "' must be a string, a number or a boolean (an array only for a list option)";
    if (auto err = assign(*o, value, path)) return err;
  }
  return std::nullopt;
}

outcome option_set::parse(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return parse(args);
}

outcome option_set::parse(const std::vector<std::string>& args) {
  auto error = [&](std::string m) { return outcome{outcome::kind::error, program_ + ": " + m}; };
  // Pass 1: split into (name, value) pairs; find --help and --config.
  std::vector<std::pair<std::string, std::optional<std::string>>> flags;
  rest_.clear();
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a == "--" && !rest_what_.empty()) {
      rest_.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    }
    if (a == "--help" || a == "-h") return {outcome::kind::help, help()};
    if (a == "--version") return {outcome::kind::version, version_line(program_)};
    if (a.size() < 3 || a.substr(0, 2) != "--")
      return error("unexpected argument '" + std::string(a) + "' (options look like --name value)");
    a.remove_prefix(2);
    std::string name;
    std::optional<std::string> value;
    if (auto eq = a.find('='); eq != std::string_view::npos) {
      name = a.substr(0, eq);
      value = std::string(a.substr(eq + 1));
    } else {
      name = a;
    }
    auto* o = name == "config" ? nullptr : find(name);
    if (name != "config" && !o) return error("unknown option --" + name + " (see --help)");
    if (!value) {
      bool next_is_value = i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0;
      if (o && o->is_bool && !next_is_value)
        value = "true";
      else if (!next_is_value)
        return error("option --" + name + " needs a value");
      else
        value = args[++i];
    }
    flags.emplace_back(std::move(name), std::move(value));
  }
  for (auto& [n, v] : flags)
    if (n == "config")
      if (auto err = load_file(*v)) return error(*err);
  for (auto& o : options_) {
    if (o.env_var.empty()) continue;
    if (const char* e = std::getenv(o.env_var.c_str()); e && *e)
      if (auto err = assign(o, e, "environment variable " + o.env_var)) return error(*err);
  }
  for (auto& [n, v] : flags) {
    if (n == "config") continue;
    if (auto err = assign(*find(n), *v, "--" + n)) return error(*err);
  }
  return {};
}

std::string option_set::help() const {
  std::ostringstream out;
  out << "usage: " << program_ << " [--config FILE.toml] [--option value | --option=value]..."
      << (rest_what_.empty() ? "" : " [-- " + rest_what_ + "...]") << "\n\n"
      << summary_ << "\n\noptions (default in brackets):\n"
      << "  --config FILE             TOML file with the same option names as keys;\n"
      << "                            precedence: defaults < file < environment < flags\n"
      << "  --help                    this text\n"
      << "  --version                 print \"" << program_ << " <version> (<git revision>)\" and exit\n";
  for (auto& o : options_) {
    std::string head = "  --" + o.name;
    out << head;
    if (head.size() < 28)
      out << std::string(28 - head.size(), ' ');
    else
      out << "\n" << std::string(28, ' ');
    out << o.help << " [" << (o.default_text.empty() ? "\"\"" : o.default_text) << "]";
    if (!o.env_var.empty()) out << " (env " << o.env_var << ")";
    out << "\n";
  }
  return out.str();
}

}  // namespace mc::config
