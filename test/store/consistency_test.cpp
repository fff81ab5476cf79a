// Versions, supersede and eviction notices, end to end: an in-process master
// and several clients (test/store/store_fixture.hpp). See the README's
// "Consistency model".
#include "mc/tiered/tiered_backend.hpp"
#include "store_fixture.hpp"

#include <functional>
#include <thread>

using namespace std::chrono_literals;
using mc::test::bytes_of;
using mc::test::checksum;
using mc::test::cluster;
using mc::test::random_bytes;
using mc::test::writable;

namespace {
constexpr std::size_t kib = 1024;

mc::task<mc::result<void>> put(mc::store::client& c, std::string key, const std::vector<std::uint8_t>& v) {
  co_return co_await c.put(std::move(key), bytes_of(v));
}
mc::task<mc::result<std::size_t>> get(mc::store::client& c, std::string key, std::vector<std::uint8_t>& out) {
  co_return co_await c.get(std::move(key), writable(out));
}

/// cluster::add with heartbeats every 100 ms and `tweak` applied to the options.
mc::store::client& add_with(cluster& cl, const std::string& id, const std::string& tiers_json,
                            const std::function<void(mc::store::client_options&)>& tweak) {
  return cl.add(id, tiers_json, "auto", [&](mc::store::client_options& o) {
    o.heartbeat_interval = std::chrono::milliseconds(100);
    tweak(o);
  });
}

/// Waits (deadline 10 s) until `cond` holds; polls every 5 ms.
bool eventually(const std::function<bool()>& cond) {
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

std::string holder_of(cluster& cl, const std::string& key) {
  auto info = cl.master->state().lookup(key);
  if (!info || info->replicas.size() != 1) return info ? "<" + std::to_string(info->replicas.size()) + " holders>" : "";
  return info->replicas[0].client_id;
}

const char* one_mib_dram = R"({"tiers":[{"type":"DRAM","capacity":"1MiB","priority":100}]})";
}  // namespace

TEST_SUITE("store consistency") {
  TEST_CASE("an evicted key re-put on the same node stays routable and readable from another node") {
    cluster cl;
    // Notices wait 1 s: the old copy's notice reaches the master after the
    // re-put's publish (the order that used to unpublish the fresh value).
    auto& a = add_with(cl, "a", one_mib_dram,
                       [](mc::store::client_options& o) { o.eviction_notice_interval = std::chrono::seconds(1); });
    auto& b = cl.add("b");
    constexpr std::size_t n = 200 * kib + 13;
    std::uint64_t dangerous = 0;  // rounds where the notice was still queued when the re-put was published
    for (int round = 0; round < 3; ++round) {
      auto key = "re-put/" + std::to_string(round);
      REQUIRE(cl.on(0, put(a, key, random_bytes(n, 100 + round))));
      // Fill the tier until the key is evicted (its notice is queued), then re-put it at once.
      for (int f = 0; a.backend().exists(key); ++f) {
        REQUIRE(f < 16);
        REQUIRE(cl.on(
            0, put(a, mc::test::numbered("fill/", round) + mc::test::numbered("/", f), random_bytes(n, 1000 + f))));
      }
      auto fresh = random_bytes(n, 200 + round);
      auto sent_before = a.stats().notices_sent;
      REQUIRE(cl.on(0, put(a, key, fresh)));
      dangerous += a.stats().notices_sent == sent_before ? 1 : 0;
      // Wait until every queued notice was sent, then read from b.
      REQUIRE(eventually([&] {
        auto s = a.stats();
        return s.notice_batches > 0 && s.notices_sent > sent_before;
      }));
      CHECK(holder_of(cl, key) == "a");
      std::vector<std::uint8_t> out(n);
      auto r = cl.on(1, get(b, key, out));
      REQUIRE_MESSAGE(r.has_value(), r.error().message());
      CHECK(*r == n);
      CHECK(checksum(out.data(), n) == checksum(fresh.data(), n));
    }
    CHECK(dangerous >= 1);
    CHECK(cl.master->state().ordering().stale_removals >= dangerous);
    CHECK(a.stats().notice_overflows == 0);
  }

  TEST_CASE("a same-size overwrite on another node makes the old copy unroutable; a third node reads the new bytes") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    auto& c = cl.add("c");
    constexpr std::size_t n = 300 * kib + 7;
    auto old_bytes = random_bytes(n, 1);
    auto new_bytes = random_bytes(n, 2);
    REQUIRE(cl.on(0, put(a, "k", old_bytes)));
    std::vector<std::uint8_t> out(n);
    REQUIRE(cl.on(2, get(c, "k", out)));  // c now caches the route to a
    CHECK(checksum(out.data(), n) == checksum(old_bytes.data(), n));
    REQUIRE(cl.on(1, put(b, "k", new_bytes)));  // same size, another node
    // At once: the master routes only to b.
    CHECK(holder_of(cl, "k") == "b");
    auto info = cl.master->state().lookup("k");
    REQUIRE(info);
    CHECK(info->size == n);
    // Within a heartbeat, a drops its superseded copy and confirms it.
    REQUIRE(eventually([&] { return !a.backend().exists("k"); }));
    CHECK(a.stats().superseded_drops == 1);
    REQUIRE(eventually([&] { return cl.master->state().ordering().superseded == 1 && a.stats().notices_sent >= 1; }));
    // c's cached route points at a: a answers OBJECT_NOT_FOUND, c re-routes to b.
    std::fill(out.begin(), out.end(), 0);
    auto r = cl.on(2, get(c, "k", out));
    REQUIRE_MESSAGE(r.has_value(), r.error().message());
    CHECK(checksum(out.data(), n) == checksum(new_bytes.data(), n));
    // A late re-publish of a's old copy cannot take the key back.
    CHECK(b.backend().exists("k"));
    CHECK(holder_of(cl, "k") == "b");
  }

  TEST_CASE("an eviction notice queue overflow resyncs: the master's view of the holder is replaced") {
    cluster cl;
    auto& a = add_with(cl, "a", one_mib_dram, [](mc::store::client_options& o) { o.eviction_notice_queue = 3; });
    constexpr std::size_t n = 150 * kib + 1;
    std::vector<std::string> small;
    for (int i = 0; i < 6; ++i) {
      small.push_back(mc::test::numbered("small/", i));
      REQUIRE(cl.on(0, put(a, small.back(), random_bytes(n, i))));
    }
    for (auto& k : small) REQUIRE(holder_of(cl, k) == "a");
    auto resyncs_before = a.stats().resyncs;
    // One value of the whole tier evicts all six at once: 6 notices > 3.
    auto big = random_bytes(1024 * kib, 99);
    REQUIRE(cl.on(0, put(a, "big", big)));
    CHECK(a.stats().notice_overflows == 1);
    for (auto& k : small) CHECK_FALSE(a.backend().exists(k));
    REQUIRE(eventually([&] { return a.stats().resyncs > resyncs_before; }));
    for (auto& k : small) CHECK_MESSAGE(holder_of(cl, k).empty(), k << " is still routed to " << holder_of(cl, k));
    CHECK(holder_of(cl, "big") == "a");
    auto clients = cl.master->state().clients();
    REQUIRE(clients.size() == 1);
    CHECK(clients[0].keys == 1);
    // Reads from another node still work after the resync.
    auto& b = cl.add("b");
    std::vector<std::uint8_t> out(big.size());
    auto r = cl.on(1, get(b, "big", out));
    REQUIRE_MESSAGE(r.has_value(), r.error().message());
    CHECK(checksum(out.data(), out.size()) == checksum(big.data(), big.size()));
  }
}
