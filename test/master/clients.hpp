#pragma once
// A test node's registration for the master's metadata tests.
#include "mc/master/metadata.hpp"

#include <cstdint>
#include <string>

namespace mc::test {

/// Client `id` at "<id>:12345" (RPC) / "<id>:50052" (transfer) with `cap`
/// bytes of capacity, `used` of them in use.
inline mc::master::client_info client(const std::string& id, std::uint64_t cap = 1000, std::uint64_t used = 0) {
  return {id, id + ":12345", id + ":50052", cap, used, 0, {}};
}

}  // namespace mc::test
