// Small-value writes as TransferEngine calls (client_put.cpp write_wave,
// small_write_wire.hpp): inline-only waves go as calls (split at the call's
// request bound), the RPC otherwise; exact bytes at the inline threshold's
// edges; the RPC when the owner serves no calls (remembered); a call sent
// twice is the same copy; hostile requests and replies fail clearly and
// leave every stored value intact.
#include "../../lib/store/src/small_write_wire.hpp"
#include "mc/store/client.hpp"
#include "mc/store/peer_client.hpp"
#include "mc/tiered/tiered_backend.hpp"
#include "mc/transfer/engine.hpp"
#include "store_fixture.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

using mc::test::bytes_of;
using mc::test::cluster;
using mc::test::get;
using mc::test::random_bytes;
using mc::test::writable;
namespace sw = mc::store::detail::small_write;
using namespace std::chrono_literals;

namespace {

using const_pieces = std::vector<std::span<const std::byte>>;

mc::task<std::vector<mc::result<void>>> batch_put(mc::store::client& c, std::vector<std::string> keys,
                                                  std::vector<const_pieces> values) {
  mc::store::put_options o;
  o.where = mc::store::placement::remote;  // the master's route: the other node
  co_return co_await c.batch_put_parts(std::move(keys), std::move(values), std::move(o));
}

/// `key`'s value read on `node` equals `want` (and nothing past it is written).
void check_value(cluster& cl, int node, mc::store::client& c, const std::string& key,
                 const std::vector<std::uint8_t>& want) {
  std::vector<std::uint8_t> out(want.size() + 5, 0x5C);
  auto r = cl.on(node, get(c, key, out));
  REQUIRE_MESSAGE(r.has_value(), key);
  CHECK(*r == want.size());
  CHECK(std::equal(want.begin(), want.end(), out.begin()));
  CHECK(std::all_of(out.begin() + static_cast<std::ptrdiff_t>(want.size()), out.end(),
                    [](std::uint8_t x) { return x == 0x5C; }));
}

std::vector<std::byte> request_of(std::string_view key, const std::vector<std::uint8_t>& v, std::uint64_t version) {
  std::vector<std::span<const std::byte>> pieces{bytes_of(v)};
  std::vector<sw::value_out> one{{key, pieces, v.size(), 0, version}};
  auto req = sw::encode_request(one, 1000);
  REQUIRE(req);
  return *req;
}

}  // namespace

