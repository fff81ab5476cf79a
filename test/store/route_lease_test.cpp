// Write-route leases: remote puts without a target reuse the master's write
// route (client_options::write_route_lease), bounded by bytes and time,
// dropped and retried on a fresh route when the leased owner fails a put.
#include "mc/store/data_manager.hpp"
#include "store_fixture.hpp"

#include <chrono>
#include <thread>

using namespace std::chrono_literals;
using mc::test::bytes_of;
using mc::test::cluster;
using mc::test::get;
using mc::test::random_bytes;
using mc::test::writable;

namespace {
/// Leases that outlive a slow (sanitizer) run: the cases count routes.
void long_lease(mc::store::client_options& o) { o.write_route_lease = 600s; }

mc::task<mc::result<void>> put_remote(mc::store::client& c, std::string key, const std::vector<std::uint8_t>& v) {
  mc::store::put_options o;
  o.where = mc::store::placement::remote;
  co_return co_await c.put(std::move(key), bytes_of(v), std::move(o));
}
mc::task<std::vector<mc::result<void>>> batch_put_remote(mc::store::client& c, std::vector<std::string> keys,
                                                         const std::vector<std::vector<std::uint8_t>>& vs) {
  std::vector<std::span<const std::byte>> spans;
  for (auto& v : vs) spans.push_back(bytes_of(v));
  mc::store::put_options o;
  o.where = mc::store::placement::remote;
  co_return co_await c.batch_put(std::move(keys), std::move(spans), std::move(o));
}

/// Reads `key` on node `i` and compares it with `v` byte for byte.
void check_value(cluster& cl, std::size_t i, const std::string& key, const std::vector<std::uint8_t>& v) {
  std::vector<std::uint8_t> out(v.size() + 9, 0xCD);
  auto r = cl.on(i, get(*cl.nodes[i].client, key, out));
  REQUIRE_MESSAGE(r.has_value(), key << ": " << r.error().message());
  CHECK(*r == v.size());
  CHECK(mc::test::checksum(out.data(), v.size()) == mc::test::checksum(v.data(), v.size()));
  CHECK(out[v.size()] == 0xCD);
}
}  // namespace

