// Standalone (attach) mode: hand-made requests that break the rules are
// refused (whole call or per item) and leave stored values and the node intact.
#include "attach.capnp.h"
#include "attach_fixture.hpp"
#include "mc/rpc/capnp.hpp"

#include <array>
#include <limits>

using namespace mc::test;
using mc::errc;

namespace {

struct raw_item {
  std::string key;
  std::vector<std::array<std::uint64_t, 3>> pieces;  // address, length, token
};
using raw_results = std::vector<std::pair<std::int32_t, std::uint64_t>>;

/// One batchGet / batchPut as an attacher could send it.
mc::task<mc::result<raw_results>> raw_call_co(std::string endpoint, bool put, std::uint16_t port,
                                              std::vector<raw_item> items) {
  auto cap = co_await mc::rpc::connect<Attach>(endpoint, mc::store::attach_service_name);
  if (!cap) co_return cap.error();
  auto fill = [&](auto& req) {
    req.initPeer().setPort(port);
    req.setTimeoutMs(5000);
    auto list = req.initItems(static_cast<unsigned>(items.size()));
    for (unsigned i = 0; i < items.size(); ++i) {
      list[i].setKey(items[i].key);
      auto ps = list[i].initPieces(static_cast<unsigned>(items[i].pieces.size()));
      for (unsigned j = 0; j < items[i].pieces.size(); ++j) {
        ps[j].setAddress(items[i].pieces[j][0]);
        ps[j].setLength(items[i].pieces[j][1]);
        ps[j].setToken(items[i].pieces[j][2]);
      }
    }
  };
  raw_results out;
  if (put) {
    auto req = cap->batchPutRequest();
    fill(req);
    auto resp = co_await mc::rpc::call(req.send());
    if (!resp) co_return resp.error();
    for (auto r : resp->getResults()) out.emplace_back(r.getCode(), r.getSize());
  } else {
    auto req = cap->batchGetRequest();
    fill(req);
    auto resp = co_await mc::rpc::call(req.send());
    if (!resp) co_return resp.error();
    for (auto r : resp->getResults()) out.emplace_back(r.getCode(), r.getSize());
  }
  co_return out;
}

/// Callable with braced temporaries (see attach_fixture.hpp).
mc::task<mc::result<raw_results>> raw_call(std::string endpoint, bool put, std::uint16_t port,
                                           std::vector<raw_item> items) {
  return raw_call_co(std::move(endpoint), put, port, std::move(items));
}

mc::task<mc::result<std::uint32_t>> raw_hello(std::string endpoint, std::uint32_t version) {
  auto cap = co_await mc::rpc::connect<Attach>(endpoint, mc::store::attach_service_name);
  if (!cap) co_return cap.error();
  auto req = cap->helloRequest();
  req.setVersion(version);
  auto resp = co_await mc::rpc::call(req.send());
  if (!resp) co_return resp.error();
  co_return resp->getMaxKeys();
}

std::int32_t code(errc e) { return static_cast<std::int32_t>(e); }

}  // namespace

