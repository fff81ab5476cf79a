#include "mc/store/data_manager.hpp"
#include "mc/tiered/tiered_backend.hpp"
#include "store_fixture.hpp"

#include <atomic>
#include <chrono>

using namespace std::chrono_literals;
using mc::test::bytes_of;
using mc::test::cluster;
using mc::test::get;
using mc::test::put;
using mc::test::random_bytes;
using mc::test::writable;

namespace {
void round_trip_sizes(cluster& cl, const std::vector<std::size_t>& sizes, const std::string& prefix) {
  auto& a = *cl.nodes[0].client;
  auto& b = *cl.nodes[1].client;
  std::uint64_t seed = 1;
  for (auto n : sizes) {
    auto v = random_bytes(n, seed++);
    auto key = prefix + std::to_string(n);
    REQUIRE(cl.on(0, put(a, key, v)));
    std::vector<std::uint8_t> out(n + 17, 0xAB);
    auto r = cl.on(1, get(b, key, out));
    REQUIRE_MESSAGE(r.has_value(), "size " << n << ": " << r.error().message());
    CHECK(*r == n);
    CHECK(mc::test::checksum(out.data(), n) == mc::test::checksum(v.data(), n));
    CHECK(out[n] == 0xAB);  // nothing written past the value
  }
}
}  // namespace

