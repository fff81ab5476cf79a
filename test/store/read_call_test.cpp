// Small-value reads as TransferEngine calls (client_batch.cpp read_wave,
// small_read_wire.hpp): one call per owner for inline-only waves, the RPC
// otherwise; exact bytes at the inline threshold's edges; the RPC when the
// owner serves no calls (remembered); hostile requests and replies on both
// ends fail clearly and leave everything else intact.
#include "../../lib/store/src/small_read_wire.hpp"
#include "mc/store/client.hpp"
#include "mc/store/peer_client.hpp"
#include "mc/transfer/engine.hpp"
#include "store_fixture.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

using mc::test::bytes_of;
using mc::test::cluster;
using mc::test::get;
using mc::test::put;
using mc::test::random_bytes;
using mc::test::writable;
namespace sr = mc::store::detail::small_read;
using namespace std::chrono_literals;

namespace {

mc::task<std::vector<mc::result<std::size_t>>> batch_get(mc::store::client& c, std::vector<std::string> keys,
                                                         std::vector<std::span<std::byte>> bufs) {
  co_return co_await c.batch_get(std::move(keys), std::move(bufs));
}

}  // namespace

TEST_SUITE("read calls") {
  TEST_CASE("inline-only batches are one call per owner, byte-exact at the threshold's edges; larger ones the RPC") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    auto& c = cl.add("c");
    const auto t = b.options().inline_threshold;
    const std::vector<std::size_t> sizes{1, 4095, 4096, 4097, t - 1, t};
    std::vector<std::string> keys;
    std::vector<std::vector<std::uint8_t>> values;
    for (std::size_t i = 0; i < sizes.size(); ++i)
      for (int owner : {0, 2}) {
        keys.push_back("rc/" + std::to_string(owner) + "/" + std::to_string(sizes[i]));
        values.push_back(random_bytes(sizes[i], 100 * i + static_cast<std::size_t>(owner)));
        REQUIRE(cl.on(owner, put(owner == 0 ? a : c, keys.back(), values.back())));
      }
    keys.push_back("rc/missing");
    values.emplace_back();
    std::vector<std::vector<std::uint8_t>> out(keys.size());
    std::vector<std::span<std::byte>> bufs;
    for (std::size_t k = 0; k < keys.size(); ++k) {
      out[k].assign(values[k].size() + 7, 0x5C);
      bufs.push_back(writable(out[k]));
    }
    auto before = b.stats();
    auto served_a = a.engine().stats().served_calls, served_c = c.engine().stats().served_calls;
    auto r = cl.on(1, batch_get(b, keys, bufs));
    auto after = b.stats();
    for (std::size_t k = 0; k + 1 < keys.size(); ++k) {
      REQUIRE_MESSAGE(r[k].has_value(), keys[k]);
      CHECK(*r[k] == values[k].size());
      CHECK(std::equal(values[k].begin(), values[k].end(), out[k].begin()));
      CHECK(std::all_of(out[k].begin() + static_cast<std::ptrdiff_t>(values[k].size()), out[k].end(),
                        [](std::uint8_t x) { return x == 0x5C; }));
    }
    CHECK(mc::is(r.back().error(), mc::errc::object_not_found));
    CHECK(after.read_calls - before.read_calls == 2);  // one per owner
    CHECK(after.batch_rpcs - before.batch_rpcs == 2);
    CHECK(after.inline_reads - before.inline_reads == keys.size() - 1);
    CHECK(a.engine().stats().served_calls == served_a + 1);
    CHECK(c.engine().stats().served_calls == served_c + 1);

    // Above the threshold: transferred, so the wave (one owner, one key) is an RPC.
    auto big = random_bytes(t + 1, 9);
    REQUIRE(cl.on(0, put(a, "rc/big", big)));
    std::vector<std::uint8_t> got(t + 1);
    before = b.stats();
    auto g = cl.on(1, batch_get(b, {"rc/big"}, {writable(got)}));
    REQUIRE(g[0].has_value());
    CHECK(got == big);
    CHECK(b.stats().read_calls == before.read_calls);
    CHECK(b.stats().batch_rpcs - before.batch_rpcs == 1);
  }

  TEST_CASE("an owner that serves no calls is read over the RPC, and the requester remembers it") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    auto v = random_bytes(3000, 1);
    REQUIRE(cl.on(0, put(a, "nc/k", v)));
    a.engine().set_call_handler({});  // as a node from before calls, or with RPC authentication on
    for (int round = 0; round < 3; ++round) {
      std::vector<std::uint8_t> out(3000);
      auto before = b.stats();
      auto r = cl.on(1, b.get("nc/k", writable(out)));
      REQUIRE(r);
      CHECK(out == v);
      CHECK(b.stats().read_calls == before.read_calls);
      CHECK(b.stats().inline_reads - before.inline_reads == 1);  // inside the RPC reply
    }
    // Asked once (refused: unsupported), then not again while remembered.
    CHECK(a.engine().stats().served_call_errors == 1);
    CHECK(a.engine().stats().served_calls == 0);
  }

  TEST_CASE("hostile read-call requests are refused whole; the owner keeps serving") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    auto v = random_bytes(777, 2);
    REQUIRE(cl.on(0, put(a, "hq/k", v)));
    auto call = [&](std::vector<std::byte> req, std::size_t cap) {
      std::vector<std::byte> reply(cap);
      return cl.on(1, b.engine().call(a.transfer_endpoint(), req, reply, 5s));
    };
    auto good = sr::encode_request(std::vector<sr::key_ask>{{"hq/k", 1000}}, 1000);
    REQUIRE(good);
    std::vector<std::vector<std::byte>> bad;
    bad.push_back({std::byte{1}});  // shorter than the header
    auto wrong_kind = *good;
    wrong_kind[0] = std::byte{2};
    bad.push_back(wrong_kind);
    auto zero_count = *good;
    zero_count[2] = zero_count[3] = std::byte{0};
    bad.push_back(zero_count);
    auto more_keys = *good;
    more_keys[2] = std::byte{2};  // says 2 keys, carries 1
    bad.push_back(more_keys);
    auto trailing = *good;
    trailing.push_back(std::byte{0});
    bad.push_back(trailing);
    auto long_key = *good;
    long_key[sr::header_bytes] = std::byte{0xFF};  // key length past the end
    bad.push_back(long_key);
    auto zero_inline = *good;
    std::fill_n(zero_inline.begin() + sr::header_bytes + 2, 4, std::byte{0});
    bad.push_back(zero_inline);
    for (auto& req : bad) {
      auto r = call(req, 4096);
      REQUIRE_FALSE(r);
      CHECK(mc::is(r.error(), mc::errc::invalid_params));
    }
    // A reply room below what the request may need is refused too.
    CHECK(mc::is(call(*good, 100).error(), mc::errc::invalid_params));
    // The well-formed one: an entry and the value.
    std::vector<std::byte> reply(sr::result_bytes + 1000);
    auto n = cl.on(1, b.engine().call(a.transfer_endpoint(), *good, reply, 5s));
    REQUIRE(n);
    CHECK(*n == sr::result_bytes + 777);
    CHECK(std::memcmp(reply.data() + sr::result_bytes, v.data(), 777) == 0);
    std::vector<std::uint8_t> out(777);
    REQUIRE(cl.on(1, b.get("hq/k", writable(out))));
    CHECK(out == v);
  }

  TEST_CASE("hostile read-call replies fail the call or the key; nothing is written past a value") {
    mc::runtime::runtime rt(2);
    rt.start();
    mc::transfer::engine_options o;
    o.bind_host = "127.0.0.1";
    mc::transfer::engine owner(rt, o), requester(rt, o);
    REQUIRE(owner.start());
    REQUIRE(requester.start());
    std::atomic<int> mode{0};
    owner.set_call_handler([&mode](mc::transfer::call_request q) -> mc::task<mc::result<std::vector<std::byte>>> {
      auto req = sr::decode_request(q.payload);
      std::vector<std::byte> out(req ? req->asks.size() * sr::result_bytes : 0);
      auto entry = [&](std::size_t k, std::int32_t code, std::uint64_t size) {
        for (std::size_t i = 0; i < 4; ++i)
          out[k * 12 + i] = static_cast<std::byte>(static_cast<std::uint32_t>(code) >> (8 * i));
        for (std::size_t i = 0; i < 8; ++i) out[k * 12 + 4 + i] = static_cast<std::byte>(size >> (8 * i));
      };
      // Two keys, inline_max 32 each: a reply of at most 24 + 64 bytes.
      switch (mode.load()) {
        case 0:  // a value larger than its key's inline_max (the reply still fits)
          entry(0, 0, 33);
          entry(1, static_cast<std::int32_t>(mc::errc::object_not_found), 0);
          out.resize(out.size() + 33, std::byte{0x77});
          break;
        case 1:  // fewer bytes than the entries announce
          entry(0, 0, 10);
          entry(1, 0, 10);
          out.resize(out.size() + 15);
          break;
        case 2:  // trailing bytes
          entry(0, 0, 4);
          entry(1, 0, 4);
          out.resize(out.size() + 9);
          break;
        case 3:  // unknown codes: those keys fail, as rpc_fail
          entry(0, -987654, 0);
          entry(1, 5, 0);
          break;
        default:  // no entries at all
          out.clear();
      }
      co_return out;
    });
    mc::store::peer_client peers(5s);
    for (int m = 0; m < 5; ++m) {
      mode = m;
      std::vector<std::uint8_t> buf(128, 0xAB);
      std::vector<mc::store::peer_read> items(2);
      for (std::size_t k = 0; k < 2; ++k) {
        items[k].key = k == 0 ? "k0" : "k1";
        items[k].inline_max = 32;
        items[k].local.push_back(std::span(reinterpret_cast<std::byte*>(buf.data()) + 64 * k, 32));
      }
      REQUIRE(mc::store::peer_client::call_eligible(items));
      auto r = rt.block_on(peers.read_batch_call(requester, owner.endpoint(), items));
      if (m == 3) {
        REQUIRE(r);
        CHECK(mc::is((*r)[0].value.error(), mc::errc::rpc_fail));
        CHECK(mc::is((*r)[1].value.error(), mc::errc::rpc_fail));
      } else {
        REQUIRE_FALSE(r);
        CHECK(mc::is(r.error(), mc::errc::rpc_fail));
      }
      CHECK(std::all_of(buf.begin(), buf.end(), [](std::uint8_t x) { return x == 0xAB; }));
    }
    owner.stop();
    requester.stop();
  }
}
