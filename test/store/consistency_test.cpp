// Versions, supersede and eviction notices, end to end: an in-process master
// and several clients (test/store/store_fixture.hpp). See the README's
// "Consistency model".
#include "mc/store/peer_client.hpp"
#include "mc/tiered/tiered_backend.hpp"
#include "store_fixture.hpp"

#include <functional>
#include <thread>

using namespace std::chrono_literals;
using mc::test::bytes_of;
using mc::test::checksum;
using mc::test::cluster;
using mc::test::get;
using mc::test::put;
using mc::test::random_bytes;
using mc::test::writable;

namespace {
constexpr std::size_t kib = 1024;

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

/// Sends one write of `bytes` under `key` at `version` to `owner` as the
/// requester `from` would (inline when `inline_data`, else transferred out of
/// a registration in from's engine), and returns the item's result.
mc::result<void> late_write(cluster& cl, mc::store::client& from, mc::store::client& owner, const std::string& key,
                            std::vector<std::uint8_t>& bytes, std::uint64_t version, bool inline_data) {
  mc::store::peer_client pc(5s);
  pc.set_requester_id(from.id());
  mc::store::peer_write w;
  w.key = key;
  w.version = version;
  std::optional<mc::transfer::region> reg;
  if (inline_data) {
    w.data.push_back(bytes_of(bytes));
  } else {
    auto r = from.engine().register_memory(bytes.data(), bytes.size());
    REQUIRE(r);
    reg.emplace(std::move(*r));
    w.src.push_back(reg->describe());
  }
  std::vector<mc::store::peer_write> ws;
  ws.push_back(std::move(w));
  auto r = cl.on(0, pc.write_batch(owner.rpc_endpoint(), std::move(ws)));
  REQUIRE_MESSAGE(r.has_value(), r.error().message());
  REQUIRE(r->size() == 1);
  return std::move((*r)[0]);
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

  TEST_CASE("a get whose cached route has an old size reads the owner's new value at once, without the master") {
    // An overwrite on the same owner never invalidates another node's cached
    // route, so its size goes stale. The owner answers INVALID_PARAMS with
    // the size it holds; the reader asks it again at that size (one more
    // RPC), with no fallback and no route refresh.
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    const std::size_t room = 512 * kib;
    std::vector<std::uint8_t> out(room);
    const std::size_t sizes[] = {300 * kib + 7, 200 * kib + 3, 400 * kib + 1, 100 * kib + 9};
    for (std::size_t i = 0; i < std::size(sizes); ++i) {
      CAPTURE(i);
      auto v = random_bytes(sizes[i], 300 + i);
      REQUIRE(cl.on(0, put(a, "resized", v)));
      const auto before = b.stats();
      auto r = cl.on(1, get(b, "resized", out));
      REQUIRE_MESSAGE(r.has_value(), r.error().message());
      CHECK(*r == sizes[i]);
      CHECK(checksum(out.data(), sizes[i]) == checksum(v.data(), sizes[i]));
      const auto after = b.stats();
      CHECK(after.fallbacks == before.fallbacks);
      if (i > 0) {  // the route came from b's cache, at the previous size
        CHECK(after.route_cache_hits == before.route_cache_hits + 1);
        CHECK(after.batch_rpcs == before.batch_rpcs + 2);
      }
    }
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

  TEST_CASE("a put whose publish failed leaves no copy that a later re-publish could bring back") {
    // The soak's "resurrected" reads (seed 31, 2026-12-04): puts that timed
    // out while the master failed over had committed on their owner, whose
    // publish then failed; the owner kept the copy unpublished, re-published
    // it to the next leader (which remembers no newer write or remove across
    // a failover) long after later puts or a remove of the key completed,
    // and readers got the old value back. A failed publish now drops the
    // copy before the put returns its error.
    cluster cl;
    auto& a = add_with(cl, "a", {}, [](mc::store::client_options&) {});
    auto& b = add_with(cl, "b", {}, [](mc::store::client_options&) {});
    auto kept = random_bytes(3 * kib + 5, 1);
    REQUIRE(cl.on(1, put(b, "kept", kept)));
    REQUIRE(holder_of(cl, "kept") == "b");
    // A transferred write makes b ask the master for a's registration (cached
    // 2 s): warm that cache, so the writes below reach b's commit.
    auto warm = random_bytes(70 * kib, 2);
    REQUIRE(late_write(cl, a, b, "warm", warm, a.backend().issue_version(), false));
    cl.stop_master();
    std::vector<std::string> failed;
    for (std::size_t n : {300 * kib + 7, std::size_t{1}, std::size_t{1000}}) {  // transferred, inline, inline
      auto key = "failed/" + std::to_string(n);
      auto v = random_bytes(n, 50 + n);
      auto r = late_write(cl, a, b, key, v, a.backend().issue_version(), n < 64 * kib);
      REQUIRE(r.has_error());
      CHECK_FALSE(mc::is(r.error(), mc::errc::superseded));
      CHECK_MESSAGE(!b.backend().exists(key), key << ": the copy outlived its failed publish");
      failed.push_back(key);
    }
    CHECK(b.stats().failed_publishes == 3);
    CHECK(b.backend().exists("kept"));
    cl.start_master();
    // Both nodes re-register with the new master and re-publish what they hold.
    REQUIRE(eventually([&] {
      auto cs = cl.master->state().clients();
      return cs.size() == 2 && holder_of(cl, "kept") == "b";
    }));
    for (auto& key : failed) {
      CHECK_MESSAGE(holder_of(cl, key).empty(), key << " came back on " << holder_of(cl, key));
      std::vector<std::uint8_t> out(400 * kib, 0);
      auto g = cl.on(0, get(a, key, out));
      REQUIRE(g.has_error());
      CHECK(mc::is(g.error(), mc::errc::object_not_found));
    }
    std::vector<std::uint8_t> out(kept.size(), 0);
    auto g = cl.on(0, get(a, "kept", out));
    REQUIRE_MESSAGE(g.has_value(), g.error().message());
    CHECK(checksum(out.data(), out.size()) == checksum(kept.data(), kept.size()));
  }

  TEST_CASE("a write that reaches its owner after its put gave up never replaces a later value") {
    // The soak's timed-out put: a remote write carries the version its put
    // started with (the requester's hybrid clock). Here it reaches its owner
    // only after a later put of the key completed on another node (the
    // owner's commit or its publish stalled past the requester's deadline):
    // the master refuses the older version, the owner drops its copy and
    // answers SUPERSEDED, and every node keeps reading the later value.
    // Before versions were taken at the put's start and compared across
    // holders, the late publish won ("last publish to arrive").
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    auto& c = cl.add("c");
    for (std::size_t n : {std::size_t{1000}, 300 * kib + 7}) {  // inline, then transferred
      const bool inline_data = n < 64 * kib;
      auto key = "late/" + std::to_string(n);
      auto stale = random_bytes(n, 10 + n), fresh = random_bytes(n + 3, 20 + n);
      const auto started = a.backend().issue_version();                 // a's put starts...
      REQUIRE(cl.on(2, put(c, key, fresh)));                            // ...a later put completes on c
      auto r = late_write(cl, a, b, key, stale, started, inline_data);  // ...then a's write reaches b
      REQUIRE(r.has_error());
      CHECK(mc::is(r.error(), mc::errc::superseded));
      CHECK(holder_of(cl, key) == "c");
      CHECK(cl.master->state().lookup(key)->size == fresh.size());
      CHECK_FALSE(b.backend().exists(key));  // b dropped the copy the master refused
      for (std::size_t i : {0u, 1u, 2u}) {
        std::vector<std::uint8_t> out(fresh.size() + 10, 0);
        auto g = cl.on(i, get(*cl.nodes[i].client, key, out));
        REQUIRE_MESSAGE(g.has_value(), g.error().message());
        CHECK(*g == fresh.size());
        CHECK(checksum(out.data(), fresh.size()) == checksum(fresh.data(), fresh.size()));
      }
      // A write with a version from after that put wins, as any later put.
      auto newer = random_bytes(n, 30 + n);
      REQUIRE(late_write(cl, a, b, key, newer, a.backend().issue_version(), inline_data));
      CHECK(holder_of(cl, key) == "b");
      REQUIRE(eventually([&] { return !c.backend().exists(key); }));  // c's superseded copy (drop notice)
      std::vector<std::uint8_t> out(n, 0);
      REQUIRE(cl.on(2, get(c, key, out)));
      CHECK(checksum(out.data(), n) == checksum(newer.data(), n));
    }
    CHECK(b.stats().stale_publishes == 2);

    // The owner itself holds a newer value: its commit refuses the older
    // version (nothing replaced, nothing published).
    auto held = random_bytes(5000, 40);
    const auto before = a.backend().issue_version();
    REQUIRE(cl.on(1, put(b, "held", held)));
    auto stale = random_bytes(70 * kib + 1, 41);
    auto r = late_write(cl, a, b, "held", stale, before, false);
    REQUIRE(r.has_error());
    CHECK(mc::is(r.error(), mc::errc::superseded));
    CHECK(holder_of(cl, "held") == "b");
    std::vector<std::uint8_t> out(held.size(), 0);
    REQUIRE(cl.on(0, get(a, "held", out)));
    CHECK(checksum(out.data(), out.size()) == checksum(held.data(), held.size()));

    // A version far ahead of the owner's clock (a skewed or hostile peer) is
    // refused before anything is stored: it would drag b's clock along.
    auto ahead = random_bytes(100, 42);
    auto far = a.backend().issue_version() + std::uint64_t{3600} * 1'000'000'000u;
    auto h = late_write(cl, a, b, "held", ahead, far, true);
    REQUIRE(h.has_error());
    CHECK(mc::is(h.error(), mc::errc::invalid_params));
    REQUIRE(cl.on(0, get(a, "held", out)));
    CHECK(checksum(out.data(), out.size()) == checksum(held.data(), held.size()));
    CHECK(b.backend().issue_version() < far);
  }
}
