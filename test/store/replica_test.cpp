// Replicated values end to end (put_options::replicas): copies on distinct
// nodes, reads from any node, fallback when a holder leaves, repair back to
// N copies, partial success, and overwrites of replicated keys.
#include "mc/master/metadata.hpp"
#include "mc/store/data_manager.hpp"
#include "store_fixture.hpp"

#include <chrono>
#include <set>
#include <thread>

using namespace std::chrono_literals;
using mc::test::bytes_of;
using mc::test::cluster;
using mc::test::get;
using mc::test::numbered;
using mc::test::random_bytes;
using mc::test::writable;

namespace {
/// Short TTLs: the master sweeps (and plans repairs) every 250 ms.
void quick_master(mc::master::master_options& o) {
  o.client_ttl = 1s;
  o.client_drop_ttl = 3s;
}

mc::task<mc::result<void>> put_n(mc::store::client& c, std::string key, const std::vector<std::uint8_t>& v,
                                 std::uint32_t copies, mc::store::placement where) {
  mc::store::put_options o;
  o.where = where;
  o.replicas = copies;
  co_return co_await c.put(std::move(key), bytes_of(v), std::move(o));
}
mc::task<std::vector<mc::result<void>>> batch_put_n(mc::store::client& c, std::vector<std::string> keys,
                                                    const std::vector<std::vector<std::uint8_t>>& vs,
                                                    std::uint32_t copies) {
  std::vector<std::span<const std::byte>> spans;
  for (auto& v : vs) spans.push_back(bytes_of(v));
  mc::store::put_options o;
  o.where = mc::store::placement::remote;
  o.replicas = copies;
  co_return co_await c.batch_put(std::move(keys), std::move(spans), std::move(o));
}
mc::task<mc::result<mc::store::object_info>> query(mc::store::client& c, std::string key) {
  co_return co_await c.query(std::move(key));
}

void check_value(cluster& cl, std::size_t i, const std::string& key, const std::vector<std::uint8_t>& v) {
  std::vector<std::uint8_t> out(v.size() + 9, 0xCD);
  auto r = cl.on(i, get(*cl.nodes[i].client, key, out));
  REQUIRE_MESSAGE(r.has_value(), key << " on node " << i << ": " << r.error().message());
  CHECK(*r == v.size());
  CHECK(mc::test::checksum(out.data(), v.size()) == mc::test::checksum(v.data(), v.size()));
  CHECK(out[v.size()] == 0xCD);
}

std::set<std::string> holders_of(cluster& cl, std::size_t asker, const std::string& key) {
  std::set<std::string> out;
  auto q = cl.on(asker, query(*cl.nodes[asker].client, key));
  if (q)
    for (auto& r : q->replicas) out.insert(r.client_id);
  return out;
}

std::size_t index_of(cluster& cl, const std::string& id) {
  for (std::size_t i = 0; i < cl.nodes.size(); ++i)
    if (cl.nodes[i].client->id() == id) return i;
  FAIL("no node " << id);
  return 0;
}
}  // namespace