TEST_SUITE("store client") {
  TEST_CASE("remote puts without a target reuse one write-route lease") {
    cluster cl;
    auto& a = cl.add("a", {}, "auto", long_lease);
    auto& b = cl.add("b");
    std::vector<std::vector<std::uint8_t>> vs;
    for (std::size_t i = 0; i < 20; ++i) {
      vs.push_back(random_bytes(1 + i * 7919 + (i % 3) * 65536, 100 + i));  // inline and transferred sizes
      REQUIRE(cl.on(0, put_remote(a, "lease/" + std::to_string(i), vs.back())));
    }
    auto s = a.stats();
    CHECK(s.write_routes == 1);
    CHECK(s.write_route_lease_hits == 19);
    CHECK(s.write_route_lease_drops == 0);
    for (std::size_t i = 0; i < vs.size(); ++i) {
      CHECK(b.data().exists("lease/" + std::to_string(i)));
      CHECK_FALSE(a.data().exists("lease/" + std::to_string(i)));
      check_value(cl, 0, "lease/" + std::to_string(i), vs[i]);
    }
    // A batch takes its bytes from the lease at once.
    std::vector<std::string> keys;
    std::vector<std::vector<std::uint8_t>> bvs;
    for (std::size_t i = 0; i < 5; ++i) {
      keys.push_back("lease/batch/" + std::to_string(i));
      bvs.push_back(random_bytes(3000 + i * 100003, 200 + i));
    }
    auto rs = cl.on(0, batch_put_remote(a, keys, bvs));
    for (auto& r : rs) CHECK(r.has_value());
    CHECK(a.stats().write_routes == 1);
    CHECK(a.stats().write_route_lease_hits == 24);
    for (std::size_t i = 0; i < keys.size(); ++i) check_value(cl, 1, keys[i], bvs[i]);
  }

  TEST_CASE("a lease ends when its bytes are used up or it expires; 0 turns leases off") {
    SUBCASE("bytes") {
      cluster cl;
      auto& a = cl.add("a", {}, "auto", [](mc::store::client_options& o) {
        long_lease(o);
        o.write_route_lease_bytes = 1 << 20;
      });
      cl.add("b");
      // 300 KiB + 11 each: the first route leaves ~700 KiB (two more puts),
      // the fourth needs a new route, the fifth uses its lease.
      for (int i = 0; i < 5; ++i) {
        auto v = random_bytes((300 << 10) + 11, 300 + static_cast<std::uint64_t>(i));
        REQUIRE(cl.on(0, put_remote(a, "bytes/" + std::to_string(i), v)));
        check_value(cl, 1, "bytes/" + std::to_string(i), v);
      }
      CHECK(a.stats().write_routes == 2);
      CHECK(a.stats().write_route_lease_hits == 3);
      // A value larger than a lease routes alone (the lease stays for smaller puts).
      auto big = random_bytes((2 << 20) + 5, 399);
      REQUIRE(cl.on(0, put_remote(a, "bytes/big", big)));
      CHECK(a.stats().write_routes == 3);
      check_value(cl, 1, "bytes/big", big);
    }
    SUBCASE("time") {
      cluster cl;
      auto& a = cl.add("a", {}, "auto", [](mc::store::client_options& o) { o.write_route_lease = 100ms; });
      cl.add("b");
      auto v = random_bytes(4097, 7);
      REQUIRE(cl.on(0, put_remote(a, "time/0", v)));
      std::this_thread::sleep_for(150ms);
      const auto before = a.stats().write_routes;
      REQUIRE(cl.on(0, put_remote(a, "time/1", v)));
      CHECK(a.stats().write_routes == before + 1);  // the lease had expired
      check_value(cl, 1, "time/1", v);
    }
    SUBCASE("off") {
      cluster cl;
      auto& a = cl.add("a", {}, "auto", [](mc::store::client_options& o) { o.write_route_lease = 0ms; });
      cl.add("b");
      for (int i = 0; i < 4; ++i) {
        auto v = random_bytes(65537, 500 + static_cast<std::uint64_t>(i));
        REQUIRE(cl.on(0, put_remote(a, "off/" + std::to_string(i), v)));
        check_value(cl, 1, "off/" + std::to_string(i), v);
      }
      CHECK(a.stats().write_routes == 4);
      CHECK(a.stats().write_route_lease_hits == 0);
    }
  }

  TEST_CASE("a put through a lease whose owner stopped is retried on a fresh route") {
    cluster cl;
    auto& a = cl.add("a", {}, "auto", long_lease);
    auto& b = cl.add("b");
    auto& c = cl.add("c");
    auto v0 = random_bytes(70001, 1);
    REQUIRE(cl.on(0, put_remote(a, "gone/0", v0)));
    const bool on_b = b.data().exists("gone/0");
    CHECK(on_b != c.data().exists("gone/0"));
    const std::size_t leased = on_b ? 1 : 2, other = on_b ? 2 : 1;
    cl.nodes[leased].client->stop();  // unregisters: the master routes elsewhere
    for (int i = 1; i <= 3; ++i) {
      auto v = random_bytes(static_cast<std::size_t>(1000 * i + 70001), 10 + static_cast<std::uint64_t>(i));
      auto key = "gone/" + std::to_string(i);
      auto r = cl.on(0, put_remote(a, key, v));
      REQUIRE_MESSAGE(r.has_value(), r.error().message());
      CHECK(cl.nodes[other].client->data().exists(key));
      check_value(cl, 0, key, v);
    }
    auto s = a.stats();
    CHECK(s.write_route_lease_drops == 1);
    CHECK(s.write_routes == 2);            // the first put's, then the retry's (a new lease)
    CHECK(s.write_route_lease_hits == 3);  // the failed attempt and the two puts after the retry
  }
}