TEST_SUITE("write calls") {
  TEST_CASE("small remote puts are calls, byte-exact at the threshold's edges; larger waves the RPC") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    const auto t = b.options().inline_threshold;
    const std::vector<std::size_t> sizes{1, 4095, 4096, 4097, t - 1, t};
    std::vector<std::string> keys;
    std::vector<std::vector<std::uint8_t>> values;
    std::vector<const_pieces> pieces;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      keys.push_back("wc/" + std::to_string(sizes[i]));
      values.push_back(random_bytes(sizes[i], 10 + i));
    }
    for (auto& v : values) pieces.push_back({bytes_of(v)});
    auto before = b.stats();
    auto served = a.engine().stats().served_calls;
    auto r = cl.on(1, batch_put(b, keys, pieces));
    REQUIRE(r.size() == keys.size());
    for (std::size_t k = 0; k < r.size(); ++k) CHECK_MESSAGE(r[k].has_value(), keys[k]);
    auto after = b.stats();
    CHECK(after.write_calls - before.write_calls == 1);
    CHECK(after.inline_writes - before.inline_writes == keys.size());
    CHECK(a.engine().stats().served_calls - served == 1);
    for (std::size_t k = 0; k < keys.size(); ++k) {
      check_value(cl, 0, a, keys[k], values[k]);  // on the owner
      check_value(cl, 1, b, keys[k], values[k]);  // published: found through the master
    }

    // Values adding up to more than a call carries: several calls of one wave.
    keys.clear();
    values.clear();
    pieces.clear();
    for (std::size_t i = 0; i < 40; ++i) {
      keys.push_back("wc/many/" + std::to_string(i));
      values.push_back(random_bytes((60 << 10) + i, 100 + i));
    }
    for (auto& v : values) pieces.push_back({bytes_of(v)});
    before = b.stats();
    served = a.engine().stats().served_calls;
    r = cl.on(1, batch_put(b, keys, pieces));
    for (std::size_t k = 0; k < r.size(); ++k) CHECK_MESSAGE(r[k].has_value(), keys[k]);
    CHECK(b.stats().write_calls - before.write_calls == 1);
    CHECK(a.engine().stats().served_calls - served == 2);  // 40 x 60 KiB in calls of <= 2 MiB
    for (std::size_t k = 0; k < keys.size(); ++k) check_value(cl, 1, b, keys[k], values[k]);

    // Above the threshold: transferred, so the wave is an RPC.
    auto big = random_bytes(t + 1, 9);
    before = b.stats();
    r = cl.on(1, batch_put(b, {"wc/big"}, {{bytes_of(big)}}));
    REQUIRE(r[0]);
    CHECK(b.stats().write_calls == before.write_calls);
    CHECK(b.stats().batch_rpcs - before.batch_rpcs == 1);
    check_value(cl, 1, b, "wc/big", big);
  }

  TEST_CASE("an owner that serves no calls is written over the RPC, and the requester remembers it") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    a.engine().set_call_handler({});  // as a node from before calls, or with RPC authentication on
    for (int round = 0; round < 3; ++round) {
      auto v = random_bytes(3000 + static_cast<std::size_t>(round), static_cast<std::uint64_t>(round));
      auto before = b.stats();
      auto r = cl.on(1, batch_put(b, {"nc/k"}, {{bytes_of(v)}}));
      REQUIRE(r[0]);
      CHECK(b.stats().write_calls == before.write_calls);
      CHECK(b.stats().inline_writes - before.inline_writes == 1);  // inside the RPC request
      check_value(cl, 0, a, "nc/k", v);
    }
    // Asked once (refused: unsupported), then not again while remembered.
    CHECK(a.engine().stats().served_call_errors == 1);
    CHECK(a.engine().stats().served_calls == 0);
  }

  TEST_CASE("a write call sent twice is the same copy; an older version is superseded") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    auto v = random_bytes(5000, 3);
    const auto version = mc::tiered::wall_clock_version();
    auto req = request_of("twice/k", v, version);
    for (int i = 0; i < 2; ++i) {
      std::vector<std::byte> reply(sw::reply_bytes(1));
      auto n = cl.on(1, b.engine().call(a.transfer_endpoint(), req, reply, 5s));
      REQUIRE(n);
      REQUIRE(*n == 4);
      auto codes = sw::decode_reply(std::span<const std::byte>(reply).first(*n), 1);
      REQUIRE(codes);
      CHECK((*codes)[0] == 0);
    }
    check_value(cl, 1, b, "twice/k", v);
    // An older put of the key (its version taken earlier) does not replace it.
    auto old = random_bytes(5000, 4);
    auto stale = request_of("twice/k", old, version - 1000);
    std::vector<std::byte> reply(4);
    auto n = cl.on(1, b.engine().call(a.transfer_endpoint(), stale, reply, 5s));
    REQUIRE(n);
    auto codes = sw::decode_reply(std::span<const std::byte>(reply).first(*n), 1);
    REQUIRE(codes);
    CHECK((*codes)[0] == static_cast<std::int32_t>(mc::errc::superseded));
    check_value(cl, 0, a, "twice/k", v);
    check_value(cl, 1, b, "twice/k", v);
  }

  TEST_CASE("hostile write-call requests are refused whole; stored values stay intact") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    auto v = random_bytes(777, 2);
    REQUIRE(cl.on(1, batch_put(b, {"hw/k"}, {{bytes_of(v)}}))[0]);
    auto other = random_bytes(777, 5);
    auto good = request_of("hw/k", other, mc::tiered::wall_clock_version());
    std::vector<std::vector<std::byte>> bad;
    bad.push_back({std::byte{2}});  // shorter than the header
    auto wrong_kind = good;
    wrong_kind[0] = std::byte{7};
    bad.push_back(wrong_kind);
    auto flag = good;
    flag[1] = std::byte{1};
    bad.push_back(flag);
    auto zero_count = good;
    zero_count[2] = zero_count[3] = std::byte{0};
    bad.push_back(zero_count);
    auto more = good;
    more[2] = std::byte{2};  // says 2 values, carries 1
    bad.push_back(more);
    auto trailing = good;
    trailing.push_back(std::byte{0});
    bad.push_back(trailing);
    auto cut = good;
    cut.pop_back();  // the value one byte short
    bad.push_back(cut);
    const auto e = sw::header_bytes;  // the entry: u16 key length, u32 size, u64 tag, u64 version
    auto no_key = good;
    no_key[e] = no_key[e + 1] = std::byte{0};
    bad.push_back(no_key);
    auto long_key = good;
    long_key[e] = long_key[e + 1] = std::byte{0xFF};
    bad.push_back(long_key);
    auto zero_size = good;
    std::fill_n(zero_size.begin() + e + 2, 4, std::byte{0});
    bad.push_back(zero_size);
    auto huge_size = good;
    std::fill_n(huge_size.begin() + e + 2, 4, std::byte{0xFF});
    bad.push_back(huge_size);
    auto no_version = good;
    std::fill_n(no_version.begin() + e + 14, 8, std::byte{0});
    bad.push_back(no_version);
    auto served_errors = a.engine().stats().served_call_errors;
    for (auto& req : bad) {
      std::vector<std::byte> reply(64);
      auto r = cl.on(1, b.engine().call(a.transfer_endpoint(), req, reply, 5s));
      REQUIRE_FALSE(r);
      CHECK(mc::is(r.error(), mc::errc::invalid_params));
    }
    CHECK(a.engine().stats().served_call_errors - served_errors == bad.size());
    // Too little reply room for a code per value.
    std::vector<std::byte> small(3);
    auto r = cl.on(1, b.engine().call(a.transfer_endpoint(), good, small, 5s));
    REQUIRE_FALSE(r);
    CHECK(mc::is(r.error(), mc::errc::invalid_params));
    // Nothing above replaced the value.
    check_value(cl, 0, a, "hw/k", v);
    check_value(cl, 1, b, "hw/k", v);
  }

  TEST_CASE("hostile write-call replies fail the whole batch or the item") {
    mc::runtime::runtime rt(2);
    rt.start();
    mc::transfer::engine_options o;
    o.bind_host = "127.0.0.1";
    mc::transfer::engine owner(rt, o), requester(rt, o);
    REQUIRE(owner.start());
    REQUIRE(requester.start());
    std::atomic<int> mode{0};
    owner.set_call_handler([&mode](mc::transfer::call_request q) -> mc::task<mc::result<std::vector<std::byte>>> {
      auto req = sw::decode_request(q.payload);
      std::vector<std::byte> out;
      const auto n = req ? req->values.size() : 0;
      switch (mode.load()) {
        case 0:  // one code short
          for (std::size_t k = 0; k + 1 < n; ++k) sw::le::put<std::int32_t>(out, 0);
          break;
        case 1:  // a trailing byte: above the reply room, refused by the target's engine
          for (std::size_t k = 0; k < n; ++k) sw::le::put<std::int32_t>(out, 0);
          out.push_back(std::byte{0});
          break;
        case 3:  // nothing
          break;
        default:  // unknown codes: those items fail as rpc_fail; a known one passes through
          sw::le::put<std::int32_t>(out, -987654);
          for (std::size_t k = 1; k < n; ++k)
            sw::le::put<std::int32_t>(out, static_cast<std::int32_t>(mc::errc::overloaded));
      }
      co_return out;
    });
    mc::store::peer_client peers(5s);
    auto v = random_bytes(100, 1);
    std::vector<mc::store::peer_write> items(2);
    for (std::size_t k = 0; k < 2; ++k) {
      items[k].key = k == 0 ? "k0" : "k1";
      items[k].data.push_back(bytes_of(v));
      items[k].version = 12345;
    }
    REQUIRE(mc::store::peer_client::write_call_eligible(items));
    for (int m = 0; m < 4; ++m) {
      CAPTURE(m);
      mode = m;
      auto r = rt.block_on(peers.write_batch_call(requester, owner.endpoint(), items));
      if (m == 2) {
        REQUIRE(r);
        CHECK(mc::is((*r)[0].error(), mc::errc::rpc_fail));
        CHECK(mc::is((*r)[1].error(), mc::errc::overloaded));
      } else {
        REQUIRE_FALSE(r);
        CHECK_MESSAGE(mc::is(r.error(), m == 1 ? mc::errc::buffer_overflow : mc::errc::rpc_fail), r.error().message());
      }
    }
    // Not eligible: a transferred item, no version, an empty value.
    auto t = items;
    t[0].data.clear();
    t[0].src.push_back({});
    CHECK_FALSE(mc::store::peer_client::write_call_eligible(t));
    t = items;
    t[1].version = 0;
    CHECK_FALSE(mc::store::peer_client::write_call_eligible(t));
    t = items;
    t[0].data.clear();
    CHECK_FALSE(mc::store::peer_client::write_call_eligible(t));
    CHECK(mc::is(rt.block_on(peers.write_batch_call(requester, owner.endpoint(), t)).error(), mc::errc::unsupported));
    owner.stop();
    requester.stop();
  }
}
