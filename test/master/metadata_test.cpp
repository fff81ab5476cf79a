#include "mc/master/metadata.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <thread>

using namespace std::chrono_literals;
using mc::master::client_info;
using mc::master::metadata;

namespace {
client_info client(const std::string& id, std::uint64_t cap = 1000, std::uint64_t used = 0) {
  return {id, id + ":12345", id + ":50052", cap, used};
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
    CHECK(mc::is(m.heartbeat("nobody", 0, 0).error(), mc::errc::client_not_found));
  }

  TEST_CASE("replicas are added, looked up, removed and counted") {
    metadata m;
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.register_client(client("b")));
    CHECK(m.add_replica("k", "a", 10));
    CHECK(m.add_replica("k", "b", 10));
    CHECK(m.add_replica("k", "b", 10));  // idempotent
    auto info = m.lookup("k");
    REQUIRE(info);
    CHECK(info->size == 10);
    CHECK(info->replicas.size() == 2);
    CHECK(m.replica_count() == 2);
    CHECK(m.key_count() == 1);
    CHECK(m.remove_replica("k", "a"));
    CHECK(mc::is(m.remove_replica("k", "a").error(), mc::errc::object_not_found));
    CHECK(m.lookup("k")->replicas.size() == 1);
    CHECK(m.remove_replica("k", "b"));
    CHECK(mc::is(m.lookup("k").error(), mc::errc::object_not_found));
    CHECK_FALSE(m.exists("k"));
  }

  TEST_CASE("bad keys and unknown clients are rejected") {
    metadata m;
    REQUIRE(m.register_client(client("a")));
    CHECK(mc::is(m.add_replica("", "a", 1).error(), mc::errc::invalid_key));
    CHECK(mc::is(m.add_replica(std::string(5000, 'x'), "a", 1).error(), mc::errc::invalid_key));
    CHECK(mc::is(m.add_replica("k", "ghost", 1).error(), mc::errc::client_not_found));
    CHECK(mc::is(m.lookup("").error(), mc::errc::invalid_key));
  }

  TEST_CASE("a new value of another size makes older replicas stale") {
    metadata m;
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.register_client(client("b")));
    REQUIRE(m.add_replica("k", "a", 10));
    REQUIRE(m.add_replica("k", "b", 20));
    auto info = m.lookup("k");
    REQUIRE(info);
    CHECK(info->size == 20);
    REQUIRE(info->replicas.size() == 1);
    CHECK(info->replicas[0].client_id == "b");
    auto cl = m.clients();
    CHECK(cl[0].keys == 0);
    CHECK(cl[1].keys == 1);
  }

  TEST_CASE("remove_key returns every holder") {
    metadata m;
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.register_client(client("b")));
    REQUIRE(m.add_replica("k", "a", 1));
    REQUIRE(m.add_replica("k", "b", 1));
    auto r = m.remove_key("k");
    REQUIRE(r);
    CHECK(r->size() == 2);
    CHECK(mc::is(m.remove_key("k").error(), mc::errc::object_not_found));
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
    mc::master::metadata_options o;
    o.route_ttl = 30ms;
    o.drop_ttl = 120ms;
    metadata m(o);
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.register_client(client("b")));
    REQUIRE(m.add_replica("k", "a", 1));
    REQUIRE(m.add_replica("k", "b", 1));
    // Keep b alive, let a go silent.
    auto until = std::chrono::steady_clock::now() + 60ms;
    while (std::chrono::steady_clock::now() < until) {
      REQUIRE(m.heartbeat("b", 0, 1000));
      std::this_thread::sleep_for(5ms);
    }
    auto cl = m.clients();
    CHECK(cl[0].state == mc::master::health::suspect);
    CHECK(m.lookup("k")->replicas.size() == 1);
    CHECK(m.write_route(1, "b").has_error());
    CHECK(m.sweep().empty());
    until = std::chrono::steady_clock::now() + 100ms;
    while (std::chrono::steady_clock::now() < until) {
      REQUIRE(m.heartbeat("b", 0, 1000));
      std::this_thread::sleep_for(5ms);
    }
    auto dropped = m.sweep();
    REQUIRE(dropped.size() == 1);
    CHECK(dropped[0] == "a");
    CHECK(m.replica_count() == 1);
    CHECK(mc::is(m.heartbeat("a", 0, 0).error(), mc::errc::client_not_found));
  }

  TEST_CASE("a live client's id is not taken over from other endpoints; a silent one's is") {
    mc::master::metadata_options o;
    o.route_ttl = 40ms;
    o.drop_ttl = 10s;
    metadata m(o);
    REQUIRE(m.register_client(client("a")));
    REQUIRE(m.add_replica("k", "a", 7));
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
    for (int i = 0; i < 100; ++i) REQUIRE(m.add_replica("p/" + std::to_string(i), "a", 1));
    REQUIRE(m.add_replica("q/1", "a", 1));
    CHECK(m.keys("p/", 10).size() == 10);
    CHECK(m.keys("p/", 1000).size() == 100);
    CHECK(m.keys("q/", 1000).size() == 1);
    CHECK(m.unregister_client("a"));
    CHECK(m.key_count() == 0);
  }
}
