// etcd client pieces that take untrusted text: endpoint lists, base64 from
// etcd's replies, cluster ids, master addresses. (The exchange with a real
// etcd is tested end to end by test/ha/ha_failover_test.py.)
#include "mc/master/etcd.hpp"
#include "mc/master/ha.hpp"

#include <doctest/doctest.h>

#include <random>
#include <string>

TEST_SUITE("master etcd") {
  TEST_CASE("base64 round-trips every length and byte, and refuses malformed text") {
    std::mt19937 rng(7);
    for (std::size_t n = 0; n < 300; ++n) {
      std::string s(n, '\0');
      for (auto& c : s) c = static_cast<char>(rng());
      auto e = mc::master::etcd_base64(s);
      CHECK(e.size() == (n + 2) / 3 * 4);
      auto d = mc::master::etcd_unbase64(e);
      REQUIRE(d);
      CHECK(*d == s);
    }
    CHECK(mc::master::etcd_base64("k") == "aw==");
    CHECK(mc::master::etcd_unbase64("aw==").value() == "k");
    for (const char* bad : {"a", "aw=", "aw=a", "a===", "=aaa", "a\x01==", "aw==aw==", "aGk*", "aG k"}) {
      CAPTURE(std::string(bad));
      CHECK(!mc::master::etcd_unbase64(bad));
    }
    CHECK(mc::master::etcd_unbase64("").value().empty());
  }

  TEST_CASE("endpoint lists: plain, http:// and etcd:// forms; bad ones refused with a reason") {
    auto r = mc::master::parse_etcd_endpoints("etcd://h1:2379,http://10.0.0.2:2379/,[::1]:1");
    REQUIRE(r.has_value());
    CHECK(*r == std::vector<std::string>{"h1:2379", "10.0.0.2:2379", "[::1]:1"});
    std::string why;
    for (const char* bad : {"", "etcd://", "h1", "h1:2379,", ",h1:2379", "h1:0", "h 1:2379", "h1:2379,,h2:1",
                            "https://h1:2379", "h1:2379/v3"}) {
      CAPTURE(std::string(bad));
      why.clear();
      CHECK(mc::is(mc::master::parse_etcd_endpoints(bad, &why).error(), mc::errc::invalid_params));
      CHECK(!why.empty());
    }
    std::string many;
    for (int i = 0; i < 17; ++i) {
      if (i) many += ',';
      many += "h:";
      many += std::to_string(i + 1);
    }
    CHECK_FALSE(mc::master::parse_etcd_endpoints(many).has_value());
  }

  TEST_CASE("cluster ids and the keys derived from them") {
    CHECK(mc::master::check_cluster_id("mooncake_cluster").has_value());
    CHECK(mc::master::check_cluster_id("a.b-c_9").has_value());
    for (const char* bad : {"", "a/b", "a b", "..\x01", "k\n"})
      CHECK_FALSE(mc::master::check_cluster_id(bad).has_value());
    CHECK_FALSE(mc::master::check_cluster_id(std::string(129, 'a')).has_value());
    CHECK(mc::master::ha_leader_key("c1") == "mooncake-store/c1/master_view");
    CHECK(mc::master::ha_clients_prefix("c1") == "mooncake-store/c1/clients/");
    CHECK(mc::master::ha_members_prefix("c1") == "mooncake-store/c1/members/");
  }

  TEST_CASE("reply parsers read etcd 3.4's real replies and refuse inconsistent ones") {
    namespace r = mc::master::etcd_reply;
    const std::string h = R"({"header":{"cluster_id":"1","member_id":"2","revision":"7","raft_term":"2"})";
    auto g = r::grant(h + R"(,"ID":"4111120379323307269","TTL":"2"})");
    REQUIRE(g.has_value());
    CHECK(g->id == 4111120379323307269LL);
    CHECK(g->ttl_s == 2);
    CHECK_FALSE(r::grant(h + R"(,"ID":"0","TTL":"2"})").has_value());
    CHECK_FALSE(r::grant(h + R"(,"ID":"5","TTL":"-1"})").has_value());
    CHECK_FALSE(r::grant(h + R"(,"ID":"99999999999999999999","TTL":"2"})").has_value());
    CHECK(r::keepalive(R"({"result":{"header":{"revision":"3"},"ID":"5","TTL":"2"}})"
                       "\n")
              .value() == 2);
    CHECK(r::keepalive(R"({"result":{"header":{"revision":"3"},"ID":"5"}})").value() == 0);  // expired
    CHECK_FALSE(r::keepalive(R"({"error":{"grpc_code":14}})").has_value());
    const std::string key = "mooncake-store/c/master_view";
    const auto k64 = mc::master::etcd_base64(key);
    auto won = r::create_if_absent(h + R"(,"succeeded":true,"responses":[{"response_put":{}}]})", key);
    REQUIRE(won.has_value());
    CHECK(won->created);
    CHECK(won->revision == 7);
    auto kv = R"({"key":")" + k64 + R"(","create_revision":"5","mod_revision":"5","value":")" +
              mc::master::etcd_base64("10.0.0.1:50051") + R"(","lease":"9"})";
    auto lost = r::create_if_absent(h + R"(,"responses":[{"response_range":{"kvs":[)" + kv + "]}}]}", key);
    REQUIRE(lost.has_value());
    CHECK_FALSE(lost->created);
    CHECK(lost->holder.value == "10.0.0.1:50051");
    CHECK(lost->holder.create_revision == 5);
    CHECK_FALSE(
        r::create_if_absent(h + R"(,"responses":[{"response_range":{"kvs":[)" + kv + "]}}]}", "other").has_value());
    auto got = r::get(h + R"(,"kvs":[)" + kv + "]}", key);
    REQUIRE(got.has_value());
    REQUIRE(got->has_value());
    CHECK((*got)->lease == 9);
    CHECK_FALSE(r::get(h + R"(,"kvs":[)" + kv + "]}", "another-key").has_value());   // not what was asked
    CHECK_FALSE(r::get(h + R"(,"kvs":[)" + kv + "," + kv + "]}", key).has_value());  // more than one
    CHECK(r::get(h + "}", key).value() == std::nullopt);
    CHECK_FALSE(r::get_prefix(h + R"(,"kvs":[)" + kv + "]}", "mooncake-store/c/clients/", 10).has_value());
    CHECK(r::deleted(h + R"(,"deleted":"1"})").value() == 1);
    CHECK_FALSE(r::deleted(h + R"(,"deleted":"2"})").has_value());
    CHECK(r::succeeded(h + "}").value() == false);
    CHECK_FALSE(r::succeeded(h + R"(,"succeeded":"yes"})").has_value());
    for (const char* bad : {"", "[]", "{", "null", "{\"header\":[]}", "\xff\xfe"}) {
      CAPTURE(std::string(bad));
      CHECK_FALSE(r::grant(bad).has_value());
      CHECK_FALSE(r::revision(bad).has_value());
    }
  }
}
