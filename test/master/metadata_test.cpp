#include "clients.hpp"
#include "mc/master/metadata.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <set>
#include <thread>

using namespace std::chrono_literals;
using mc::master::client_info;
using mc::master::metadata;

using mc::test::client;

namespace {
/// Publishes r0 .. r<count-1> on "a" at `version`, removing each (remove_key) at once.
void put_then_remove(metadata& m, int count, std::uint64_t version) {
  for (int i = 0; i < count; ++i) {
    auto key = mc::test::numbered("r", static_cast<std::uint64_t>(i));
    REQUIRE(m.add_replica(key, "a", 1, version));
    REQUIRE(m.remove_key(key));
  }
}
}  // namespace

TEST_SUITE("master metadata") {
  TEST_CASE("registration is idempotent and validates its fields") {
    metadata m;
    CHECK(m.register_client(client("a")).has_value());
    CHECK(m.register_client(client("a")).has_value());
    CHECK(m.clients().size() == 1);
    auto restarted = client("a", 2000, 10);  // same endpoints, new numbers: a restart
    CHECK(m.register_client(restarted).has_value());
    CHECK(m.clients().at(0).info.capacity == 2000);
    CHECK(mc::is(m.register_client(client_info{}).error(), mc::errc::invalid_params));
    for (const char* bad : {"a", "a:0", "a:1 ", "fd00::1:1", "a:1\n\"x", "[]:1"}) {
      CAPTURE(bad);
      auto c = client("z");
      c.rpc_endpoint = bad;
      CHECK(mc::is(m.register_client(c).error(), mc::errc::invalid_params));
      c = client("z");
      c.transfer_endpoint = bad;
      CHECK(mc::is(m.register_client(c).error(), mc::errc::invalid_params));
    }
    CHECK(m.clients().size() == 1);  // the refused ones left nothing behind
    CHECK(mc::is(m.heartbeat("nobody", 0, 0).error(), mc::errc::client_not_found));
  }

  TEST_CASE("replicas are added, looked up, removed and counted") {
    metadata m;
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.register_client(client("b")));
    CHECK(m.add_replica("k", "a", 10, 5));
    CHECK(m.add_replica("k", "a", 10, 5));  // idempotent
    CHECK(m.add_replica("j", "b", 20, 5));
    auto info = m.lookup("k");
    REQUIRE(info);
    CHECK(info->size == 10);
    REQUIRE(info->replicas.size() == 1);
    CHECK(info->replicas[0].client_id == "a");
    CHECK(m.replica_count() == 2);
    CHECK(m.key_count() == 2);
    CHECK(m.remove_replica("k", "a", 5));
    CHECK(mc::is(m.remove_replica("k", "a", 5).error(), mc::errc::object_not_found));
    CHECK(mc::is(m.lookup("k").error(), mc::errc::object_not_found));
    CHECK_FALSE(m.exists("k"));
    CHECK(m.exists("j"));
    CHECK(m.key_count() == 1);
  }

  TEST_CASE("bad keys and unknown clients are rejected") {
    metadata m;
    REQUIRE(m.register_client(client("a")));
    CHECK(mc::is(m.add_replica("", "a", 1, 1).error(), mc::errc::invalid_key));
    CHECK(mc::is(m.add_replica(std::string(5000, 'x'), "a", 1, 1).error(), mc::errc::invalid_key));
    CHECK(mc::is(m.add_replica("k", "ghost", 1, 1).error(), mc::errc::client_not_found));
    CHECK(mc::is(m.add_replica("k", "a", 1, 0).error(), mc::errc::invalid_version));
    CHECK(mc::is(m.lookup("").error(), mc::errc::invalid_key));
  }

  TEST_CASE("a publish on another holder supersedes the older holder, whatever the size") {
    metadata m;
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.register_client(client("b")));
    REQUIRE(m.add_replica("k", "a", 10, 1));
    REQUIRE(m.add_replica("k", "b", 20, 1));
    auto info = m.lookup("k");
    REQUIRE(info);
    CHECK(info->size == 20);
    REQUIRE(info->replicas.size() == 1);
    CHECK(info->replicas[0].client_id == "b");
    auto cl = m.clients();
    CHECK(cl[0].keys == 0);
    CHECK(cl[1].keys == 1);
    // Same size: still superseded (the bug was: both stayed routable).
    REQUIRE(m.add_replica("k", "a", 20, 2));
    info = m.lookup("k");
    REQUIRE(info->replicas.size() == 1);
    CHECK(info->replicas[0].client_id == "a");
  }

  TEST_CASE("remove_key returns every holder, superseded ones included") {
    metadata m;
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.register_client(client("b")));
    REQUIRE(m.add_replica("k", "a", 1, 1));
    REQUIRE(m.add_replica("k", "b", 1, 1));
    (void)m.take_notices("a", 10);  // a's drop for b's put
    auto r = m.remove_key("k");
    REQUIRE(r);
    CHECK(r->size() == 2);
    CHECK(mc::is(m.remove_key("k").error(), mc::errc::object_not_found));
    // Both holders are told to drop their copy (a holder the remover cannot
    // reach then drops it at its next heartbeat).
    for (auto id : {"a", "b"}) {
      auto n = m.take_notices(id, 10);
      REQUIRE(n.drops.size() == 1);
      CHECK(n.drops[0].key == "k");
      CHECK(n.drops[0].version == 1);
    }
    // Best effort: a full queue is not turned into a resync by removals.
    mc::master::metadata_options o;
    o.max_pending_drops = 2;
    metadata small(o);
    REQUIRE(small.register_client(client("a")));
    put_then_remove(small, 5, 1);
    auto n = small.take_notices("a", 10);
    CHECK(n.drops.size() == 2);
    CHECK_FALSE(n.resync);
    CHECK(small.ordering().notice_overflows == 0);
  }

  TEST_CASE("a removed key's newest version is remembered: a late older write cannot bring it back") {
    metadata m;
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.register_client(client("b")));
    // Puts at 10 (a, timed out: its publish is late) and 20 (b), then a remove.
    REQUIRE(m.add_replica("k", "b", 8, 20));
    REQUIRE(m.remove_key("k"));
    CHECK(mc::is(m.add_replica("k", "a", 4, 10).error(), mc::errc::superseded));
    CHECK(mc::is(m.add_replica("k", "b", 8, 20, mc::master::publish_kind::republish).error(), mc::errc::superseded));
    CHECK_FALSE(m.exists("k"));
    // A newer put recreates the key; its own removal is remembered again.
    REQUIRE(m.add_replica("k", "a", 4, 21));
    CHECK(m.lookup("k")->replicas.at(0).client_id == "a");
    REQUIRE(m.remove_replica("k", "a", 21));  // the last copy evicted
    CHECK(mc::is(m.add_replica("k", "b", 4, 21).error(), mc::errc::superseded));
    REQUIRE(m.add_replica("k", "b", 4, 22));
    // remove_matching remembers too.
    REQUIRE(m.remove_matching("^k$", false, 10));
    CHECK(mc::is(m.add_replica("k", "a", 4, 22).error(), mc::errc::superseded));
    // Bounded: with room for about two removals per shard, the oldest are forgotten.
    mc::master::metadata_options o;
    o.shards = 1;
    o.removed_key_bytes = 2 * (64 + 2);
    metadata small(o);
    REQUIRE(small.register_client(client("a")));
    put_then_remove(small, 5, 100);
    CHECK(small.add_replica("r0", "a", 1, 50));  // forgotten: accepted
    CHECK(mc::is(small.add_replica("r4", "a", 1, 50).error(), mc::errc::superseded));
    // Off (0 bytes): nothing remembered.
    o.removed_key_bytes = 0;
    metadata none(o);
    REQUIRE(none.register_client(client("a")));
    REQUIRE(none.add_replica("z", "a", 1, 100));
    REQUIRE(none.remove_key("z"));
    CHECK(none.add_replica("z", "a", 1, 50));
  }

  TEST_CASE("remove_matching removes matching keys in bounded pages and refuses bad patterns") {
    // The pathological-pattern scan below is slow in sanitizer builds: no
    // client may go silent past route_ttl (its keys would stop being routed).
    mc::master::metadata_options o;
    o.route_ttl = std::chrono::hours(1);
    o.drop_ttl = std::chrono::hours(2);
    metadata m(o);
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.register_client(client("b")));
    for (int i = 0; i < 10; ++i) REQUIRE(m.add_replica("r/" + std::to_string(i), i % 2 ? "a" : "b", 1, 1));
    REQUIRE(m.add_replica("keep", "a", 1, 1));
    // Page through the shards with a limit of 4 keys per call: every matching
    // key once, never "keep", and every call makes progress.
    std::set<std::string> seen;
    std::size_t from = 0, calls = 0;
    while (from < m.shard_count()) {
      auto page = m.remove_matching("^r/", false, 4, from);
      REQUIRE(page);
      CHECK(page->removed.size() <= 4);
      CHECK((page->next_shard > from || !page->removed.empty()));
      for (auto& k : page->removed) {
        CHECK(k.key.rfind("r/", 0) == 0);
        CHECK(seen.insert(k.key).second);
        REQUIRE(k.holders.size() == 1);
      }
      from = page->next_shard;
      REQUIRE(++calls < 1000);
    }
    CHECK(seen.size() == 10);
    CHECK(m.exists("keep"));
    CHECK(m.key_count() == 1);
    CHECK(mc::is(m.remove_matching("x", false, 4, m.shard_count() + 1).error(), mc::errc::out_of_range));
    for (const char* bad : {"", "(", "[a-"})
      CHECK(mc::is(m.remove_matching(bad, false, 10).error(), mc::errc::invalid_params));
    CHECK(mc::is(m.remove_matching(std::string(metadata::max_pattern_bytes + 1, 'a'), false, 10).error(),
                 mc::errc::invalid_params));
    // A pathological pattern hits Boost.Regex's complexity bound instead of stalling.
    REQUIRE(m.add_replica(std::string(40, 'a') + "!", "a", 1, 1));
    for (std::size_t s = 0; s < m.shard_count(); ++s) {
      auto evil = m.remove_matching("^(a+)+$", false, 10, s);
      if (evil)
        CHECK(evil->removed.empty());
      else
        CHECK(mc::is(evil.error(), mc::errc::invalid_params));
    }
    CHECK(m.exists("keep"));
    // Every key, in pages bounded by the scan budget (here: all in one call).
    auto all = m.remove_matching("", true, 100);
    REQUIRE(all);
    CHECK(all->removed.size() == 2);
    CHECK(all->next_shard == m.shard_count());
    CHECK(m.key_count() == 0);
  }

  TEST_CASE("remove_matching looks at a bounded number of entries per call") {
    metadata m;
    REQUIRE(m.register_client(client("a")));
    const std::size_t n = 3 * metadata::scan_budget;
    for (std::size_t i = 0; i < n; ++i) REQUIRE(m.add_replica("miss/" + std::to_string(i), "a", 1, 1));
    // No key matches: each call still returns, after about scan_budget
    // entries (whole shards), and the calls together cover every shard.
    std::size_t from = 0, calls = 0;
    while (from < m.shard_count()) {
      auto page = m.remove_matching("^hit/", false, 10, from);
      REQUIRE(page);
      CHECK(page->removed.empty());
      REQUIRE(page->next_shard > from);
      from = page->next_shard;
      ++calls;
    }
    CHECK(calls >= 3);
    CHECK(m.key_count() == n);
  }

  TEST_CASE("write route picks the healthy client with the most room") {
    metadata m;
    REQUIRE(m.register_client(client("a", 1000, 900)));
    REQUIRE(m.register_client(client("b", 1000, 100)));
    CHECK(m.write_route(50)->client_id == "b");
    CHECK(m.write_route(50, "b")->client_id == "a");
    CHECK(mc::is(m.write_route(5000).error(), mc::errc::no_available_handle));
  }

  TEST_CASE("a silent client first stops receiving routes, then is dropped with its replicas") {
    // Wall-clock TTLs with margins a loaded host keeps: a's silence passes
    // route_ttl by construction (the waits below are lower bounds); b
    // heartbeats right before each check, so only a stall of over 100 ms
    // there could make it suspect, and a is dropped early only if the
    // first phase overran by 850 ms.
    mc::master::metadata_options o;
    o.route_ttl = 100ms;
    o.drop_ttl = 1000ms;
    metadata m(o);
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.register_client(client("b")));
    REQUIRE(m.add_replica("k", "a", 1, 1));
    REQUIRE(m.add_replica("k", "b", 1, 1));
    // Keep b alive, let a go silent.
    auto until = std::chrono::steady_clock::now() + 150ms;
    while (std::chrono::steady_clock::now() < until) {
      REQUIRE(m.heartbeat("b", 0, 1000));
      std::this_thread::sleep_for(5ms);
    }
    REQUIRE(m.heartbeat("b", 0, 1000));
    auto cl = m.clients();
    CHECK(cl[0].state == mc::master::health::suspect);
    CHECK(m.lookup("k")->replicas.size() == 1);
    CHECK(m.write_route(1, "b").has_error());
    CHECK(m.sweep().empty());
    until = std::chrono::steady_clock::now() + 900ms;
    while (std::chrono::steady_clock::now() < until) {
      REQUIRE(m.heartbeat("b", 0, 1000));
      std::this_thread::sleep_for(5ms);
    }
    REQUIRE(m.heartbeat("b", 0, 1000));
    auto dropped = m.sweep();
    REQUIRE(dropped.size() == 1);
    CHECK(dropped[0] == "a");
    CHECK(m.replica_count() == 1);
    CHECK(mc::is(m.heartbeat("a", 0, 0).error(), mc::errc::client_not_found));
  }

  TEST_CASE("a key removed while its only holder was dropped as silent does not come back with its re-publish") {
    // The soak's sequence (seed 29): the holder is partitioned past drop_ttl
    // and swept, a remove finds no entry, the holder returns and re-publishes.
    mc::master::metadata_options o;
    o.route_ttl = 10ms;
    o.drop_ttl = 30ms;
    metadata m(o);
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.add_replica("removed", "a", 8, 100));
    REQUIRE(m.add_replica("kept", "a", 8, 100));
    std::this_thread::sleep_for(60ms);
    REQUIRE(m.sweep() == std::vector<std::string>{"a"});
    CHECK(mc::is(m.remove_key("removed").error(), mc::errc::object_not_found));  // no holder known
    REQUIRE(m.register_client(client("a")));
    CHECK(mc::is(m.add_replica("removed", "a", 8, 100, mc::master::publish_kind::republish).error(),
                 mc::errc::superseded));
    CHECK(mc::is(m.lookup("removed").error(), mc::errc::object_not_found));
    // A key nobody removed comes back, and a newer put of the removed one works.
    CHECK(m.add_replica("kept", "a", 8, 100, mc::master::publish_kind::republish).has_value());
    CHECK(m.lookup("kept").has_value());
    CHECK(m.add_replica("removed", "a", 8, 101).has_value());
    CHECK(m.lookup("removed").has_value());
    // An explicit unregister leaves no orphan: a later remove forgets nothing,
    // and the key may be published again at its old version.
    REQUIRE(m.register_client(client("b")));
    REQUIRE(m.add_replica("gone", "b", 8, 100));
    REQUIRE(m.unregister_client("b"));
    CHECK(mc::is(m.remove_key("gone").error(), mc::errc::object_not_found));
    REQUIRE(m.register_client(client("b")));
    CHECK(m.add_replica("gone", "b", 8, 100, mc::master::publish_kind::republish).has_value());
  }

  TEST_CASE("a live client's id is not taken over from other endpoints; a silent one's is") {
    mc::master::metadata_options o;
    o.route_ttl = 40ms;
    o.drop_ttl = 10s;
    metadata m(o);
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.add_replica("k", "a", 7, 1));
    auto other_rpc = client("a");
    other_rpc.rpc_endpoint = "10.0.0.9:1";
    auto other_transfer = client("a");
    other_transfer.transfer_endpoint = "10.0.0.9:2";
    CHECK(mc::is(m.register_client(other_rpc).error(), mc::errc::object_already_exists));
    CHECK(mc::is(m.register_client(other_transfer).error(), mc::errc::object_already_exists));
    // Nothing changed: the routes still lead to the registered client.
    CHECK(m.clients().at(0).info.rpc_endpoint == "a:12345");
    CHECK(m.lookup("k")->replicas.at(0).transfer_endpoint == "a:50052");
    CHECK(m.register_client(client("a")));  // the owner re-registers: fine, and refreshes its heartbeat
    CHECK(mc::is(m.register_client(other_rpc).error(), mc::errc::object_already_exists));
    // Once the owner has been silent for route_ttl, the id can be taken over.
    auto until = std::chrono::steady_clock::now() + 5s;
    while (m.clients().at(0).state == mc::master::health::healthy && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(2ms);
    REQUIRE(m.clients().at(0).state == mc::master::health::suspect);
    CHECK(m.register_client(other_rpc));
    CHECK(m.clients().at(0).info.rpc_endpoint == "10.0.0.9:1");
    CHECK(m.clients().at(0).state == mc::master::health::healthy);
    // ... and an unregistered id is free at once.
    REQUIRE(m.unregister_client("a"));
    CHECK(m.register_client(other_transfer));
  }

  TEST_CASE("listing keys by prefix is bounded") {
    metadata m;
    REQUIRE(m.register_client(client("a")));
    for (int i = 0; i < 100; ++i) REQUIRE(m.add_replica(mc::test::numbered("p/", i), "a", 1, 1));
    REQUIRE(m.add_replica("q/1", "a", 1, 1));
    CHECK(m.keys("p/", 10).size() == 10);
    CHECK(m.keys("p/", 1000).size() == 100);
    CHECK(m.keys("q/", 1000).size() == 1);
    CHECK(m.unregister_client("a"));
    CHECK(m.key_count() == 0);
  }

  TEST_CASE("a paged key scan lists every key present throughout, while tables grow and entries shift") {
    mc::master::metadata_options o;
    o.shards = 4;  // small shards: growth and backward shifts happen between pages
    metadata m(o);
    REQUIRE(m.register_client(client("a")));
    std::set<std::string> stable;
    for (int i = 0; i < 300; ++i) {
      stable.insert(mc::test::numbered("s/", i));
      REQUIRE(m.add_replica(mc::test::numbered("s/", i), "a", 7, 1));
    }
    for (std::size_t limit : {1u, 7u, 64u}) {
      CAPTURE(limit);
      std::set<std::string> seen;
      std::uint64_t cursor = 0;
      int pages = 0, churn = 0;
      do {
        auto page = m.scan_keys("s/", cursor, limit);
        REQUIRE(page);
        // A page never exceeds the limit but for one home slot's keys.
        CHECK(page->keys.size() <= std::max<std::size_t>(limit, 8));
        for (auto& [k, ki] : page->keys) {
          CHECK(k.starts_with("s/"));
          CHECK(ki.size == 7);
          CHECK(ki.replicas.size() == 1);
          seen.insert(k);
        }
        cursor = page->cursor;
        // Between pages: many inserts (the tables double) and removals (the
        // entries behind them shift back), none of a stable key.
        // (Each round's versions are newer: a removed key is remembered.)
        const std::uint64_t v = 1 + limit;
        for (int j = 0; j < 40; ++j, ++churn) REQUIRE(m.add_replica(mc::test::numbered("n/", churn), "a", 1, v));
        for (int j = churn - 40; j < churn; j += 2) REQUIRE(m.remove_replica(mc::test::numbered("n/", j), "a", v));
        REQUIRE(++pages < 2000);
      } while (cursor != 0);
      for (auto& k : stable) {
        CAPTURE(k);
        CHECK(seen.count(k) == 1);
      }
      CHECK(seen.size() == stable.size());  // the prefix kept the churned keys out
    }
    // Bounded: a prefix no key has is still a scan of bounded pages.
    std::uint64_t cursor = 0;
    int pages = 0;
    do {
      auto page = m.scan_keys("none/", cursor, 10);
      REQUIRE(page);
      CHECK(page->keys.empty());
      cursor = page->cursor;
      REQUIRE(++pages < 100);
    } while (cursor != 0);
    // Hostile cursors: a shard past the end is refused; any other value is a
    // position (it may skip keys, never crash).
    CHECK(mc::is(m.scan_keys("", std::uint64_t{4} << 32, 10).error(), mc::errc::out_of_range));
    CHECK(mc::is(m.scan_keys("", ~std::uint64_t{0}, 10).error(), mc::errc::out_of_range));
    CHECK(mc::is(m.scan_keys("", 0, 0).error(), mc::errc::invalid_params));
    for (std::uint64_t c : {std::uint64_t{0xFFFFFFFFu}, (std::uint64_t{3} << 32) | 0x80000000u, std::uint64_t{12345}})
      CHECK(m.scan_keys("", c, 100).has_value());
    // keys() is a loop of pages without duplicates.
    auto all = m.keys("", 1'000'000);
    std::set<std::string> distinct;
    for (auto& [k, ki] : all) distinct.insert(k);
    CHECK(distinct.size() == all.size());
    CHECK(all.size() == m.key_count());
  }

  TEST_CASE("a publish older than the holder's entry is ignored; its size does not win") {
    metadata m;
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.add_replica("k", "a", 200, 20));
    CHECK(mc::is(m.add_replica("k", "a", 100, 10).error(), mc::errc::invalid_version));
    auto info = m.lookup("k");
    REQUIRE(info);
    CHECK(info->size == 200);
    REQUIRE(m.add_replica("k", "a", 300, 30));  // a newer re-put: size follows it
    CHECK(m.lookup("k")->size == 300);
    CHECK(m.ordering().stale_publishes == 1);
    CHECK(m.clients()[0].keys == 1);
  }

  TEST_CASE("an eviction notice of an old copy never unpublishes a fresher re-put") {
    metadata m;
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.add_replica("k", "a", 10, 1));
    REQUIRE(m.add_replica("k", "a", 10, 2));  // evicted v1, re-put v2; the notice for v1 arrives late
    CHECK(mc::is(m.remove_replica("k", "a", 1).error(), mc::errc::invalid_version));
    REQUIRE(m.lookup("k"));
    CHECK(m.ordering().stale_removals == 1);
    REQUIRE(m.remove_replica("k", "a", 2));  // the eviction of v2 itself does remove it
    CHECK_FALSE(m.exists("k"));
    CHECK(m.clients()[0].keys == 0);
  }

  TEST_CASE("supersede: the older holder leaves the routes, is told to drop, and its stale publish is refused") {
    metadata m;
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.register_client(client("b")));
    REQUIRE(m.add_replica("k", "a", 64, 100));
    REQUIRE(m.add_replica("k", "b", 64, 107));
    auto info = m.lookup("k");
    REQUIRE(info);
    REQUIRE(info->replicas.size() == 1);
    CHECK(info->replicas[0].client_id == "b");
    CHECK(m.replica_count() == 1);
    CHECK(m.ordering().superseded == 1);
    auto n = m.take_notices("a", 10);
    REQUIRE(n.drops.size() == 1);
    CHECK(n.drops[0].key == "k");
    CHECK(n.drops[0].version == 100);
    CHECK_FALSE(n.resync);
    CHECK(m.take_notices("a", 10).drops.empty());  // delivered once
    CHECK(m.take_notices("b", 10).drops.empty());
    // A late duplicate of a's superseded publish, or a republish of that copy, is refused.
    CHECK(mc::is(m.add_replica("k", "a", 64, 100).error(), mc::errc::invalid_version));
    CHECK(mc::is(m.add_replica("k", "a", 64, 100, mc::master::publish_kind::republish).error(),
                 mc::errc::invalid_version));
    CHECK(m.lookup("k")->replicas[0].client_id == "b");
    // a confirms the drop: its superseded entry goes away.
    REQUIRE(m.remove_replica("k", "a", 100));
    // A fresh (newer) put on a supersedes b in turn.
    REQUIRE(m.add_replica("k", "a", 32, 108));
    info = m.lookup("k");
    CHECK(info->replicas[0].client_id == "a");
    CHECK(info->size == 32);
    CHECK(m.take_notices("b", 10).drops.at(0).version == 107);
    // A republish takes a key from a live holder only with a newer version.
    REQUIRE(m.register_client(client("c")));
    CHECK(mc::is(m.add_replica("k", "c", 32, 50, mc::master::publish_kind::republish).error(), mc::errc::superseded));
    CHECK(mc::is(m.add_replica("k", "c", 32, 108, mc::master::publish_kind::republish).error(), mc::errc::superseded));
    CHECK(m.lookup("k")->replicas[0].client_id == "a");
    REQUIRE(m.add_replica("k", "c", 16, 500, mc::master::publish_kind::republish));
    CHECK(m.lookup("k")->replicas[0].client_id == "c");
    CHECK(m.lookup("k")->size == 16);
    CHECK(m.take_notices("a", 10).drops.at(0).version == 108);
  }

  TEST_CASE("acknowledged drop notices: a reply that was lost is sent again until the holder acknowledges it") {
    // The lost-notice mechanism of a "resurrected" read: a drop notice went
    // out in a heartbeat reply that never arrived; the holder kept its old
    // copy and re-published it to the next leader after a failover.
    using mc::master::notice_ack;
    metadata m;
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.register_client(client("b")));
    REQUIRE(m.add_replica("k1", "a", 8, 10));
    REQUIRE(m.add_replica("k1", "b", 8, 11));  // a's k1@10 superseded: a drop for a
    auto first = m.take_notices("a", 10, 0, notice_ack{});
    REQUIRE(first.drops.size() == 1);
    CHECK(first.drops[0].key == "k1");
    CHECK(first.drops[0].version == 10);
    CHECK(first.notice_epoch != 0);
    CHECK(first.notice_id != 0);
    // A newer drop queues behind the unacknowledged reply.
    REQUIRE(m.add_replica("k2", "a", 8, 20));
    REQUIRE(m.add_replica("k2", "b", 8, 21));
    // The reply was lost: the next heartbeat acknowledges nothing (or an
    // older reply, or names another epoch) and gets the same notices again.
    for (auto ack : {notice_ack{}, notice_ack{first.notice_epoch, first.notice_id - 1},
                     notice_ack{first.notice_epoch + 1, first.notice_id}}) {
      auto again = m.take_notices("a", 10, 0, ack);
      REQUIRE(again.drops.size() == 1);
      CHECK(again.drops[0].key == "k1");
      CHECK(again.notice_epoch == first.notice_epoch);
      CHECK(again.notice_id == first.notice_id);
    }
    CHECK(m.ordering().notices_resent == 3);
    // Acknowledged: the next notices go out under a new id.
    auto second = m.take_notices("a", 10, 0, notice_ack{first.notice_epoch, first.notice_id});
    REQUIRE(second.drops.size() == 1);
    CHECK(second.drops[0].key == "k2");
    CHECK(second.notice_id > first.notice_id);
    auto none = m.take_notices("a", 10, 0, notice_ack{second.notice_epoch, second.notice_id});
    CHECK(none.drops.empty());
    CHECK_FALSE(none.resync);
    CHECK(none.notice_id == 0);
    // An acknowledgement of a reply already acknowledged changes nothing.
    CHECK(m.take_notices("a", 10, 0, notice_ack{second.notice_epoch, second.notice_id}).drops.empty());
    // A resync request is acknowledged the same way.
    mc::master::metadata_options o;
    o.max_pending_drops = 2;
    metadata small(o);
    REQUIRE(small.register_client(client("a")));
    REQUIRE(small.register_client(client("b")));
    for (int i = 0; i < 3; ++i) {
      auto key = mc::test::numbered("o", static_cast<std::uint64_t>(i));
      REQUIRE(small.add_replica(key, "a", 8, 1));
      REQUIRE(small.add_replica(key, "b", 8, 2));
    }
    auto r1 = small.take_notices("a", 10, 0, notice_ack{});
    CHECK(r1.resync);
    CHECK(r1.drops.empty());
    REQUIRE(r1.notice_id != 0);
    CHECK(small.take_notices("a", 10, 0, notice_ack{}).resync);  // lost: asked again
    CHECK_FALSE(small.take_notices("a", 10, 0, notice_ack{r1.notice_epoch, r1.notice_id}).resync);
    // A client registered anew (after unregistering) has another epoch: an
    // acknowledgement meant for its earlier entry does not match.
    REQUIRE(m.unregister_client("a"));
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.add_replica("k3", "a", 8, 30));
    REQUIRE(m.add_replica("k3", "b", 8, 31));
    auto fresh = m.take_notices("a", 10, 0, notice_ack{});
    REQUIRE(fresh.drops.size() == 1);
    CHECK(fresh.notice_epoch != first.notice_epoch);
    CHECK(m.take_notices("a", 10, 0, notice_ack{first.notice_epoch, fresh.notice_id}).drops.size() == 1);
    // Without an acknowledgement argument, notices are handed out once.
    CHECK(m.take_notices("b", 10).drops.empty());
  }

  TEST_CASE("across holders a key's puts are ordered by version: a late publish never replaces a newer value") {
    // The soak's timed-out write: a put (version 200) was committed by its
    // owner b, whose publish arrived only after the requester had given up
    // and a later put (version 300) had been published by a.
    metadata m;
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.register_client(client("b")));
    REQUIRE(m.register_client(client("c")));
    REQUIRE(m.add_replica("k", "a", 64, 300));
    CHECK(mc::is(m.add_replica("k", "b", 32, 200).error(), mc::errc::superseded));
    auto info = m.lookup("k");
    REQUIRE(info);
    REQUIRE(info->replicas.size() == 1);
    CHECK(info->replicas[0].client_id == "a");
    CHECK(info->size == 64);
    CHECK(m.take_notices("a", 10).drops.empty());
    CHECK(m.ordering().stale_publishes == 1);
    CHECK(m.replica_count() == 1);
    // Also when the newer value's holder was itself superseded since: c's
    // put (400) is live, a's 300 superseded, and b's 200 still loses.
    REQUIRE(m.add_replica("k", "c", 8, 400));
    CHECK(mc::is(m.add_replica("k", "b", 32, 350).error(), mc::errc::superseded));
    CHECK(m.lookup("k")->replicas.at(0).client_id == "c");
    // Equal versions on two holders (one put written twice, e.g. retried at
    // another owner): the later publish wins, nothing is refused.
    REQUIRE(m.add_replica("k", "b", 8, 400));
    CHECK(m.lookup("k")->replicas.at(0).client_id == "b");
    // A newer put anywhere wins.
    REQUIRE(m.add_replica("k", "a", 4, 401));
    CHECK(m.lookup("k")->replicas.at(0).client_id == "a");
    CHECK(m.lookup("k")->size == 4);
  }

  TEST_CASE("a holder's drop queue is bounded: overflow asks for a resync") {
    mc::master::metadata_options o;
    o.max_pending_drops = 4;
    metadata m(o);
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.register_client(client("b")));
    for (int i = 0; i < 10; ++i) {
      REQUIRE(m.add_replica(mc::test::numbered("k", static_cast<std::uint64_t>(i)), "a", 1, 1));
      REQUIRE(m.add_replica(mc::test::numbered("k", static_cast<std::uint64_t>(i)), "b", 1, 1));
    }
    auto n = m.take_notices("a", 100);
    CHECK(n.resync);
    CHECK(n.drops.size() <= 4);
    CHECK(m.ordering().notice_overflows >= 1);
    CHECK_FALSE(m.take_notices("a", 100).resync);
  }

  TEST_CASE("a full republish replaces the holder's set: entries of older epochs are removed") {
    metadata m;
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.register_client(client("b")));
    using mc::master::publish_kind;
    REQUIRE(m.add_replica("keep", "a", 1, 1, publish_kind::put, 10));
    REQUIRE(m.add_replica("gone", "a", 1, 1, publish_kind::put, 10));  // evicted, notice lost
    REQUIRE(m.add_replica("old", "a", 1, 1, publish_kind::put, 10));
    REQUIRE(m.add_replica("old", "b", 1, 1, publish_kind::put, 10));  // a's copy superseded
    REQUIRE(m.add_replica("b-only", "b", 1, 1, publish_kind::put, 10));
    // a re-publishes what it holds with epoch 20: keep (same version) and old (superseded: refused).
    CHECK(m.add_replica("keep", "a", 1, 1, publish_kind::republish, 20));
    CHECK(mc::is(m.add_replica("old", "a", 1, 1, publish_kind::republish, 20).error(), mc::errc::invalid_version));
    // A put that raced with the republish, tagged with the new epoch, survives.
    REQUIRE(m.add_replica("new", "a", 1, 2, publish_kind::put, 20));
    auto removed = m.finish_republish("a", 20);
    REQUIRE(removed);
    CHECK(*removed == 2);  // "gone" and a's superseded entry of "old"
    CHECK(m.exists("keep"));
    CHECK(m.exists("new"));
    CHECK_FALSE(m.exists("gone"));
    CHECK(m.lookup("old")->replicas.at(0).client_id == "b");
    CHECK(m.exists("b-only"));  // other holders untouched
    CHECK(m.clients()[0].keys == 2);
    CHECK(mc::is(m.finish_republish("ghost", 1).error(), mc::errc::client_not_found));
  }

  TEST_CASE("a client that leaves takes every entry with it, whatever epoch it was published with") {
    // Found by the master_model fuzz target: entries of epoch UINT64_MAX
    // survived unregister_client (and a sweep), so a re-registered client
    // had live routes its key count did not know about.
    metadata m;
    REQUIRE(m.register_client(client("a")));
    using mc::master::publish_kind;
    REQUIRE(m.add_replica("top", "a", 1, 1, publish_kind::republish, UINT64_MAX));
    REQUIRE(m.add_replica("low", "a", 1, 1, publish_kind::put, 3));
    CHECK(*m.finish_republish("a", UINT64_MAX) == 1);  // "low" only: "top" is not older
    CHECK(m.exists("top"));
    REQUIRE(m.unregister_client("a"));
    CHECK_FALSE(m.exists("top"));
    CHECK(m.key_count() == 0);
    CHECK(m.replica_count() == 0);
    REQUIRE(m.register_client(client("a")));
    CHECK(m.clients()[0].keys == 0);
    CHECK(m.key_count() == 0);
  }

  TEST_CASE("interned holders: a new client never sees or owns a gone client's entries") {
    metadata m;
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.add_replica("k", "a", 1, 50));
    REQUIRE(m.add_replica("shared", "a", 1, 50));
    REQUIRE(m.unregister_client("a"));
    // b may be given a's freed slot: none of a's entries may come back as b's.
    REQUIRE(m.register_client(client("b")));
    CHECK_FALSE(m.exists("k"));
    CHECK(m.key_count() == 0);
    CHECK(m.replica_count() == 0);
    CHECK(m.clients()[0].keys == 0);
    CHECK(mc::is(m.remove_replica("k", "b", 100).error(), mc::errc::object_not_found));
    CHECK(mc::is(m.remove_replica("k", "a", 100).error(), mc::errc::object_not_found));
    // b's first publish of a key a held at a higher version is not stale.
    REQUIRE(m.add_replica("shared", "b", 2, 1));
    auto info = m.lookup("shared");
    REQUIRE(info);
    REQUIRE(info->replicas.size() == 1);
    CHECK(info->replicas[0].client_id == "b");
    CHECK(info->replicas[0].rpc_endpoint == "b:12345");
    CHECK(m.take_notices("b", 10).drops.empty());
    // a comes back: it owns nothing, b keeps its key; a's put supersedes b.
    REQUIRE(m.register_client(client("a")));
    CHECK(m.lookup("shared")->replicas.at(0).client_id == "b");
    REQUIRE(m.add_replica("shared", "a", 3, 1));
    CHECK(m.lookup("shared")->replicas.at(0).client_id == "a");
    CHECK(m.take_notices("b", 10).drops.size() == 1);
    CHECK(m.take_notices("a", 10).drops.empty());
    // Many cycles of leave / join with fresh ids: each sees only its own keys.
    for (std::uint64_t i = 0; i < 200; ++i) {
      auto id = mc::test::numbered("c", i);
      REQUIRE(m.register_client(client(id)));
      REQUIRE(m.add_replica(mc::test::numbered("own", i), id, 1, i + 1));
      auto got = m.lookup(mc::test::numbered("own", i));
      REQUIRE(got);
      CHECK(got->replicas.at(0).client_id == id);
      if (i > 0) CHECK_FALSE(m.exists(mc::test::numbered("own", i - 1)));
      REQUIRE(m.unregister_client(id));
    }
    CHECK(m.key_count() == 1);  // "shared", held by a
  }

  TEST_CASE("a dropped (swept) client's slot is not inherited either") {
    mc::master::metadata_options o;
    o.route_ttl = 20ms;
    o.drop_ttl = 40ms;
    metadata m(o);
    REQUIRE(m.register_client(client("old")));
    REQUIRE(m.add_replica("k", "old", 1, 9));
    std::this_thread::sleep_for(60ms);
    CHECK(m.sweep() == std::vector<std::string>{"old"});
    REQUIRE(m.register_client(client("new")));
    CHECK_FALSE(m.exists("k"));
    CHECK(m.replica_count() == 0);
    REQUIRE(m.add_replica("k", "new", 1, 1));
    CHECK(m.lookup("k")->replicas.at(0).client_id == "new");
  }

  TEST_CASE("a key with several holders keeps each holder's version and order") {
    metadata m;
    for (auto id : {"a", "b", "c", "d"}) REQUIRE(m.register_client(client(id)));
    REQUIRE(m.add_replica("k", "a", 1, 10));
    REQUIRE(m.add_replica("k", "b", 2, 20));
    REQUIRE(m.add_replica("k", "c", 3, 30));
    REQUIRE(m.add_replica("k", "d", 4, 40));
    CHECK(m.ordering().superseded == 3);
    CHECK(m.replica_count() == 1);
    CHECK(m.lookup("k")->replicas.at(0).client_id == "d");
    CHECK(m.lookup("k")->size == 4);
    // Each superseded holder still has its own version.
    CHECK(mc::is(m.add_replica("k", "b", 2, 20).error(), mc::errc::invalid_version));
    CHECK(mc::is(m.add_replica("k", "c", 3, 29).error(), mc::errc::invalid_version));
    CHECK(mc::is(m.remove_replica("k", "a", 9).error(), mc::errc::invalid_version));
    // The first holder leaves: the others stay, in order.
    REQUIRE(m.remove_replica("k", "a", 10));
    // b re-puts a newer copy: it is live again, d superseded.
    CHECK(mc::is(m.add_replica("k", "b", 5, 21).error(), mc::errc::superseded));  // older than d's
    REQUIRE(m.add_replica("k", "b", 5, 41));
    CHECK(m.lookup("k")->replicas.at(0).client_id == "b");
    CHECK(m.lookup("k")->size == 5);
    CHECK(m.clients()[1].keys == 1);  // b
    CHECK(m.clients()[3].keys == 0);  // d
    auto keys = m.keys("k", 10);
    REQUIRE(keys.size() == 1);
    CHECK(keys[0].second.replicas.at(0).client_id == "b");
    // c leaves: only its entry goes.
    REQUIRE(m.unregister_client("c"));
    auto r = m.remove_key("k");
    REQUIRE(r);
    REQUIRE(r->size() == 2);
    CHECK(r->at(0).client_id == "b");
    CHECK(r->at(1).client_id == "d");
    CHECK(m.clients()[1].keys == 0);
    CHECK_FALSE(m.exists("k"));
  }

  TEST_CASE("many keys: lookups, removals and paged remove_matching over a large table") {
    mc::master::metadata_options o;
    o.shards = 8;
    // Nobody heartbeats here: TTLs past the test's length (under ASan on a
    // loaded host it ran longer than the default 10 s route TTL, and the
    // silent clients' keys stopped being served midway).
    o.route_ttl = std::chrono::hours(1);
    o.drop_ttl = std::chrono::hours(2);
    metadata m(o);
    constexpr std::uint64_t clients = 7, keys = 100'000;
    for (std::uint64_t c = 0; c < clients; ++c) REQUIRE(m.register_client(client(mc::test::numbered("c", c))));
    for (std::uint64_t i = 0; i < keys; ++i)
      REQUIRE(m.add_replica(mc::test::numbered("key/", i), mc::test::numbered("c", i % clients), i, 1));
    CHECK(m.key_count() == keys);
    std::uint64_t wrong = 0;
    for (std::uint64_t i = 0; i < keys; ++i) {
      auto r = m.lookup(mc::test::numbered("key/", i));
      if (!r || r->size != i || r->replicas.size() != 1 ||
          r->replicas[0].client_id != mc::test::numbered("c", i % clients))
        ++wrong;
    }
    CHECK(wrong == 0);
    // Remove every third key (holes and moved entries in the tables).
    for (std::uint64_t i = 0; i < keys; i += 3)
      REQUIRE(m.remove_replica(mc::test::numbered("key/", i), mc::test::numbered("c", i % clients), 1));
    for (std::uint64_t i = 0; i < keys; ++i)
      if (m.exists(mc::test::numbered("key/", i)) != (i % 3 != 0)) ++wrong;
    CHECK(wrong == 0);
    const std::uint64_t left = keys - (keys + 2) / 3;
    CHECK(m.key_count() == left);
    std::uint64_t per_client = 0;
    for (auto& c : m.clients()) per_client += c.keys;
    CHECK(per_client == left);
    // Paged removal of the keys ending in 7: every one, exactly once.
    std::set<std::string> removed;
    std::size_t shard = 0;
    for (int calls = 0; shard < m.shard_count() && calls < 10'000; ++calls) {
      auto page = m.remove_matching("7$", false, 1000, shard);
      REQUIRE(page);
      for (auto& k : page->removed) {
        CHECK(removed.insert(k.key).second);
        CHECK(k.holders.size() == 1);
      }
      shard = page->next_shard;
    }
    std::uint64_t sevens = 0;
    for (std::uint64_t i = 0; i < keys; ++i)
      if (i % 3 != 0 && i % 10 == 7) ++sevens;
    CHECK(removed.size() == sevens);
    CHECK(m.key_count() == left - sevens);
    // One client leaves: exactly its keys go.
    REQUIRE(m.unregister_client("c3"));
    for (std::uint64_t i = 0; i < keys; ++i)
      if (m.exists(mc::test::numbered("key/", i)) != (i % 3 != 0 && i % 10 != 7 && i % clients != 3)) ++wrong;
    CHECK(wrong == 0);
    auto all = m.remove_matching("", true, 1'000'000, 0);
    REQUIRE(all);
    shard = all->next_shard;
    while (shard < m.shard_count()) shard = m.remove_matching("", true, 1'000'000, shard)->next_shard;
    CHECK(m.key_count() == 0);
    for (auto& c : m.clients()) CHECK(c.keys == 0);
  }

  TEST_CASE("publishes racing departures and re-registrations never cross clients") {
    metadata m;
    REQUIRE(m.register_client(client("stay")));
    std::atomic<bool> stop{false};
    std::thread churn([&] {
      for (std::uint64_t i = 0; !stop.load(); ++i) {
        auto id = mc::test::numbered("x", i % 4);
        (void)m.register_client(client(id));
        (void)m.unregister_client(id);
      }
    });
    std::vector<std::thread> pubs;
    for (std::uint64_t t = 0; t < 2; ++t)
      pubs.emplace_back([&, t] {
        for (std::uint64_t i = 0; i < 20'000; ++i) {
          auto id = mc::test::numbered("x", (i + t) % 4);
          auto key = mc::test::numbered("r", i % 500);
          (void)m.add_replica(key, id, 1, i + 1);
          (void)m.add_replica(key, "stay", 1, i + 1);
          (void)m.remove_replica(key, id, i + 1);
          if (auto r = m.lookup(key))
            for (auto& rep : r->replicas) CHECK(rep.rpc_endpoint == rep.client_id + ":12345");
        }
      });
    for (auto& p : pubs) p.join();
    stop = true;
    churn.join();
    for (std::uint64_t i = 0; i < 4; ++i) (void)m.unregister_client(mc::test::numbered("x", i));
    // Only "stay" is left registered; any entry of an x client left by a race
    // is not routable.
    for (auto& [k, ki] : m.keys("", 1000))
      for (auto& rep : ki.replicas) CHECK(rep.client_id == "stay");
  }
}

