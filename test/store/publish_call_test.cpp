// Publishes as TransferEngine calls to the master (client_master.cpp
// publish_items, mc/master/publish_call.hpp): puts publish through the
// master's call port and readers elsewhere find them; with the calls off
// the RPC; after a master restart the new port is learned; hostile calls to
// the master's port are refused and leave its table intact.
#include "mc/master/publish_call.hpp"
#include "mc/store/client.hpp"
#include "mc/transfer/engine.hpp"
#include "store_fixture.hpp"

#include <algorithm>
#include <thread>

using mc::test::bytes_of;
using mc::test::cluster;
using mc::test::get;
using mc::test::put;
using mc::test::random_bytes;
using mc::test::writable;
using namespace std::chrono_literals;

namespace {

void check_read(cluster& cl, std::size_t node, mc::store::client& c, const std::string& key,
                const std::vector<std::uint8_t>& want) {
  std::vector<std::uint8_t> out(want.size() + 3, 0x5C);
  auto r = cl.on(node, get(c, key, out));
  REQUIRE_MESSAGE(r.has_value(), key);
  CHECK(*r == want.size());
  CHECK(std::equal(want.begin(), want.end(), out.begin()));
}

}  // namespace

TEST_SUITE("publish calls") {
  TEST_CASE("puts publish as calls to the master; other nodes read them") {
    cluster cl;
    REQUIRE(cl.master->publish_call_port() != 0);
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    const auto before = b.stats();
    // Local and remote placements, sizes from 1 byte past the inline threshold.
    for (std::size_t i = 0; i < 12; ++i) {
      const std::size_t size = std::vector<std::size_t>{1, 4095, 65537, 1 << 20}[i % 4] + i;
      auto v = random_bytes(size, 100 + i);
      const std::string key = "pcall/" + std::to_string(i);
      REQUIRE(cl.on(1, put(b, key, v)));
      check_read(cl, 0, a, key, v);
      auto info = cl.master->state().lookup(key);
      REQUIRE(info.has_value());
      CHECK(info->size == size);
    }
    const auto after = b.stats();
    CHECK(after.publish_batches > before.publish_batches);
    CHECK(after.publish_calls - before.publish_calls == after.publish_batches - before.publish_batches);
  }

  TEST_CASE("with publish calls off the master offers none and puts publish over the RPC") {
    cluster cl([](mc::master::master_options& o) { o.publish_calls = false; });
    CHECK(cl.master->publish_call_port() == 0);
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    auto v = random_bytes(3000, 5);
    REQUIRE(cl.on(1, put(b, "pcall/off", v)));
    check_read(cl, 0, a, "pcall/off", v);
    CHECK(b.stats().publish_batches > 0);
    CHECK(b.stats().publish_calls == 0);
  }

  TEST_CASE("after a master restart its new call port is used") {
    cluster cl;
    auto& a = cl.add("a");
    auto old_port = cl.master->publish_call_port();
    auto v1 = random_bytes(5000, 6);
    REQUIRE(cl.on(0, put(a, "pcall/r1", v1)));
    cl.stop_master();
    cl.start_master();
    REQUIRE(cl.master->publish_call_port() != 0);
    CHECK(cl.master->publish_call_port() != old_port);  // ephemeral: a new one (the old one is closed)
    // The first put after the restart finds the master without its
    // registration (re-registers, republishes); the ones after it publish
    // through the new port.
    auto v2 = random_bytes(6000, 7);
    mc::result<void> r = mc::fail(mc::errc::timeout);
    for (int i = 0; i < 50 && !r; ++i) {
      r = cl.on(0, put(a, "pcall/r2", v2));
      if (!r) std::this_thread::sleep_for(50ms);
    }
    REQUIRE(r.has_value());
    const auto calls = a.stats().publish_calls;
    auto v3 = random_bytes(7000, 8);
    REQUIRE(cl.on(0, put(a, "pcall/r3", v3)));
    CHECK(a.stats().publish_calls > calls);
    auto& b = cl.add("b");
    check_read(cl, 1, b, "pcall/r3", v3);
    check_read(cl, 1, b, "pcall/r2", v2);
  }

  TEST_CASE("hostile publish calls are refused and leave the master's table intact") {
    cluster cl;
    auto& a = cl.add("a");
    auto v = random_bytes(4000, 9);
    REQUIRE(cl.on(0, put(a, "pcall/kept", v)));
    const auto version_before = cl.master->state().lookup("pcall/kept");
    REQUIRE(version_before.has_value());
    const std::string ep = "127.0.0.1:" + std::to_string(cl.master->publish_call_port());
    mc::transfer::engine_options eo;
    eo.bind_host = "127.0.0.1";
    eo.enable_same_host = false;
    eo.enable_in_process = false;
    mc::runtime::runtime rt(1);
    rt.start();
    {
      mc::transfer::engine e(rt, eo);
      REQUIRE(e.start());
      auto call = [&](std::vector<std::byte> req) {
        std::vector<std::byte> reply(1024);
        return rt.block_on(e.call(ep, req, reply, 5s));
      };
      mc::master::publish_item evil{"pcall/kept", 1, UINT64_MAX - 1, 0};
      auto good = *mc::master::encode_publish_call("a", 0, mc::master::publish_kind::put, std::span(&evil, 1));
      // Cut, extended, another kind: invalid_params, nothing applied.
      for (auto bad : {std::vector<std::byte>(good.begin(), good.end() - 1),
                       [&] {
                         auto b = good;
                         b.push_back(std::byte{1});
                         return b;
                       }(),
                       [&] {
                         auto b = good;
                         b[0] = std::byte{1};
                         return b;
                       }(),
                       std::vector<std::byte>{std::byte{3}}}) {
        auto r = call(bad);
        REQUIRE_FALSE(r.has_value());
        CHECK(mc::is(r.error(), mc::errc::invalid_params));
      }
      // A well-formed call from a client id the master does not know: its
      // item is refused (client_not_found), the entry stays.
      auto stranger = *mc::master::encode_publish_call("nobody", 0, mc::master::publish_kind::put, std::span(&evil, 1));
      std::vector<std::byte> reply(64);
      auto n = rt.block_on(e.call(ep, stranger, reply, 5s));
      REQUIRE(n.has_value());
      auto out = mc::master::decode_publish_answer(std::span(reply).first(*n), 1);
      REQUIRE(out.has_value());
      REQUIRE_FALSE((*out)[0].has_value());
      CHECK(mc::is((*out)[0].error(), mc::errc::client_not_found));
      e.stop();
    }
    rt.stop();
    auto info = cl.master->state().lookup("pcall/kept");
    REQUIRE(info.has_value());
    CHECK(info->size == v.size());
    REQUIRE(info->replicas.size() == 1);
    CHECK(info->replicas[0].client_id == "a");
    auto& b = cl.add("b");
    check_read(cl, 1, b, "pcall/kept", v);
  }
}