TEST_SUITE("store replicas") {
  TEST_CASE("a replicated put keeps N copies on distinct nodes, each readable byte for byte") {
    cluster cl(quick_master);
    for (auto id : {"a", "b", "c", "d"}) cl.add(id);
    // Sizes inline and transferred, none a multiple of a slice or block.
    const std::vector<std::size_t> sizes{1, 4097, 65537, 300001, (5u << 19) + 3};
    std::vector<std::vector<std::uint8_t>> vs;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      vs.push_back(random_bytes(sizes[i], 500 + i));
      auto key = numbered("rep/local/", i);
      auto r = cl.on(0, put_n(*cl.nodes[0].client, key, vs[i], 3, mc::store::placement::local));
      REQUIRE_MESSAGE(r.has_value(), r.error().message());
      auto hs = holders_of(cl, 1, key);
      CHECK(hs.size() == 3);
      CHECK(hs.contains("a"));  // placement::local: this node's copy counts
      std::size_t stored = 0;
      for (auto& n : cl.nodes) stored += n.client->data().exists(key) ? 1 : 0;
      CHECK(stored == 3);
      for (std::size_t n = 0; n < cl.nodes.size(); ++n) check_value(cl, n, key, vs[i]);
    }
    // A remote batch: two copies per key, never on the writer.
    std::vector<std::string> keys;
    std::vector<std::vector<std::uint8_t>> bvs;
    for (std::size_t i = 0; i < 6; ++i) {
      keys.push_back(numbered("rep/batch/", i));
      bvs.push_back(random_bytes(1 + i * 70001, 900 + i));
    }
    auto rs = cl.on(3, batch_put_n(*cl.nodes[3].client, keys, bvs, 2));
    for (auto& r : rs) CHECK(r.has_value());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      auto hs = holders_of(cl, 0, keys[i]);
      CHECK(hs.size() == 2);
      CHECK_FALSE(hs.contains("d"));
      for (std::size_t n = 0; n < cl.nodes.size(); ++n) check_value(cl, n, keys[i], bvs[i]);
    }
    // Gets spread over the copies: a series of reads from d reaches both.
    std::vector<std::uint64_t> before;
    for (auto& n : cl.nodes) before.push_back(n.client->data().stats().remote_reads);
    for (int k = 0; k < 8; ++k) check_value(cl, 3, keys[5], bvs[5]);
    std::size_t serving = 0;
    for (std::size_t n = 0; n < cl.nodes.size(); ++n)
      serving += cl.nodes[n].client->data().stats().remote_reads > before[n] ? 1 : 0;
    CHECK(serving == 2);
  }

  TEST_CASE("bad copy counts are refused and store nothing") {
    cluster cl(quick_master);
    cl.add("a");
    cl.add("b");
    auto v = random_bytes(1000, 1);
    for (std::uint32_t n : {0u, mc::master::replication::max_copies + 1}) {
      auto r = cl.on(0, put_n(*cl.nodes[0].client, "bad", v, n, mc::store::placement::local));
      REQUIRE_FALSE(r.has_value());
      CHECK(mc::is(r.error(), mc::errc::invalid_params));
    }
    CHECK_FALSE(cl.nodes[0].client->data().exists("bad"));
    CHECK_FALSE(cl.nodes[1].client->data().exists("bad"));
  }

  TEST_CASE("fewer nodes than copies: REPLICATION_INCOMPLETE, the copies made stay readable") {
    cluster cl(quick_master);
    cl.add("a");
    cl.add("b");
    auto v = random_bytes(123457, 2);
    auto r = cl.on(0, put_n(*cl.nodes[0].client, "partial", v, 3, mc::store::placement::local));
    REQUIRE_FALSE(r.has_value());
    CHECK(mc::is(r.error(), mc::errc::replication_incomplete));
    CHECK(cl.nodes[0].client->stats().replication_incomplete == 1);
    CHECK(holders_of(cl, 1, "partial") == std::set<std::string>{"a", "b"});
    check_value(cl, 0, "partial", v);
    check_value(cl, 1, "partial", v);
    // A third node joins: the master's scan finds the key short of a copy
    // and has one holder copy it there.
    cl.add("c");
    auto deadline = std::chrono::steady_clock::now() + 60s;
    while (!cl.nodes[2].client->data().exists("partial") && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(50ms);
    REQUIRE(cl.nodes[2].client->data().exists("partial"));
    while (holders_of(cl, 2, "partial").size() < 3 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(50ms);
    CHECK(holders_of(cl, 2, "partial").size() == 3);
    check_value(cl, 2, "partial", v);  // c's own copy: a local hit
    CHECK(cl.nodes[2].client->stats().local_hits >= 1);
  }

  TEST_CASE("a holder leaves: gets fall back to the other copy and the master repairs back to N") {
    cluster cl(quick_master);
    for (auto id : {"a", "b", "c", "d"}) cl.add(id);
    std::vector<std::vector<std::uint8_t>> vs;
    for (std::size_t i = 0; i < 4; ++i) {
      vs.push_back(random_bytes(1 + i * 400009, 40 + i));
      auto r = cl.on(0, put_n(*cl.nodes[0].client, numbered("heal/", i), vs[i], 2, mc::store::placement::remote));
      REQUIRE_MESSAGE(r.has_value(), r.error().message());
    }
    // Warm a's route cache, then stop a holder of key 0 (it unregisters:
    // the master drops its entries and plans repairs at once).
    check_value(cl, 0, "heal/0", vs[0]);
    auto hs = holders_of(cl, 0, "heal/0");
    REQUIRE(hs.size() == 2);
    const auto gone = *hs.begin();
    const auto gone_i = index_of(cl, gone);
    cl.nodes[gone_i].client->stop();
    for (std::size_t i = 0; i < vs.size(); ++i) check_value(cl, 0, numbered("heal/", i), vs[i]);
    // Every key has two live copies again, none on the stopped node.
    auto deadline = std::chrono::steady_clock::now() + 60s;
    auto healed = [&] {
      for (std::size_t i = 0; i < vs.size(); ++i) {
        auto h = holders_of(cl, 0, numbered("heal/", i));
        if (h.size() != 2 || h.contains(gone)) return false;
      }
      return true;
    };
    while (!healed() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(50ms);
    REQUIRE(healed());
    for (std::size_t i = 0; i < vs.size(); ++i) {
      auto key = numbered("heal/", i);
      for (auto& h : holders_of(cl, 0, key)) {
        auto n = index_of(cl, h);
        CHECK(cl.nodes[n].client->data().exists(key));
        check_value(cl, n, key, vs[i]);  // each holder's own copy, byte for byte
      }
    }
    std::uint64_t repaired = 0;
    for (auto& n : cl.nodes) repaired += n.client->stats().repairs_done;
    CHECK(repaired >= 1);
    CHECK(cl.master->state().repairs().completed >= 1);
  }

  TEST_CASE("an overwrite by another replicated put replaces every copy") {
    cluster cl(quick_master);
    for (auto id : {"a", "b", "c"}) cl.add(id);
    auto v1 = random_bytes(70001, 11);
    auto v2 = random_bytes(5003, 12);
    REQUIRE(cl.on(0, put_n(*cl.nodes[0].client, "over", v1, 2, mc::store::placement::local)));
    REQUIRE(cl.on(2, put_n(*cl.nodes[2].client, "over", v2, 2, mc::store::placement::local)));
    auto hs = holders_of(cl, 1, "over");
    CHECK(hs.size() == 2);
    CHECK(hs.contains("c"));
    // A superseded copy is dropped at its holder's next heartbeat (until
    // then that node may still read its old local copy: see "Consistency
    // model"); afterwards every node reads the new value.
    auto deadline = std::chrono::steady_clock::now() + 60s;
    auto stale_left = [&] {
      for (std::size_t n = 0; n < cl.nodes.size(); ++n)
        if (!hs.contains(cl.nodes[n].client->id()) && cl.nodes[n].client->data().exists("over")) return true;
      return false;
    };
    while (stale_left() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(50ms);
    CHECK_FALSE(stale_left());
    for (std::size_t n = 0; n < cl.nodes.size(); ++n) check_value(cl, n, "over", v2);
  }
}
