#pragma once
// A small strict JSON reader (RFC 8259) for configuration files. Internal.
// Kept here instead of Boost.JSON's src.hpp so no other library linking with
// us can collide with a second copy of Boost.JSON's compiled sources.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace mc::store::json {

struct value;
using object = std::vector<std::pair<std::string, value>>;  // keeps order; duplicates rejected
using array = std::vector<value>;
struct null_t {};

struct value {
  std::variant<null_t, bool, std::int64_t, double, std::string, std::shared_ptr<array>, std::shared_ptr<object>> v;
  const object* as_object() const {
    auto* p = std::get_if<std::shared_ptr<object>>(&v);
    return p ? p->get() : nullptr;
  }
  const array* as_array() const {
    auto* p = std::get_if<std::shared_ptr<array>>(&v);
    return p ? p->get() : nullptr;
  }
};

/// Parses `text`; on error returns false and sets `error` ("line L col C: ...").
bool parse(std::string_view text, value& out, std::string& error);

}  // namespace mc::store::json
