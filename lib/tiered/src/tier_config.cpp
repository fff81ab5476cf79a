// Tier configuration parsing: JSON (Boost.JSON, strict_json.hpp), TOML (toml++).
#include "mc/tiered/tier_config.hpp"

#include "strict_json.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <sstream>
#include <variant>

namespace mc::tiered {

namespace {

// A tier as read from either format, before validation.
using field_value = std::variant<std::string, std::int64_t, double, bool>;
struct raw_tier {
  std::vector<std::pair<std::string, field_value>> fields;
};

config_error err(std::string msg) { return config_error{mc::errc::invalid_params, std::move(msg)}; }

std::string upper(std::string_view s) {
  std::string o(s);
  for (auto& c : o) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return o;
}

std::string describe(const field_value& v) {
  if (auto* s = std::get_if<std::string>(&v)) return "string \"" + *s + "\"";
  if (std::holds_alternative<std::int64_t>(v)) return "integer";
  if (std::holds_alternative<double>(v)) return "number";
  return "boolean";
}

config_result<tier_config> build_tier(const raw_tier& raw, std::size_t i) {
  const std::string at = "tiers[" + std::to_string(i) + "]";
  tier_config t;
  bool have_type = false, have_capacity = false;
  std::map<std::string, int> seen;
  for (const auto& [name, v] : raw.fields) {
    const std::string f = at + "." + name;
    if (seen[name]++) return err(f + ": duplicate field");
    if (name == "type") {
      auto* s = std::get_if<std::string>(&v);
      if (!s) return err(f + ": expected a string (DRAM, SSD, STORAGE or DISK), got " + describe(v));
      auto u = upper(*s);
      if (u == "DRAM" || u == "MEMORY")
        t.type = tier_type::dram;
      else if (u == "SSD" || u == "STORAGE" || u == "DISK")
        t.type = tier_type::ssd;
      else
        return err(f + ": unknown tier type \"" + *s + "\" (expected DRAM, SSD, STORAGE or DISK)");
      have_type = true;
    } else if (name == "capacity") {
      if (auto* n = std::get_if<std::int64_t>(&v)) {
        if (*n <= 0) return err(f + ": must be > 0");
        t.capacity = static_cast<std::uint64_t>(*n);
      } else if (auto* s = std::get_if<std::string>(&v)) {
        auto c = parse_capacity(*s);
        if (!c) return err(f + ": " + c.error().message);
        t.capacity = *c;
      } else {
        return err(f + ": expected a byte count or a string like \"512MiB\", got " + describe(v));
      }
      if (t.capacity == 0) return err(f + ": must be > 0");
      have_capacity = true;
    } else if (name == "priority") {
      auto* n = std::get_if<std::int64_t>(&v);
      if (!n || *n < INT32_MIN || *n > INT32_MAX) return err(f + ": expected an integer, got " + describe(v));
      t.priority = static_cast<int>(*n);
    } else if (name == "allocator_type" || name == "allocator") {
      auto* s = std::get_if<std::string>(&v);
      if (!s) return err(f + ": expected a string (OFFSET), got " + describe(v));
      if (upper(*s) != "OFFSET") return err(f + ": unknown allocator \"" + *s + "\" (supported: OFFSET)");
      t.allocator = "OFFSET";
    } else if (name == "path") {
      auto* s = std::get_if<std::string>(&v);
      if (!s) return err(f + ": expected a string, got " + describe(v));
      t.path = *s;
    } else if (name == "prefault") {
      auto* b = std::get_if<bool>(&v);
      if (!b) return err(f + ": expected true or false, got " + describe(v));
      t.prefault = *b;
    } else {
      return err(f + ": unknown field (expected type, capacity, priority, allocator_type, path, prefault)");
    }
  }
  if (!have_type) return err(at + ".type: missing");
  if (!have_capacity) return err(at + ".capacity: missing");
  if (t.type == tier_type::ssd && t.path.empty()) return err(at + ".path: missing (required for SSD tiers)");
  if (t.type == tier_type::dram && !t.path.empty()) return err(at + ".path: only SSD tiers have a path");
  return t;
}

config_result<std::vector<tier_config>> build(const std::vector<raw_tier>& raws) {
  std::vector<tier_config> out;
  for (std::size_t i = 0; i < raws.size(); ++i) {
    auto t = build_tier(raws[i], i);
    if (!t) return t.error();
    out.push_back(std::move(*t));
  }
  if (auto v = validate_tiers(out); !v) return v.error();
  std::stable_sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.priority > b.priority; });
  return out;
}

config_result<field_value> json_field(const boost::json::value& v, const std::string& where) {
  if (auto* s = v.if_string()) return field_value(std::string(*s));
  if (auto* n = v.if_int64()) return field_value(*n);  // strict_json refuses integers beyond int64
  if (auto* d = v.if_double()) return field_value(*d);
  if (auto* b = v.if_bool()) return field_value(*b);
  return err(where + ": expected a string, number or boolean");
}

/// The text of `json_or_path`: inline JSON (starts with '{') or a file's
/// content, at most json::max_text_bytes either way.
config_result<std::string> tiers_text(std::string_view json_or_path) {
  auto first = json_or_path.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && json_or_path[first] == '{') return std::string(json_or_path);
  std::string path(json_or_path.substr(first == std::string_view::npos ? json_or_path.size() : first));
  std::ifstream in(path, std::ios::binary);
  if (!in) return err("tiers: \"" + path + "\" is neither inline JSON nor a readable file");
  std::string text(json::max_text_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return err("tiers: cannot read \"" + path + "\"");
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > json::max_text_bytes)
    return err("tiers: \"" + path + "\" is larger than " + std::to_string(json::max_text_bytes) + " bytes");
  return text;
}

}  // namespace