TEST_SUITE("master http endpoint") {
  TEST_CASE("registration refuses a malformed http endpoint and keeps a valid one") {
    metadata m;
    auto c = client("a");
    for (const char* bad : {"nohost", ":9080", "h:", "h:0", "h:65536", "h:80x", "::1:9080", "[]:1", "h:1 ", "a\"b:1",
                            "a\\b:1", "[1.2.3.4]:1", "[::1:1", "h:1\n", "a/b:1"}) {
      c.http_endpoint = bad;
      CHECK_MESSAGE(mc::is(m.register_client(c).error(), mc::errc::invalid_params), bad);
    }
    c.http_endpoint = std::string(300, 'h') + ":1";
    CHECK(mc::is(m.register_client(c).error(), mc::errc::invalid_params));
    c.http_endpoint = "[::1]:9080";
    REQUIRE(m.register_client(c).has_value());
    CHECK(m.clients()[0].info.http_endpoint == "[::1]:9080");
    c.http_endpoint = "";  // no HTTP server
    CHECK(m.register_client(c).has_value());
  }

  TEST_CASE("a node registers its advertised host with its HTTP port unless it binds one host") {
    using mc::master::http_endpoint_of;
    CHECK(http_endpoint_of("10.0.0.5:12345", "0.0.0.0", 9080) == "10.0.0.5:9080");
    CHECK(http_endpoint_of("[fd00::5]:12345", "::", 9081) == "[fd00::5]:9081");
    CHECK(http_endpoint_of("10.0.0.5:12345", "127.0.0.1", 9080) == "127.0.0.1:9080");
    CHECK(http_endpoint_of("10.0.0.5:12345", "fd00::7", 9080) == "[fd00::7]:9080");
    CHECK(mc::master::valid_http_endpoint(http_endpoint_of("node-1.example:12345", "", 1)));
    CHECK(http_endpoint_of("10.0.0.5:12345", "[fd00::7]", 9080) == "[fd00::7]:9080");  // no double brackets
    CHECK(http_endpoint_of({}, "node-1", 9080) == "node-1:9080");                      // the master's own
    CHECK(http_endpoint_of("not an endpoint", "", 9080).empty());                      // nothing rather than junk
    CHECK(http_endpoint_of("10.0.0.5:12345", "a b", 9080).empty());
    CHECK(http_endpoint_of("10.0.0.5:12345", "", 0).empty());
  }
}
