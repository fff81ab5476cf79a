// The master's side of replicated values: copies of one put (one group) join
// instead of superseding each other, surplus copies are refused (trimmed),
// a put of another group supersedes them all, and a key that lost a holder
// is repaired: a surviving holder is asked to copy it to a new node.
#include "clients.hpp"
#include "mc/master/metadata.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <set>
#include <thread>

using namespace std::chrono_literals;
using mc::master::metadata;
using mc::master::publish_kind;
using mc::master::replication;
using mc::test::numbered;

using mc::test::client;

namespace {
std::uint64_t tag(std::uint64_t group, std::uint32_t copies) { return replication{group, copies}.tag(); }
std::set<std::string> holders(const metadata& m, const std::string& key) {
  std::set<std::string> out;
  if (auto r = m.lookup(key))
    for (auto& rep : r->replicas) out.insert(rep.client_id);
  return out;
}
}  // namespace

TEST_SUITE("master replication") {
  TEST_CASE("the replication tag round-trips and refuses nonsense from peers") {
    CHECK(tag(0, 3) == 0);  // no group: a single copy
    CHECK(tag(5, 1) == 0);
    auto r = replication::of(tag(0xABCDEF, 3));
    CHECK(r.group == 0xABCDEF);
    CHECK(r.copies == 3);
    CHECK(replication::of(0).copies == 1);
    CHECK(replication::of((7ull << 8) | 0xff).copies == replication::max_copies);  // clamped
    CHECK(replication::of((7ull << 8) | 1).group == 0);                            // one copy: not replicated
    CHECK(replication::of(0x42).group == 0);                                       // no group
  }

  TEST_CASE("copies of one group join, surplus copies are trimmed, another group supersedes") {
    metadata m;
    for (auto id : {"a", "b", "c", "d"}) REQUIRE(m.register_client(client(id)));
    const auto g = tag(77, 2);
    REQUIRE(m.add_replica("k", "a", 10, 100, publish_kind::put, 0, g));
    REQUIRE(m.add_replica("k", "b", 10, 900, publish_kind::put, 0, g));  // copies need not share a version
    CHECK(holders(m, "k") == std::set<std::string>{"a", "b"});
    CHECK(m.replica_count() == 2);
    CHECK(m.key_count() == 1);
    CHECK(m.add_replica("k", "b", 10, 900, publish_kind::put, 0, g));  // idempotent
    // A third copy of a 2-copy group is surplus: refused, nothing else changes.
    CHECK(mc::is(m.add_replica("k", "c", 10, 50, publish_kind::put, 0, g).error(), mc::errc::invalid_version));
    CHECK(mc::is(m.add_replica("k", "c", 10, 60, publish_kind::republish, 0, g).error(), mc::errc::invalid_version));
    CHECK(m.repairs().trimmed == 2);
    CHECK(holders(m, "k") == std::set<std::string>{"a", "b"});
    // A re-publish of a copy of the live group joins while there is room.
    REQUIRE(m.remove_replica("k", "b", 900));
    CHECK(m.add_replica("k", "c", 10, 70, publish_kind::republish, 0, g));
    CHECK(holders(m, "k") == std::set<std::string>{"a", "c"});
    // A newer put of another group (or a single copy) supersedes every copy;
    // an older one is refused.
    const auto g2 = tag(78, 2);
    CHECK(mc::is(m.add_replica("k", "d", 20, 5, publish_kind::put, 0, g2).error(), mc::errc::superseded));
    REQUIRE(m.add_replica("k", "d", 20, 1000, publish_kind::put, 0, g2));
    CHECK(holders(m, "k") == std::set<std::string>{"d"});
    CHECK(m.lookup("k")->size == 20);
    CHECK(m.take_notices("a", 10).drops.size() == 1);
    CHECK(m.take_notices("c", 10).drops.size() == 1);
    // The old group's copies cannot come back as copies of the new one.
    CHECK(mc::is(m.add_replica("k", "a", 10, 100, publish_kind::put, 0, g).error(), mc::errc::invalid_version));
    REQUIRE(m.add_replica("k", "b", 20, 901, publish_kind::put, 0, g2));
    CHECK(holders(m, "k") == std::set<std::string>{"b", "d"});
    CHECK(m.replica_count() == 2);
    REQUIRE(m.add_replica("k", "c", 30, 1001));  // single copy: supersedes both
    CHECK(holders(m, "k") == std::set<std::string>{"c"});
    // The counters follow every change (they are not recounted).
    CHECK(m.replica_count() == 1);
    CHECK(m.key_count() == 1);
    REQUIRE(m.add_replica("j", "a", 5, 1000, publish_kind::put, 0, g));
    REQUIRE(m.add_replica("j", "b", 5, 1000, publish_kind::put, 0, g));
    CHECK(m.replica_count() == 3);
    CHECK(m.key_count() == 2);
    REQUIRE(m.unregister_client("a"));
    CHECK(m.replica_count() == 2);
    REQUIRE(m.remove_key("j"));
    CHECK(m.replica_count() == 1);
    CHECK(m.key_count() == 1);
    REQUIRE(m.remove_matching("", true, 10));
    CHECK(m.replica_count() == 0);
    CHECK(m.key_count() == 0);
  }

  TEST_CASE("a dropped holder's replicated keys are repaired to another node") {
    mc::master::metadata_options o;
    o.repair_timeout = 200ms;
    metadata m(o);
    for (auto id : {"a", "b", "c", "d"}) REQUIRE(m.register_client(client(id, 1000 + (id[0] == 'c' ? 500 : 0))));
    const auto g = tag(9, 2);
    for (int i = 0; i < 5; ++i) {
      auto key = numbered("r", i);
      REQUIRE(m.add_replica(key, "a", 10, 100 + i, publish_kind::put, 0, g));
      REQUIRE(m.add_replica(key, "b", 10, 200 + i, publish_kind::put, 0, g));
    }
    REQUIRE(m.add_replica("single", "a", 10, 1));  // not replicated: never repaired
    CHECK(m.schedule_repairs() == 0);
    CHECK(m.repairs().under_replicated == 0);
    REQUIRE(m.unregister_client("a"));
    CHECK(m.repairs().queued == 5);
    CHECK(m.schedule_repairs() == 5);
    auto st = m.repairs();
    CHECK(st.in_flight == 5);
    CHECK(st.scheduled == 5);
    // b, the survivor, is asked; the target is c (most free space) and
    // never a node that already has an entry of the key.
    auto n = m.take_notices("b", 0, 64);
    REQUIRE(n.repairs.size() == 5);
    for (auto& t : n.repairs) {
      CHECK(t.target.client_id == "c");
      CHECK(t.replication == g);
      CHECK(t.version >= 200);
    }
    CHECK(m.take_notices("b", 0, 64).repairs.empty());  // handed out once
    // c publishes three copies: those are complete; the others time out
    // and are planned again.
    for (int i = 0; i < 3; ++i) REQUIRE(m.add_replica(n.repairs[i].key, "c", 10, 7, publish_kind::put, 0, g));
    CHECK(m.repairs().completed == 3);
    for (int i = 0; i < 3; ++i) CHECK(holders(m, n.repairs[i].key) == std::set<std::string>{"b", "c"});
    std::this_thread::sleep_for(300ms);
    CHECK(m.schedule_repairs() == 2);
    CHECK(m.repairs().timed_out == 2);
    CHECK(m.take_notices("b", 0, 64).repairs.size() == 2);
    // The background scan finds an under-replicated key nobody queued (a
    // put that committed one copy of two).
    REQUIRE(m.add_replica("partial", "d", 10, 1, publish_kind::put, 0, g));
    for (std::size_t i = 0; i < m.shard_count(); ++i) (void)m.schedule_repairs();
    CHECK(m.repairs().under_replicated >= 1);
    auto d = m.take_notices("d", 0, 64);
    REQUIRE(d.repairs.size() == 1);
    CHECK(d.repairs[0].key == "partial");
    CHECK(d.repairs[0].target.client_id != "d");
  }

  TEST_CASE("no repair without a target with room, and none past the concurrency cap") {
    mc::master::metadata_options o;
    o.max_concurrent_repairs = 2;
    metadata m(o);
    for (auto id : {"a", "b"}) REQUIRE(m.register_client(client(id)));
    REQUIRE(m.register_client(client("full", 1000, 1000)));
    const auto g = tag(3, 2);
    for (int i = 0; i < 4; ++i) {
      auto key = numbered("k", i);
      REQUIRE(m.add_replica(key, "a", 10, 1, publish_kind::put, 0, g));
      REQUIRE(m.add_replica(key, "b", 10, 1, publish_kind::put, 0, g));
    }
    REQUIRE(m.unregister_client("a"));
    CHECK(m.schedule_repairs() == 0);  // "full" has no room, b holds them already
    CHECK(m.repairs().no_target == 4);
    REQUIRE(m.register_client(client("c")));
    for (std::size_t i = 0; i < m.shard_count(); ++i) (void)m.schedule_repairs();  // the scan finds them again
    CHECK(m.repairs().in_flight == 2);
    CHECK(m.take_notices("b", 0, 64).repairs.size() == 2);
  }

  TEST_CASE("write_routes: distinct healthy nodes with room, most free first, exclusions honoured") {
    metadata m;
    REQUIRE(m.register_client(client("a", 1000)));
    REQUIRE(m.register_client(client("b", 3000)));
    REQUIRE(m.register_client(client("c", 2000)));
    REQUIRE(m.register_client(client("tiny", 10)));
    auto r = m.write_routes(100, 3, {});
    REQUIRE(r);
    REQUIRE(r->size() == 3);
    CHECK((*r)[0].client_id == "b");
    CHECK((*r)[1].client_id == "c");
    CHECK((*r)[2].client_id == "a");
    r = m.write_routes(100, 5, {"b"});
    REQUIRE(r);
    CHECK(r->size() == 2);  // fewer qualify
    CHECK(mc::is(m.write_routes(5000, 2, {}).error(), mc::errc::no_available_handle));
  }
}