std::string_view tier_type_name(tier_type t) noexcept { return t == tier_type::dram ? "DRAM" : "SSD"; }

config_result<std::uint64_t> parse_capacity(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::size_t start = i;
  std::uint64_t n = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    auto d = static_cast<std::uint64_t>(text[i] - '0');
    if (n > (UINT64_MAX - d) / 10) return err("capacity \"" + std::string(text) + "\": number too large");
    n = n * 10 + d;
  }
  if (i == start) return err("capacity \"" + std::string(text) + "\": expected a number with an optional unit");
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit = upper(text.substr(i));
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.back()))) unit.pop_back();
  static const std::pair<const char*, int> units[] = {{"", 0},    {"B", 0},  {"K", 1},   {"KB", 1}, {"KIB", 1},
                                                      {"M", 2},   {"MB", 2}, {"MIB", 2}, {"G", 3},  {"GB", 3},
                                                      {"GIB", 3}, {"T", 4},  {"TB", 4},  {"TIB", 4}};
  for (auto [name, shift] : units) {
    if (unit != name) continue;
    for (int k = 0; k < shift; ++k) {
      if (n > UINT64_MAX / 1024) return err("capacity \"" + std::string(text) + "\": too large");
      n *= 1024;
    }
    if (n == 0) return err("capacity \"" + std::string(text) + "\": must be > 0");
    return n;
  }
  return err("capacity \"" + std::string(text) + "\": unknown unit \"" + std::string(text.substr(i)) +
             "\" (use B, KiB, MiB, GiB, TiB)");
}

config_result<void> validate_tiers(const std::vector<tier_config>& tiers) {
  if (tiers.empty()) return err("tiers: at least one tier is required");
  std::map<std::string, std::size_t> paths;
  for (std::size_t i = 0; i < tiers.size(); ++i) {
    const auto& t = tiers[i];
    const std::string at = "tiers[" + std::to_string(i) + "]";
    if (t.capacity == 0) return err(at + ".capacity: must be > 0");
    if (upper(t.allocator) != "OFFSET") return err(at + ".allocator_type: unknown allocator \"" + t.allocator + "\"");
    if (t.type == tier_type::ssd) {
      if (t.path.empty()) return err(at + ".path: missing (required for SSD tiers)");
      if (t.capacity < 4096) return err(at + ".capacity: an SSD tier needs at least 4096 bytes");
      if (auto [it, fresh] = paths.emplace(t.path, i); !fresh)
        return err(at + ".path: \"" + t.path + "\" is already used by tiers[" + std::to_string(it->second) + "]");
    }
  }
  return {};
}

config_result<std::vector<tier_config>> parse_tiers_json(std::string_view json_or_path) {
  auto text = tiers_text(json_or_path);
  if (!text) return text.error();
  auto doc = json::parse_strict(*text);
  if (!doc) return err("tiers JSON: " + doc.error());
  auto* top = doc->if_object();
  if (!top) return err("tiers JSON: expected an object {\"tiers\": [...]}");
  std::vector<raw_tier> raws;
  bool have_tiers = false;
  for (const auto& member : *top) {
    if (member.key() != "tiers")
      return err("tiers JSON: unknown top-level field \"" + std::string(member.key()) + "\"");
    have_tiers = true;
    auto* arr = member.value().if_array();
    if (!arr) return err("tiers: expected an array");
    std::size_t i = 0;
    for (const auto& item : *arr) {
      const std::string at = "tiers[" + std::to_string(i++) + "]";
      auto* obj = item.if_object();
      if (!obj) return err(at + ": expected an object");
      raw_tier rt;
      for (const auto& field : *obj) {
        std::string name(field.key());
        auto f = json_field(field.value(), at + "." + name);
        if (!f) return f.error();
        rt.fields.emplace_back(std::move(name), std::move(*f));
      }
      raws.push_back(std::move(rt));
    }
  }
  if (!have_tiers) return err("tiers: missing");
  return build(raws);
}

config_result<std::vector<tier_config>> parse_tiers_toml(std::string_view toml_text) {
  toml::table doc;
  try {
    doc = toml::parse(toml_text);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << "TOML: " << e.description() << " at line " << e.source().begin.line;
    return err(os.str());
  }
  auto* arr = doc["tiers"].as_array();
  if (!doc.contains("tiers")) return err("tiers: missing (expected [[tiers]] tables)");
  if (!arr) return err("tiers: expected an array of tables [[tiers]]");
  std::vector<raw_tier> raws;
  std::size_t i = 0;
  for (auto& node : *arr) {
    const std::string at = "tiers[" + std::to_string(i++) + "]";
    auto* tbl = node.as_table();
    if (!tbl) return err(at + ": expected a table");
    raw_tier rt;
    for (auto& [k, v] : *tbl) {
      const std::string name(k.str());
      if (auto s = v.value_exact<std::string>())
        rt.fields.emplace_back(name, *s);
      else if (auto n = v.value_exact<std::int64_t>())
        rt.fields.emplace_back(name, *n);
      else if (auto d = v.value_exact<double>())
        rt.fields.emplace_back(name, *d);
      else if (auto b = v.value_exact<bool>())
        rt.fields.emplace_back(name, *b);
      else
        return err(at + "." + name + ": expected a string, number or boolean");
    }
    raws.push_back(std::move(rt));
  }
  return build(raws);
}

}  // namespace mc::tiered
