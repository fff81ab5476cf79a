// Dropping holders' entries without a pass over the table per holder:
// finish_republish skips its pass when nothing is older than its epoch (and
// still drops what is), a sweep makes one pass for every client it drops, an
// unregister of a client without entries makes none, and reset() forgets
// everything at once while reclaim() frees the old keys in bounded chunks.
#include "clients.hpp"
#include "mc/master/metadata.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using mc::master::metadata;
using mc::master::publish_kind;

using mc::test::client;

namespace {

std::string key(int i) { return "key/" + std::to_string(i); }

}  // namespace

TEST_SUITE("master_holders") {
  TEST_CASE("finish_republish skips its pass only when no entry is older than its epoch") {
    metadata m;
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.register_client(client("b")));
    // A new master's view after a failover: every entry re-published at 7.
    for (int i = 0; i < 50; ++i) REQUIRE(m.add_replica(key(i), "a", 8, 1, publish_kind::republish, 7));
    REQUIRE(m.add_replica("b-key", "b", 8, 1, publish_kind::put, 3));
    const auto t0 = m.table();
    CHECK(m.finish_republish("a", 7).value() == 0);
    CHECK(m.table().scans == t0.scans);
    CHECK(m.table().scans_skipped == t0.scans_skipped + 1);
    CHECK(m.key_count() == 51);

    // A publish with an older epoch (a put that started before the
    // re-publish) lowers the bound: the next finish drops it.
    REQUIRE(m.add_replica("late", "a", 8, 1, publish_kind::put, 5));
    CHECK(m.finish_republish("a", 7).value() == 1);
    CHECK(m.table().scans == t0.scans + 1);
    CHECK(mc::is(m.lookup("late").error(), mc::errc::object_not_found));
    CHECK(m.lookup(key(3)).has_value());
    CHECK(m.lookup("b-key").has_value());  // another holder's entry is not touched

    // That pass raised the bound again: nothing older than 7 is left.
    CHECK(m.finish_republish("a", 7).value() == 0);
    CHECK(m.table().scans == t0.scans + 1);
    // A newer epoch has older entries to drop: a pass, and they go.
    CHECK(m.finish_republish("a", 8).value() == 50);
    CHECK(m.table().scans == t0.scans + 2);
    CHECK(m.key_count() == 1);
    // An idempotent re-publish raises the entry's epoch, never lowers the bound.
    REQUIRE(m.add_replica("again", "a", 8, 1, publish_kind::put, 9));
    REQUIRE(m.add_replica("again", "a", 8, 1, publish_kind::republish, 10));
    CHECK(m.finish_republish("a", 10).value() == 0);  // the bound (8) is below 10: a pass that finds nothing
    CHECK(m.table().scans == t0.scans + 3);
    CHECK(m.finish_republish("a", 10).value() == 0);  // now skipped
    CHECK(m.table().scans == t0.scans + 3);
    CHECK(m.lookup("again").has_value());
  }

  TEST_CASE("a client that registers again after leaving starts with no bound from its old entries") {
    metadata m;
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.add_replica("old", "a", 8, 1, publish_kind::put, 2));
    REQUIRE(m.unregister_client("a"));
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.add_replica("new", "a", 8, 2, publish_kind::republish, 9));
    const auto t0 = m.table();
    CHECK(m.finish_republish("a", 9).value() == 0);
    CHECK(m.table().scans == t0.scans);
    CHECK(m.lookup("new").has_value());
    CHECK(mc::is(m.lookup("old").error(), mc::errc::object_not_found));
  }

  TEST_CASE("a sweep drops every silent client in one pass; an unregister without entries makes none") {
    // Wall-clock TTLs: a, b and c are silent for longer than drop_ttl by
    // construction (the wait below); "live" speaks every 5 ms and once more
    // right before the sweep, so only a stall of over 150 ms between that
    // heartbeat and the sweep could drop it (a loaded CI host stalled the
    // 5 ms loop past the 30 ms this test used before).
    mc::master::metadata_options o;
    o.route_ttl = 50ms;
    o.drop_ttl = 150ms;
    metadata m(o);
    for (const char* id : {"a", "b", "c", "live"}) REQUIRE(m.register_client(client(id)));
    for (int i = 0; i < 30; ++i) REQUIRE(m.add_replica(key(i), i % 3 == 0 ? "a" : i % 3 == 1 ? "b" : "c", 8, 1));
    REQUIRE(m.add_replica("shared", "a", 8, 1));
    REQUIRE(m.add_replica("shared", "live", 8, 2));  // supersedes a's copy
    REQUIRE(m.add_replica("live-key", "live", 8, 1));
    const auto t0 = m.table();
    auto until = std::chrono::steady_clock::now() + 200ms;
    while (std::chrono::steady_clock::now() < until) {
      REQUIRE(m.heartbeat("live", 0, 1000));
      std::this_thread::sleep_for(5ms);
    }
    REQUIRE(m.heartbeat("live", 0, 1000));
    auto dropped = m.sweep();
    std::sort(dropped.begin(), dropped.end());
    REQUIRE(dropped == std::vector<std::string>{"a", "b", "c"});
    CHECK(m.table().scans == t0.scans + 1);
    CHECK(m.key_count() == 2);
    CHECK(m.replica_count() == 2);
    for (int i = 0; i < 30; ++i) CHECK(mc::is(m.lookup(key(i)).error(), mc::errc::object_not_found));
    auto shared = m.lookup("shared");
    REQUIRE(shared.has_value());
    CHECK(shared->replicas.at(0).client_id == "live");
    // Swept keys are orphans: a remove while their holder is away still
    // refuses its re-publish when it comes back.
    CHECK(mc::is(m.remove_key(key(0)).error(), mc::errc::object_not_found));
    REQUIRE(m.register_client(client("a")));
    CHECK(mc::is(m.add_replica(key(0), "a", 8, 1, publish_kind::republish).error(), mc::errc::superseded));
    CHECK(m.add_replica(key(3), "a", 8, 1, publish_kind::republish).has_value());

    // A client without entries leaves without a pass over the table.
    REQUIRE(m.register_client(client("reader")));
    const auto t1 = m.table();
    REQUIRE(m.unregister_client("reader"));
    CHECK(m.table().scans == t1.scans);
    CHECK(m.table().scans_skipped == t1.scans_skipped + 1);
    // One with entries makes one, and its entries go.
    REQUIRE(m.unregister_client("live"));
    CHECK(m.table().scans == t1.scans + 1);
    CHECK(mc::is(m.lookup("live-key").error(), mc::errc::object_not_found));
  }

  TEST_CASE("reset forgets every client and key at once; reclaim frees them in bounded chunks") {
    metadata m;
    constexpr int keys = 5000;
    for (const char* id : {"a", "b"}) REQUIRE(m.register_client(client(id)));
    for (int i = 0; i < keys; ++i) REQUIRE(m.add_replica(key(i), i % 2 ? "a" : "b", 8, 1, publish_kind::put, 4));
    REQUIRE(m.add_replica(key(0), "a", 8, 2, publish_kind::put, 4));  // b's copy superseded: 2 entries
    REQUIRE(m.remove_key(key(1)));                                    // remembered across the reset
    const auto t0 = m.table();
    m.reset();
    CHECK(m.table().scans == t0.scans);  // no pass over the table
    CHECK(m.table().retired_keys == keys - 1);
    CHECK(m.clients().empty());
    CHECK(mc::is(m.lookup(key(2)).error(), mc::errc::object_not_found));
    CHECK_FALSE(m.exists(key(0)));
    CHECK(mc::is(m.heartbeat("a", 0, 0).error(), mc::errc::client_not_found));

    // The clients come back (the next term) while the old keys are freed.
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.add_replica(key(2), "a", 8, 1, publish_kind::republish, 6));
    CHECK(mc::is(m.add_replica(key(1), "a", 8, 1, publish_kind::republish, 6).error(), mc::errc::superseded));
    std::size_t calls = 0, left = m.table().retired_keys;
    while (left) {
      const auto next = m.reclaim(1000);
      CHECK(next < left);
      CHECK(left - next <= 1000);
      left = next;
      ++calls;
    }
    CHECK(calls == (keys - 1 + 999) / 1000);
    CHECK(m.reclaim(1000) == 0);
    // Only the new term's entries count, and a's re-publish needs no pass:
    // its old entries left with the reset.
    CHECK(m.key_count() == 1);
    CHECK(m.replica_count() == 1);
    CHECK(m.lookup(key(2))->replicas.at(0).client_id == "a");
    const auto t1 = m.table();
    CHECK(m.finish_republish("a", 6).value() == 0);
    CHECK(m.table().scans == t1.scans);
    // b's slot was freed with its last old entry: b registers as new.
    REQUIRE(m.register_client(client("b")));
    REQUIRE(m.add_replica(key(5), "b", 8, 1, publish_kind::republish, 6));
    CHECK(m.finish_republish("b", 6).value() == 0);
    CHECK(m.table().scans == t1.scans);
    CHECK(m.key_count() == 2);
  }

  TEST_CASE("publishes racing finish_republish never leave an older entry behind a raised bound") {
    // Each finish raises the bound only when no publish overlapped its pass;
    // once the writer is done, one more finish must find every entry older
    // than its epoch, however the passes and publishes interleaved. Rounds:
    // the interleaving differs each time.
    metadata m;
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.register_client(client("b")));
    for (int i = 0; i < 2000; ++i) REQUIRE(m.add_replica(key(i), "b", 8, 1));
    m.reset();
    REQUIRE(m.register_client(client("a")));
    std::thread reclaimer([&] {
      while (m.reclaim(64)) std::this_thread::yield();
    });
    constexpr int writes = 2000;
    for (std::uint64_t round = 0; round < 12; ++round) {
      CAPTURE(round);
      const std::uint64_t older = 2 * round + 2, epoch = older + 1;
      std::atomic<bool> go{false}, written{false};
      std::thread writer([&] {
        while (!go.load()) std::this_thread::yield();
        for (int i = 0; i < writes; ++i) {
          auto k = "w/" + std::to_string(round) + "/" + std::to_string(i);
          REQUIRE(m.add_replica(k, "a", 8, 1, publish_kind::put, older));
        }
        written.store(true);
      });
      // Passes back to back while the writer runs: its publishes land during
      // them, some in shards a pass has already walked.
      std::uint64_t dropped = 0;
      go.store(true);
      while (!written.load()) dropped += m.finish_republish("a", epoch).value();
      writer.join();
      dropped += m.finish_republish("a", epoch).value();
      CHECK(dropped == writes);
      int left = 0;
      for (int i = 0; i < writes; ++i) left += m.exists("w/" + std::to_string(round) + "/" + std::to_string(i)) ? 1 : 0;
      CHECK(left == 0);
    }
    reclaimer.join();
    CHECK(m.key_count() == 0);
    CHECK(m.replica_count() == 0);
    CHECK(m.table().retired_keys == 0);
    // Later publishes at the epoch stay.
    REQUIRE(m.add_replica("kept", "a", 8, 1, publish_kind::put, 30));
    CHECK(m.finish_republish("a", 30).value() == 0);
    CHECK(m.lookup("kept").has_value());
  }
}
