// etcd client pieces that take untrusted text: endpoint lists, base64 from
// etcd's replies, cluster ids, master addresses, security settings. (The
// exchange with a real etcd is tested by test/master/etcd_watch_test.cpp and
// end to end by test/ha/ha_failover_test.py and ha_secure_test.py.)
#include "mc/master/etcd.hpp"
#include "mc/master/ha.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <fstream>
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
                            "ftp://h1:2379", "h1:2379/v3"}) {
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
    // Watch stream lines, as etcd 3.4's gateway writes them.
    std::int64_t rev = -1;
    CHECK(r::get(h + "}", key, &rev).value() == std::nullopt);
    CHECK(rev == 7);
    auto created = r::watch(R"({"result":{"header":{"cluster_id":"1","revision":"2"},"created":true}})", key);
    REQUIRE(created.has_value());
    CHECK(created->created);
    CHECK(created->revision == 2);
    CHECK(created->events.empty());
    auto put = r::watch(R"({"result":{"header":{"revision":"5"},"events":[{"kv":)" + kv + "}]}}", key);
    REQUIRE(put.has_value());
    REQUIRE(put->events.size() == 1);
    CHECK_FALSE(put->events[0].deleted);
    CHECK(put->events[0].kv.value == "10.0.0.1:50051");
    auto del = r::watch(R"({"result":{"header":{"revision":"6"},"events":[{"type":"DELETE","kv":{"key":")" + k64 +
                            R"(","mod_revision":"6"}}]}})",
                        key);
    REQUIRE(del.has_value());
    REQUIRE(del->events.size() == 1);
    CHECK(del->events[0].deleted);
    CHECK(del->events[0].kv.mod_revision == 6);
    auto compacted = r::watch(R"({"result":{"header":{"raft_term":"2"},"canceled":true,"compact_revision":"4"}})", key);
    REQUIRE(compacted.has_value());
    CHECK(compacted->canceled);
    CHECK(compacted->compact_revision == 4);
    CHECK_FALSE(r::watch(R"({"error":{"grpc_code":14}})", key).has_value());
    CHECK_FALSE(r::watch(R"({"result":{"events":[{"kv":)" + kv + "}]}}", "other").has_value());  // another key
    CHECK_FALSE(r::watch(R"({"result":{"events":[{"type":"MOVE","kv":)" + kv + "}]}}", key).has_value());
    CHECK_FALSE(r::watch(R"({"result":{"events":[{"type":"PUT"}]}})", key).has_value());  // no kv
    CHECK_FALSE(r::watch(R"({"result":{"created":"yes"}})", key).has_value());
    auto kv_at = [&](int rev_) {
      return R"({"kv":{"key":")" + k64 + R"(","create_revision":"5","mod_revision":")" + std::to_string(rev_) +
             R"("}})";
    };
    CHECK_FALSE(r::watch(R"({"result":{"events":[)" + kv_at(9) + "," + kv_at(8) + "]}}", key).has_value());
    CHECK(r::watch(R"({"result":{"events":[)" + kv_at(8) + "," + kv_at(9) + "]}}", key).value().events.size() == 2);
    CHECK_FALSE(r::watch(R"({"result":{"events":[)" + kv_at(0) + "]}}", key).has_value());  // no revision
    // Auth tokens travel in an HTTP header: printable ASCII only, bounded.
    CHECK(r::token(h + R"(,"token":"jiHkASeRvgXCIrkU.8"})").value() == "jiHkASeRvgXCIrkU.8");
    CHECK_FALSE(r::token(h + R"(,"token":""})").has_value());
    CHECK_FALSE(r::token(h + R"(,"token":"a\r\nX-Injected: 1"})").has_value());
    CHECK_FALSE(r::token(h + R"(,"token":"a b"})").has_value());
    CHECK_FALSE(r::token(h + R"(,"token":)" + "\"" + std::string(4097, 'a') + "\"}").has_value());
    CHECK_FALSE(r::token(h + "}").has_value());
    for (const char* bad : {"", "[]", "{", "null", "{\"header\":[]}", "\xff\xfe"}) {
      CAPTURE(std::string(bad));
      CHECK_FALSE(r::grant(bad).has_value());
      CHECK_FALSE(r::revision(bad).has_value());
      CHECK_FALSE(r::watch(bad, key).has_value());
    }
  }

  TEST_CASE("etcd security settings: refused with the reason, https:// endpoints imply TLS") {
    using mc::master::etcd_security;
    mc::master::etcd_security_options o;
    std::string why;
    auto none = etcd_security::load(o, false, &why);
    REQUIRE(none.has_value());
    CHECK_FALSE(none->tls());
    CHECK_FALSE(none->authenticates());
    auto tls = etcd_security::load(o, true, &why);  // https:// endpoints: the system's CAs
    REQUIRE(tls.has_value());
    CHECK(tls->tls());
    o.username = "root";
    CHECK_FALSE(etcd_security::load(o, false, &why).has_value());
    CHECK(why.find("etcd_password_file") != std::string::npos);
    auto dir = mc::test::make_temp_dir("mc-etcd-sec");
    o.password_file = dir + "/missing";
    CHECK_FALSE(etcd_security::load(o, false, &why).has_value());
    CHECK(why.find("cannot be read") != std::string::npos);
    o.password_file = dir + "/pw";
    {
      std::ofstream f(o.password_file);
      f << " \n\t ";
    }
    CHECK_FALSE(etcd_security::load(o, false, &why).has_value());
    CHECK(why.find("empty") != std::string::npos);
    {
      std::ofstream f(o.password_file);
      f << "  pa ss\n";
    }
    auto auth = etcd_security::load(o, false, &why);
    REQUIRE(auth.has_value());
    CHECK(auth->authenticates());
    CHECK_FALSE(auth->tls());
    o.ca_file = dir + "/no-ca.pem";
    CHECK_FALSE(etcd_security::load(o, false, &why).has_value());
    CHECK(why.find("etcd_ca_file") != std::string::npos);
    o.ca_file.clear();
    o.cert_file = dir + "/pw";  // not a certificate, and no key
    CHECK_FALSE(etcd_security::load(o, false, &why).has_value());
    CHECK(why.find("together") != std::string::npos);
    o.key_file = dir + "/pw";
    CHECK_FALSE(etcd_security::load(o, false, &why).has_value());
    CHECK(why.find("etcd_cert_file") != std::string::npos);
    mc::test::remove_tree(dir);
    bool secure = false;
    auto eps = mc::master::parse_etcd_endpoints("etcd://https://h1:2379,https://h2:2379", &why, &secure);
    REQUIRE(eps.has_value());
    CHECK(secure);
    CHECK(eps->front() == "h1:2379");
    CHECK_FALSE(mc::master::parse_etcd_endpoints("https://h1:2379,h2:2379", &why, &secure).has_value());
    CHECK(why.find("mix") != std::string::npos);
  }
}