TEST_SUITE("store client") {
  TEST_CASE("a value put on A is read from B through the remote-read flow (random sizes, checksums)") {
    cluster cl;
    cl.add("a");
    cl.add("b");
    round_trip_sizes(cl, {1, 7, 4095, 4096, 4097, (1 << 20) - 1, (1 << 20) + 1, 9 * (1 << 20) + 7}, "k/");
    CHECK(cl.nodes[1].client->stats().remote_hits == 8);
    CHECK(cl.nodes[1].client->stats().local_hits == 0);
  }

  TEST_CASE("transfers forced over TCP return exactly the bytes that were put") {
    cluster cl;
    cl.add("a", {}, "tcp");
    cl.add("b", {}, "tcp");
    round_trip_sizes(cl, {1, 65536 + 3, 3 * (1 << 20) + 5}, "tcp/");
  }

  TEST_CASE("a remote write stores the value on the target, which publishes it") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    auto v = random_bytes(2 * (1 << 20) + 11, 42);
    mc::store::put_options o;
    o.where = mc::store::placement::remote;
    o.target = b.rpc_endpoint();
    REQUIRE(cl.on(0, put(a, "rw", v, o)));
    CHECK(b.data().exists("rw"));
    CHECK_FALSE(a.data().exists("rw"));
    std::vector<std::uint8_t> out(v.size());
    auto r = cl.on(0, get(a, "rw", out));
    REQUIRE(r.has_value());
    CHECK(out == v);
    // Through the master's write route (excludes the writer itself).
    o.target.clear();
    REQUIRE(cl.on(0, put(a, "routed", v, o)));
    CHECK(b.data().exists("routed"));
  }

  TEST_CASE("missing keys, small buffers and bad keys are clear errors that change nothing") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    std::vector<std::uint8_t> out(16);
    CHECK(mc::is(cl.on(1, get(b, "nope", out)).error(), mc::errc::object_not_found));
    auto v = random_bytes(100, 3);
    REQUIRE(cl.on(0, put(a, "small", v)));
    CHECK(mc::is(cl.on(1, get(b, "small", out)).error(), mc::errc::buffer_overflow));
    CHECK(mc::is(cl.on(0, get(a, "small", out)).error(), mc::errc::buffer_overflow));
    CHECK(mc::is(cl.on(0, put(a, "", v)).error(), mc::errc::invalid_key));
    CHECK(mc::is(cl.on(0, put(a, std::string(5000, 'k'), v)).error(), mc::errc::invalid_key));
    std::vector<std::uint8_t> empty;
    CHECK(mc::is(cl.on(0, put(a, "empty", empty)).error(), mc::errc::invalid_params));
    out.resize(100);
    REQUIRE(cl.on(1, get(b, "small", out)));
    CHECK(out == v);
  }

  TEST_CASE("exists, query and remove see every holder") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    auto v = random_bytes(1000, 9);
    REQUIRE(cl.on(0, put(a, "x", v)));
    auto ex = cl.on(1, [](mc::store::client& b) -> mc::task<mc::result<bool>> { co_return co_await b.exists("x"); }(b));
    REQUIRE(ex.has_value());
    CHECK(*ex);
    auto q = cl.on(1, [](mc::store::client& b) -> mc::task<mc::result<mc::store::object_info>> {
      co_return co_await b.query("x");
    }(b));
    REQUIRE(q.has_value());
    CHECK(q->size == 1000);
    CHECK_FALSE(q->local);
    REQUIRE(q->replicas.size() == 1);
    CHECK(q->replicas[0].client_id == "a");
    auto rm = cl.on(1, [](mc::store::client& b) -> mc::task<mc::result<void>> { co_return co_await b.remove("x"); }(b));
    CHECK(rm.has_value());
    CHECK_FALSE(a.data().exists("x"));
    std::vector<std::uint8_t> out(1000);
    CHECK(mc::is(cl.on(1, get(b, "x", out)).error(), mc::errc::object_not_found));
    auto rm2 =
        cl.on(1, [](mc::store::client& b) -> mc::task<mc::result<void>> { co_return co_await b.remove("x"); }(b));
    CHECK(mc::is(rm2.error(), mc::errc::object_not_found));
  }

  TEST_CASE("remove_matching removes keys everywhere; remove_local drops only this copy") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    auto v = random_bytes(3001, 5);
    for (const char* k : {"m/1", "m/2", "keep"}) REQUIRE(cl.on(0, put(a, k, v)));
    REQUIRE(cl.on(1, put(b, "m/3", v)));
    auto n = cl.on(1, [](mc::store::client& b) -> mc::task<mc::result<std::uint64_t>> {
      co_return co_await b.remove_matching("^m/", false);
    }(b));
    REQUIRE(n.has_value());
    CHECK(*n == 3);
    CHECK_FALSE(a.data().exists("m/1"));
    CHECK_FALSE(a.data().exists("m/2"));
    CHECK_FALSE(b.data().exists("m/3"));
    CHECK(a.data().exists("keep"));
    auto bad = cl.on(1, [](mc::store::client& b) -> mc::task<mc::result<std::uint64_t>> {
      co_return co_await b.remove_matching("(", false);
    }(b));
    CHECK(mc::is(bad.error(), mc::errc::invalid_params));
    // remove_local: a's copy goes and the master forgets a as its holder.
    auto rl = cl.on(
        0, [](mc::store::client& a) -> mc::task<mc::result<void>> { co_return co_await a.remove_local("keep"); }(a));
    REQUIRE(rl.has_value());
    CHECK_FALSE(a.data().exists("keep"));
    auto ex =
        cl.on(1, [](mc::store::client& b) -> mc::task<mc::result<bool>> { co_return co_await b.exists("keep"); }(b));
    REQUIRE(ex.has_value());
    CHECK_FALSE(*ex);
    auto again = cl.on(
        0, [](mc::store::client& a) -> mc::task<mc::result<void>> { co_return co_await a.remove_local("keep"); }(a));
    CHECK(mc::is(again.error(), mc::errc::object_not_found));
    for (const char* k : {"l/1", "l/2"}) REQUIRE(cl.on(0, put(a, k, v)));
    auto all = cl.on(0, [](mc::store::client& a) -> mc::task<mc::result<std::uint64_t>> {
      co_return co_await a.remove_all_local();
    }(a));
    REQUIRE(all.has_value());
    CHECK(*all == 2);
    auto ex2 =
        cl.on(1, [](mc::store::client& b) -> mc::task<mc::result<bool>> { co_return co_await b.exists("l/1"); }(b));
    REQUIRE(ex2.has_value());
    CHECK_FALSE(*ex2);
  }

  TEST_CASE("values in the SSD tier are served through staging buffers") {
    cluster cl;
    auto& a = cl.add("a", R"({"tiers":[{"type":"DRAM","capacity":"1MiB","priority":100},)"
                          R"({"type":"SSD","capacity":"96MiB","priority":10,"path":"@DIR@"}]})");
    auto& b = cl.add("b", R"({"tiers":[{"type":"SSD","capacity":"96MiB","priority":10,"path":"@DIR@"}]})");
    // Remote read of SSD-resident values (too big for A's DRAM tier).
    round_trip_sizes(cl, {2 * (1 << 20) + 1, 9 * (1 << 20) + 4097}, "ssd/");
    auto h = a.backend().get(mc::test::numbered("ssd/", 2 * (1 << 20) + 1));
    REQUIRE(h.has_value());
    CHECK(h->tier() == mc::tiered::tier_type::ssd);
    // Remote write into an SSD-only node.
    auto v = random_bytes(5 * (1 << 20) + 3, 77);
    mc::store::put_options o;
    o.where = mc::store::placement::remote;
    o.target = b.rpc_endpoint();
    REQUIRE(cl.on(0, put(a, "into-ssd", v, o)));
    std::vector<std::uint8_t> out(v.size());
    REQUIRE(cl.on(0, get(a, "into-ssd", out)));
    CHECK(out == v);
  }

  TEST_CASE("batch put and batch get keep per-item results in order") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    std::vector<std::vector<std::uint8_t>> vals;
    for (int i = 0; i < 20; ++i) vals.push_back(random_bytes(1000 + i * 4099, 100 + i));
    auto puts = cl.on(0,
                      [](mc::store::client& a,
                         std::vector<std::vector<std::uint8_t>>& vals) -> mc::task<std::vector<mc::result<void>>> {
                        std::vector<std::string> keys;
                        std::vector<std::span<const std::byte>> spans;
                        for (std::size_t i = 0; i < vals.size(); ++i) {
                          keys.push_back(mc::test::numbered("b/", i));
                          spans.push_back(bytes_of(vals[i]));
                        }
                        keys.push_back("");  // a bad item does not spoil the batch
                        spans.push_back(bytes_of(vals[0]));
                        co_return co_await a.batch_put(std::move(keys), std::move(spans));
                      }(a, vals));
    REQUIRE(puts.size() == 21);
    for (int i = 0; i < 20; ++i) CHECK(puts[i].has_value());
    CHECK(mc::is(puts[20].error(), mc::errc::invalid_key));
    std::vector<std::vector<std::uint8_t>> outs(21, std::vector<std::uint8_t>(100000));
    auto gets =
        cl.on(1,
              [](mc::store::client& b,
                 std::vector<std::vector<std::uint8_t>>& outs) -> mc::task<std::vector<mc::result<std::size_t>>> {
                std::vector<std::string> keys;
                std::vector<std::span<std::byte>> spans;
                for (std::size_t i = 0; i < outs.size(); ++i) {
                  keys.push_back(mc::test::numbered("b/", i));
                  spans.push_back(writable(outs[i]));
                }
                co_return co_await b.batch_get(std::move(keys), std::move(spans));
              }(b, outs));
    REQUIRE(gets.size() == 21);
    for (int i = 0; i < 20; ++i) {
      REQUIRE(gets[i].has_value());
      CHECK(*gets[i] == vals[i].size());
      CHECK(std::equal(vals[i].begin(), vals[i].end(), outs[i].begin()));
    }
    CHECK(mc::is(gets[20].error(), mc::errc::object_not_found));
  }

  TEST_CASE("concurrent writers and readers on one key: every read returns one whole written value") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    constexpr std::size_t size = 256 * 1024 + 3;
    std::vector<std::vector<std::uint8_t>> versions;
    for (int i = 0; i < 8; ++i) versions.push_back(random_bytes(size, 1000 + i));
    REQUIRE(cl.on(0, put(a, "hot", versions[0])));
    std::atomic<bool> stop{false};
    std::atomic<int> torn{0}, reads{0};
    std::thread reader([&] {
      std::vector<std::uint8_t> out(size);
      while (!stop.load()) {
        auto r = cl.on(1, get(b, "hot", out));
        if (!r) continue;
        ++reads;
        bool whole = false;
        for (auto& v : versions) whole = whole || out == v;
        if (!whole) ++torn;
      }
    });
    // At least 40 overwrites, and keep overwriting until the reader has
    // completed a few reads concurrently with them (its first get also pays
    // for the route lookup and the connections; 40 local puts can be over by
    // then). Bounded: a reader that never succeeds fails the CHECK below.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (int round = 0; round < 40 || (reads.load() < 5 && std::chrono::steady_clock::now() < until); ++round)
      REQUIRE(cl.on(0, put(a, "hot", versions[round % 8])));
    stop = true;
    reader.join();
    CHECK(torn.load() == 0);
    CHECK(reads.load() > 0);
  }
}