TEST_SUITE("store attach") {
  TEST_CASE("hostile attach requests are refused cleanly and stored values stay intact") {
    mc::store::attach_server_options so;
    so.max_keys_per_call = 32;
    attached_cluster a(1, "auto", so);
    attacher at(a);
    const auto ep = a.server->endpoint();
    auto port = mc::store::server_port_of(at.c->transfer_endpoint());
    REQUIRE(port);
    auto v = random_bytes(1000, 42);
    REQUIRE(at.on(a_put(*at.c, "x", one(v))));

    // Whole-call refusals.
    CHECK(mc::is(at.on(raw_hello(ep, 99)).error(), errc::unsupported));
    auto hello = at.on(raw_hello(ep, mc::store::attach_protocol_version));
    REQUIRE(hello);
    CHECK(*hello == 32);
    CHECK(mc::is(at.on(raw_call(ep, false, 0, {raw_item{"x", {}}})).error(), errc::invalid_params));
    CHECK(mc::is(at.on(raw_call(ep, false, *port, std::vector<raw_item>(33, raw_item{"x", {}}))).error(),
                 errc::invalid_params));
    {
      std::vector<raw_item> many(17, raw_item{"x", std::vector<std::array<std::uint64_t, 3>>(4000, {4096, 1, 1})});
      CHECK(mc::is(at.on(raw_call(ep, false, *port, std::move(many))).error(), errc::invalid_params));
    }

    // Per-item refusals next to a good item.
    std::vector<std::uint8_t> dst(1000, sentinel_byte), small(100, sentinel_byte);
    auto reg = at.c->engine().register_memory(dst.data(), dst.size(), mc::transfer::region_access::remote_write);
    auto reg_small =
        at.c->engine().register_memory(small.data(), small.size(), mc::transfer::region_access::remote_write);
    REQUIRE(reg);
    REQUIRE(reg_small);
    const auto addr = reinterpret_cast<std::uint64_t>(dst.data());
    const auto tok = reg->token();
    const auto max = std::numeric_limits<std::uint64_t>::max();
    std::vector<raw_item> items = {
        {"x", {{addr, 0, tok}}},                                                             // empty piece
        {"x", {{0, 1000, tok}}},                                                             // null address
        {"x", {{max - 10, 1000, tok}}},                                                      // address overflow
        {"x", std::vector<std::array<std::uint64_t, 3>>(4097, {addr, 1, tok})},              // too many pieces
        {"", {{addr, 1000, tok}}},                                                           // bad key
        {"x", {{addr, 1000, tok ^ 0x5555}}},                                                 // unknown token
        {"x", {{reinterpret_cast<std::uint64_t>(small.data()), 1000, reg_small->token()}}},  // past its region
        {"x", {{addr, 1000, tok}}},                                                          // good
    };
    auto r = at.on(raw_call(ep, false, *port, items));
    REQUIRE(r);
    REQUIRE(r->size() == items.size());
    for (int i = 0; i < 4; ++i) CHECK((*r)[static_cast<std::size_t>(i)].first == code(errc::invalid_params));
    CHECK((*r)[4].first == code(errc::invalid_key));
    CHECK((*r)[5].first == code(errc::access_denied));
    CHECK((*r)[6].first == code(errc::access_denied));
    CHECK(std::all_of(small.begin(), small.end(), [](auto b) { return b == sentinel_byte; }));
    CHECK((*r)[7].first == 0);
    CHECK((*r)[7].second == 1000);
    CHECK(checksum(dst.data(), dst.size()) == checksum(v.data(), v.size()));

    // A transfer port where nothing listens: the item fails, the node is fine.
    auto dead = at.on(raw_call(ep, false, 1, {raw_item{"x", {{addr, 1000, tok}}}}));
    REQUIRE(dead);
    CHECK((*dead)[0].first != 0);

    // Puts with a forged token or from a region the node may not read: refused,
    // the stored value is untouched.
    auto src = random_bytes(1000, 43);
    auto wo = at.c->engine().register_memory(src.data(), src.size(), mc::transfer::region_access::remote_write);
    REQUIRE(wo);
    const auto saddr = reinterpret_cast<std::uint64_t>(src.data());
    auto p = at.on(raw_call(ep, true, *port,
                            {raw_item{"x", {{saddr, 1000, wo->token() ^ 1}}},
                             raw_item{"x", {{saddr, 1000, wo->token()}}}, raw_item{"x", {}}}));
    REQUIRE(p);
    CHECK((*p)[0].first == code(errc::access_denied));
    CHECK((*p)[1].first == code(errc::access_denied));
    CHECK((*p)[2].first == code(errc::invalid_params));
    std::vector<std::uint8_t> back(1000);
    REQUIRE(at.on(a_get(*at.c, "x", one_mut(back))));
    CHECK(checksum(back.data(), back.size()) == checksum(v.data(), v.size()));
    CHECK(eventually([&] { return drained(*a.server); }));
    CHECK(a.server->stats().refused == 0);  // loopback peers are never refused
  }

}  // TEST_SUITE
