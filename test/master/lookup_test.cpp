// metadata::lookup_batch: the same answers as one lookup() per key, whatever
// the mix (found, missing, invalid, duplicate, replicated, unhealthy holders),
// with answer storage reused across batches.
#include "clients.hpp"
#include "mc/master/metadata.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

using namespace std::chrono_literals;
using mc::master::metadata;

using mc::test::client;

namespace {

/// What the test's table holds: the size and holder ids of a routable key.
struct expected {
  std::uint64_t size = 0;
  std::vector<std::string> ids;
};
using model = std::function<std::optional<expected>(const std::string&)>;

/// lookup_batch(keys) against the model and against lookup() of each key,
/// field by field.
void check_batch(const metadata& m, const std::vector<std::string>& keys, std::vector<metadata::lookup_answer>& out,
                 const model& want) {
  std::vector<std::string_view> views(keys.begin(), keys.end());
  out.resize(std::max(out.size(), keys.size()));
  m.lookup_batch(views, out);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    CAPTURE(i);
    CAPTURE(keys[i]);
    auto one = m.lookup(keys[i]);
    REQUIRE(bool(out[i].error) == !one.has_value());
    auto w = want(keys[i]);
    REQUIRE(w.has_value() == !out[i].error);
    if (w) {
      CHECK(out[i].info.size == w->size);
      REQUIRE(out[i].info.replicas.size() == w->ids.size());
      for (std::size_t j = 0; j < w->ids.size(); ++j) {
        CHECK(out[i].info.replicas[j].client_id == w->ids[j]);
        CHECK(out[i].info.replicas[j].rpc_endpoint == w->ids[j] + ":12345");
      }
    } else {
      const bool invalid = keys[i].empty() || keys[i].size() > 64;
      CHECK(mc::is(out[i].error, invalid ? mc::errc::invalid_key : mc::errc::object_not_found));
    }
    if (!one) {
      CHECK(out[i].error == one.error());
      continue;
    }
    CHECK(out[i].info.size == one->size);
    REQUIRE(out[i].info.replicas.size() == one->replicas.size());
    for (std::size_t j = 0; j < one->replicas.size(); ++j) {
      CHECK(out[i].info.replicas[j].client_id == one->replicas[j].client_id);
      CHECK(out[i].info.replicas[j].rpc_endpoint == one->replicas[j].rpc_endpoint);
      CHECK(out[i].info.replicas[j].transfer_endpoint == one->replicas[j].transfer_endpoint);
    }
  }
}

}  // namespace

TEST_SUITE("master metadata") {
  TEST_CASE("a batched lookup answers each key as a single lookup would") {
    mc::master::metadata_options opts;
    opts.shards = 8;  // several keys per shard group
    opts.max_key_bytes = 64;
    // Long enough that no holder turns suspect during a batch and its
    // single-key comparison, even under the sanitizers.
    opts.route_ttl = 1s;
    metadata m(opts);
    for (const char* id : {"a", "b", "c"}) REQUIRE(m.register_client(client(id)));
    const char* holders[] = {"a", "b", "c"};
    for (std::uint64_t i = 0; i < 600; ++i)
      REQUIRE(m.add_replica(mc::test::numbered("k", i), holders[i % 3], i + 1, 7));
    // Replicated keys: two live copies each.
    const auto tag = mc::master::replication{12345, 2}.tag();
    for (std::uint64_t i = 0; i < 20; ++i) {
      auto key = mc::test::numbered("r", i);
      REQUIRE(m.add_replica(key, "a", 100, 9, mc::master::publish_kind::put, 0, tag));
      REQUIRE(m.add_replica(key, "b", 100, 9, mc::master::publish_kind::put, 0, tag));
      REQUIRE(m.lookup(key)->replicas.size() == 2);
    }

    std::mt19937_64 rng(5);
    auto mixed = [&](std::size_t n) {
      std::vector<std::string> keys;
      for (std::size_t i = 0; i < n; ++i) {
        switch (rng() % 6) {
          case 0:
            keys.push_back(mc::test::numbered("missing", rng() % 1000));
            break;
          case 1:
            keys.push_back(rng() % 2 ? std::string() : std::string(65, 'x'));  // invalid: empty, too long
            break;
          case 2:
            keys.push_back(mc::test::numbered("r", rng() % 20));
            break;
          default:
            keys.push_back(mc::test::numbered("k", rng() % 600));
        }
      }
      if (n > 1) keys.push_back(keys.front());  // a duplicate
      return keys;
    };
    bool c_routable = true;
    std::unordered_map<std::string, std::uint64_t> plain, replicated;  // key -> index
    for (std::uint64_t i = 0; i < 600; ++i) plain.emplace(mc::test::numbered("k", i), i);
    for (std::uint64_t i = 0; i < 20; ++i) replicated.emplace(mc::test::numbered("r", i), i);
    const model want = [&](const std::string& key) -> std::optional<expected> {
      if (auto it = plain.find(key); it != plain.end()) {
        auto i = it->second;
        if (i % 3 == 2 && !c_routable) return std::nullopt;
        return expected{i + 1, {holders[i % 3]}};
      }
      if (replicated.contains(key)) return expected{100, {"a", "b"}};
      return std::nullopt;
    };
    std::vector<metadata::lookup_answer> out;  // reused: replica lists shrink and grow
    for (std::size_t n : {1, 2, 7, 64, 500, 3}) {
      CAPTURE(n);
      for (const char* id : {"a", "b", "c"}) REQUIRE(m.heartbeat(id, 0, 1000));
      check_batch(m, mixed(n), out, want);
    }
    // Empty batch: nothing to answer.
    m.lookup_batch({}, out);

    // c falls silent: its keys are unroutable (OBJECT_NOT_FOUND), a/b's stay.
    std::this_thread::sleep_for(1100ms);
    REQUIRE(m.heartbeat("a", 0, 1000));
    REQUIRE(m.heartbeat("b", 0, 1000));
    c_routable = false;
    check_batch(m, mixed(300), out, want);
    std::size_t unroutable = 0;
    for (std::uint64_t i = 2; i < 600; i += 3) {
      auto r = m.lookup(mc::test::numbered("k", i));
      unroutable += !r && mc::is(r.error(), mc::errc::object_not_found);
    }
    CHECK(unroutable == 200);

    // An answer span shorter than the keys: nothing is looked up.
    std::vector<std::string_view> two{"k0", "k1"};
    metadata::lookup_answer one;
    one.error = mc::fail(mc::errc::timeout);
    m.lookup_batch(two, {&one, 1});
    CHECK(mc::is(one.error, mc::errc::timeout));
  }
}
