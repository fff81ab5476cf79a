#pragma once
// Shared helpers of the transfer tests (not a public header).
#include "mc/runtime/runtime.hpp"
#include "mc/transfer/engine.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace mc::transfer::test {

inline std::span<std::byte> bytes(std::vector<std::uint8_t>& v) { return std::as_writable_bytes(std::span(v)); }
inline std::span<const std::byte> cbytes(const std::vector<std::uint8_t>& v) { return std::as_bytes(std::span(v)); }

inline engine_options loopback_options(std::optional<transport_kind> force = transport_kind::tcp) {
  engine_options o;
  o.bind_host = "127.0.0.1";
  o.force = force;
  return o;
}

/// The transports a test engine can force towards a peer in this process.
inline constexpr transport_kind local_transports[] = {transport_kind::tcp, transport_kind::same_host,
                                                      transport_kind::in_process};

/// The request was refused with access_denied.
inline bool denied(const mc::result<void>& r) { return !r && mc::is(r.error(), mc::errc::access_denied); }

/// A runtime with two started engines: `a` initiates, `b` owns memory.
struct two_engines {
  explicit two_engines(engine_options oa = loopback_options(), engine_options ob = loopback_options(),
                       std::size_t threads = 2)
      : rt(threads) {
    rt.start();
    a = std::make_unique<engine>(rt, oa);
    b = std::make_unique<engine>(rt, ob);
    REQUIRE(a->start().has_value());
    REQUIRE(b->start().has_value());
  }
  ~two_engines() {
    a->stop();
    b->stop();
  }
  mc::runtime::runtime rt;
  std::unique_ptr<engine> a;
  std::unique_ptr<engine> b;
};

}  // namespace mc::transfer::test
