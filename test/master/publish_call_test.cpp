// The publish call format (mc/master/publish_call.hpp): requests and answers
// round-trip; every malformed request (a cut anywhere, bad kind, flags,
// counts, lengths, trailing bytes) is refused whole; answers of the wrong
// size or count are refused; unknown codes read as rpc_fail.
#include "mc/master/publish_call.hpp"

#include <doctest/doctest.h>

#include <random>

using namespace mc::master;

namespace {

std::vector<publish_item> random_items(std::size_t n, std::mt19937_64& rng) {
  std::vector<publish_item> items(n);
  for (std::size_t i = 0; i < n; ++i) {
    items[i].key = "pc/" + std::to_string(rng() % 100000) + std::string(rng() % 40, 'k');
    items[i].size = rng();
    items[i].version = rng();
    items[i].replication = rng() % 3 == 0 ? 0 : rng();
  }
  return items;
}

}  // namespace

TEST_SUITE("publish_call") {
  TEST_CASE("requests round-trip, both kinds, 1 to max items") {
    std::mt19937_64 rng(7);
    for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{97}, max_publish_call_items}) {
      for (auto kind : {publish_kind::put, publish_kind::republish}) {
        auto items = random_items(n, rng);
        auto req = encode_publish_call("node-7", 0x0102030405060708ull + n, kind, items);
        REQUIRE(req.has_value());
        auto c = decode_publish_call(*req);
        REQUIRE(c.has_value());
        CHECK(c->client_id == "node-7");
        CHECK(c->epoch == 0x0102030405060708ull + n);
        CHECK(c->kind == kind);
        REQUIRE(c->items.size() == n);
        for (std::size_t i = 0; i < n; ++i) {
          CHECK(c->items[i].key == items[i].key);
          CHECK(c->items[i].size == items[i].size);
          CHECK(c->items[i].version == items[i].version);
          CHECK(c->items[i].replication == items[i].replication);
        }
      }
    }
  }

  TEST_CASE("the encoder refuses what the decoder would") {
    std::mt19937_64 rng(8);
    auto items = random_items(3, rng);
    CHECK(mc::is(encode_publish_call("", 1, publish_kind::put, items).error(), mc::errc::invalid_params));
    CHECK(mc::is(
        encode_publish_call(std::string(max_publish_call_client_id + 1, 'c'), 1, publish_kind::put, items).error(),
        mc::errc::invalid_params));
    CHECK(mc::is(encode_publish_call("c", 1, publish_kind::put, {}).error(), mc::errc::invalid_params));
    auto many = random_items(max_publish_call_items + 1, rng);
    CHECK(mc::is(encode_publish_call("c", 1, publish_kind::put, many).error(), mc::errc::invalid_params));
    items[1].key.clear();
    CHECK(mc::is(encode_publish_call("c", 1, publish_kind::put, items).error(), mc::errc::invalid_params));
    items[1].key = std::string(65536, 'x');
    CHECK(mc::is(encode_publish_call("c", 1, publish_kind::put, items).error(), mc::errc::invalid_params));
  }

  TEST_CASE("malformed requests are refused whole") {
    std::mt19937_64 rng(9);
    auto items = random_items(5, rng);
    auto good = *encode_publish_call("node", 3, publish_kind::put, items);
    // Every cut, and one byte too many.
    for (std::size_t n = 0; n < good.size(); ++n)
      CHECK(mc::is(decode_publish_call(std::span(good).first(n)).error(), mc::errc::invalid_params));
    auto longer = good;
    longer.push_back(std::byte{0});
    CHECK(mc::is(decode_publish_call(longer).error(), mc::errc::invalid_params));
    auto with = [&](std::size_t at, std::uint8_t v) {
      auto b = good;
      b[at] = std::byte{v};
      return decode_publish_call(b);
    };
    CHECK_FALSE(with(0, 1).has_value());      // another call kind
    CHECK_FALSE(with(1, 2).has_value());      // an unknown flag
    CHECK_FALSE(with(2, 0).has_value());      // client id length 0 (low byte; the id is 4 bytes)
    CHECK_FALSE(with(4, 0).has_value());      // item count 0
    CHECK_FALSE(with(4, 6).has_value());      // more items than the bytes hold
    CHECK_FALSE(with(7, 0xFF).has_value());   // a huge count: refused before anything is reserved
    CHECK_FALSE(with(20, 0).has_value());     // the first key's length 0 (header 16 + id 4)
    CHECK_FALSE(with(20, 0xFF).has_value());  // the first key's length past the end
    CHECK(with(1, 1).has_value());            // the republish flag is the one flag
    CHECK(with(1, 1)->kind == publish_kind::republish);
  }

  TEST_CASE("answers: exact size and count, known codes, unknown codes as rpc_fail") {
    std::vector<mc::result<void>> outcomes{mc::result<void>{}, mc::fail(mc::errc::superseded),
                                           mc::fail(mc::errc::invalid_version), mc::fail(mc::errc::client_not_found)};
    auto a = encode_publish_answer(outcomes);
    CHECK(a.size() == publish_answer_size(outcomes.size()));
    auto d = decode_publish_answer(a, outcomes.size());
    REQUIRE(d.has_value());
    REQUIRE(d->size() == outcomes.size());
    CHECK((*d)[0].has_value());
    CHECK(mc::is((*d)[1].error(), mc::errc::superseded));
    CHECK(mc::is((*d)[2].error(), mc::errc::invalid_version));
    CHECK(mc::is((*d)[3].error(), mc::errc::client_not_found));
    CHECK(mc::is(decode_publish_answer(a, outcomes.size() + 1).error(), mc::errc::rpc_fail));
    CHECK(mc::is(decode_publish_answer(std::span(a).first(a.size() - 1), outcomes.size()).error(), mc::errc::rpc_fail));
    auto wrong_count = a;
    wrong_count[0] = std::byte{3};
    CHECK(mc::is(decode_publish_answer(wrong_count, outcomes.size()).error(), mc::errc::rpc_fail));
    auto unknown = a;
    unknown[4] = std::byte{0x7B};  // 123: no mc code
    auto u = decode_publish_answer(unknown, outcomes.size());
    REQUIRE(u.has_value());
    CHECK(mc::is((*u)[0].error(), mc::errc::rpc_fail));
  }
}
