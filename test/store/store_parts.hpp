#pragma once
// Small pieces the store tests build their fixtures from: a DRAM-only tiered
// backend and loopback TCP engine options. Each REQUIREs what it needs (doctest), so a broken setup fails the test.
#include "mc/runtime/runtime.hpp"
#include "mc/store/tiered_backend.hpp"
#include "mc/transfer/engine.hpp"

#include <doctest/doctest.h>

#include <memory>
#include <string>

namespace mc::test {

/// A tiered backend with one DRAM tier of `capacity` (e.g. "16MiB") on `rt`.
/// Never null: a parse or create failure fails the test.
inline std::unique_ptr<mc::store::tiered_backend> dram_backend(mc::runtime::runtime& rt,
                                                               const std::string& capacity) {
  auto tiers =
      mc::store::parse_tiers_json(R"({"tiers":[{"type":"DRAM","capacity":")" + capacity + R"(","priority":1}]})");
  REQUIRE(tiers.has_value());
  auto b = mc::store::tiered_backend::create(rt, *tiers);
  REQUIRE(b.has_value());
  return std::move(*b);
}

/// Engine options for a transfer engine on 127.0.0.1 forced to TCP.
inline mc::transfer::engine_options loopback_tcp_engine_options() {
  mc::transfer::engine_options eo;
  eo.bind_host = "127.0.0.1";
  eo.force = mc::transfer::transport_kind::tcp;
  return eo;
}

}  // namespace mc::test
