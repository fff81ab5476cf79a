// The inference data path: batches grouped by owner (one RPC per owner),
// scatter-gather values, inline small values, bounded bytes in flight,
// group-committed publishes, batch_exists. Results per key, byte-exact.
#include "mc/store/client.hpp"
#include "mc/store/data_manager.hpp"
#include "mc/tiered/tiered_backend.hpp"
#include "pieces.hpp"
#include "store_fixture.hpp"

#include <algorithm>
#include <numeric>
#include <thread>

using mc::test::bytes_of;
using mc::test::cluster;
using mc::test::get;
using mc::test::put;
using mc::test::random_bytes;
using mc::test::writable;

namespace {

using mc::test::const_pieces;
using mc::test::gather;
using mc::test::mut_pieces;
using mc::test::random_pieces;
using mc::test::to_const;

mc::task<std::vector<mc::result<std::size_t>>> batch_get(mc::store::client& c, std::vector<std::string> keys,
                                                         std::vector<mut_pieces> pieces) {
  co_return co_await c.batch_get_parts(std::move(keys), std::move(pieces));
}
mc::task<std::vector<mc::result<void>>> batch_put(mc::store::client& c, std::vector<std::string> keys,
                                                  std::vector<const_pieces> values, mc::store::put_options o) {
  co_return co_await c.batch_put_parts(std::move(keys), std::move(values), std::move(o));
}
mc::task<std::vector<mc::result<bool>>> exists(mc::store::client& c, std::vector<std::string> keys) {
  co_return co_await c.batch_exists(std::move(keys));
}

mut_pieces one_piece(std::vector<std::uint8_t>& v) { return {writable(v)}; }

}  // namespace

TEST_SUITE("store batch") {
  TEST_CASE("a batch mixing local, remote, missing, too-small and bad keys across three nodes: one result each") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    auto& c = cl.add("c");
    auto small_a = random_bytes(1000, 1), big_a = random_bytes(3 * (1 << 20) + 5, 2);
    auto small_b = random_bytes(65'536, 3), big_b = random_bytes((1 << 20) + 7, 4), mine = random_bytes(77, 5);
    auto tight = random_bytes(5000, 6);
    REQUIRE(cl.on(0, put(a, "a/small", small_a)));
    REQUIRE(cl.on(0, put(a, "a/big", big_a)));
    REQUIRE(cl.on(0, put(a, "a/tight", tight)));
    REQUIRE(cl.on(1, put(b, "b/small", small_b)));
    REQUIRE(cl.on(1, put(b, "b/big", big_b)));
    REQUIRE(cl.on(2, put(c, "c/mine", mine)));
    std::vector<std::vector<std::uint8_t>> out{
        std::vector<std::uint8_t>(small_a.size()), std::vector<std::uint8_t>(big_a.size() + 9, 0xCD),
        std::vector<std::uint8_t>(small_b.size()), std::vector<std::uint8_t>(big_b.size()),
        std::vector<std::uint8_t>(mine.size()),    std::vector<std::uint8_t>(10),
        std::vector<std::uint8_t>(4999, 0xEE),     std::vector<std::uint8_t>(10)};
    std::vector<std::string> keys{"a/small", "a/big", "b/small", "b/big", "c/mine", "missing", "a/tight", ""};
    std::vector<mut_pieces> pieces;
    for (auto& o : out) pieces.push_back(one_piece(o));
    auto before = c.stats();
    auto r = cl.on(2, batch_get(c, keys, pieces));
    auto after = c.stats();
    REQUIRE(r.size() == keys.size());
    REQUIRE(r[0].has_value());
    CHECK(std::equal(small_a.begin(), small_a.end(), out[0].begin()));
    REQUIRE(r[1].has_value());
    CHECK(*r[1] == big_a.size());
    CHECK(std::equal(big_a.begin(), big_a.end(), out[1].begin()));
    CHECK(out[1][big_a.size()] == 0xCD);  // nothing past the value
    REQUIRE(r[2].has_value());
    CHECK(out[2] == small_b);
    REQUIRE(r[3].has_value());
    CHECK(out[3] == big_b);
    REQUIRE(r[4].has_value());
    CHECK(out[4] == mine);
    REQUIRE_FALSE(r[5].has_value());
    CHECK(mc::is(r[5].error(), mc::errc::object_not_found));
    REQUIRE_FALSE(r[6].has_value());
    CHECK(mc::is(r[6].error(), mc::errc::buffer_overflow));
    CHECK(std::all_of(out[6].begin(), out[6].end(), [](auto v) { return v == 0xEE; }));
    REQUIRE_FALSE(r[7].has_value());
    CHECK(mc::is(r[7].error(), mc::errc::invalid_key));
    // One RPC per owner (a and b), small values inline in the same round trip.
    CHECK(after.batch_rpcs - before.batch_rpcs == 2);
    CHECK(after.inline_reads - before.inline_reads == 2);
    CHECK(after.local_hits - before.local_hits == 1);
    // Nothing else changed: the owners still serve every value.
    std::vector<std::uint8_t> again(big_b.size());
    auto r2 = cl.on(0, batch_get(a, {"b/big"}, {one_piece(again)}));
    REQUIRE(r2[0].has_value());
    CHECK(again == big_b);
  }

  TEST_CASE("scatter-gather round trips with random piece sizes, in any memory order, local and remote") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    auto& c = cl.add("c", {}, "tcp");
    std::uint64_t seed = 100;
    for (std::size_t n : {1ul, 4095ul, 65'537ul, 2'000'003ul}) {
      auto v = random_bytes(n, seed++);
      auto src = v;  // pieces point into a copy: gathered in a shuffled order
      auto src_pieces = random_pieces(src, 40'000, seed++);
      // The value is the pieces' concatenation: write the value into them in that order.
      std::size_t at = 0;
      for (auto& p : src_pieces)
        for (auto& byte : p) byte = static_cast<std::byte>(v[at++]);
      auto key = mc::test::numbered("sg/", n);
      // Local put gathered on a; remote put gathered from a into b.
      REQUIRE(cl.on(0, batch_put(a, {key}, {to_const(src_pieces)}, {}))[0]);
      mc::store::put_options remote;
      remote.where = mc::store::placement::remote;
      remote.target = b.rpc_endpoint();
      REQUIRE(cl.on(0, batch_put(a, {key + "/r"}, {to_const(src_pieces)}, remote))[0]);
      for (const auto& k : {key, key + "/r"}) {
        std::vector<std::uint8_t> dst(n + 3, 0x5A);
        auto dst_pieces = random_pieces(dst, 30'000, seed++);
        auto r = cl.on(2, batch_get(c, {k}, {dst_pieces}));
        REQUIRE_MESSAGE(r[0].has_value(), k << ": " << r[0].error().message());
        CHECK(*r[0] == n);
        auto got = gather(dst_pieces, n);
        CHECK(mc::test::checksum(got.data(), n) == mc::test::checksum(v.data(), n));
        CHECK(got == v);
      }
      // Local scatter on the holder.
      std::vector<std::uint8_t> dst(n, 0);
      auto dst_pieces = random_pieces(dst, 7000, seed++);
      auto r = cl.on(0, batch_get(a, {key}, {dst_pieces}));
      REQUIRE(r[0].has_value());
      CHECK(gather(dst_pieces, n) == v);
    }
    // Pieces holding one byte less than the value fail that key only.
    auto v = random_bytes(100'001, 9);
    REQUIRE(cl.on(0, put(a, "short", v)));
    REQUIRE(cl.on(0, put(a, "fine", v)));
    std::vector<std::uint8_t> s1(50'000, 1), s2(50'000, 2), ok(100'001);
    auto r = cl.on(2, batch_get(c, {"short", "fine"}, {{writable(s1), writable(s2)}, one_piece(ok)}));
    REQUIRE_FALSE(r[0].has_value());
    CHECK(mc::is(r[0].error(), mc::errc::buffer_overflow));
    CHECK(std::all_of(s1.begin(), s1.end(), [](auto x) { return x == 1; }));
    REQUIRE(r[1].has_value());
    CHECK(ok == v);
  }

  TEST_CASE(
      "the inline threshold: threshold - 1 and threshold come back inside the reply, threshold + 1 is transferred") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    const auto t = b.options().inline_threshold;
    REQUIRE(t == 64 * 1024);
    for (std::size_t n : {t - 1, t, t + 1}) {
      auto v = random_bytes(n, n);
      auto key = mc::test::numbered("inl/", n);
      REQUIRE(cl.on(0, put(a, key, v)));
      std::vector<std::uint8_t> out(n + 1, 0x11);
      auto before = b.stats();
      auto served_before = a.data().stats();
      auto r = cl.on(1, batch_get(b, {key}, {one_piece(out)}));
      auto after = b.stats();
      auto served_after = a.data().stats();
      REQUIRE(r[0].has_value());
      // The owner counts the read it served, inline or transferred, and
      // the batch it came in (one, whichever way it travelled).
      CHECK(served_after.remote_reads - served_before.remote_reads == 1);
      CHECK(served_after.read_batches - served_before.read_batches == 1);
      CHECK(served_after.remote_read_bytes - served_before.remote_read_bytes == n);
      CHECK(std::equal(v.begin(), v.end(), out.begin()));
      CHECK(out[n] == 0x11);
      CHECK(after.inline_reads - before.inline_reads == (n <= t ? 1u : 0u));
      CHECK(after.batch_rpcs - before.batch_rpcs == 1);
    }
    // Remote puts of small values travel inside the request.
    auto v = random_bytes(t, 5);
    mc::store::put_options remote;
    remote.where = mc::store::placement::remote;
    remote.target = a.rpc_endpoint();
    auto before = b.stats();
    REQUIRE(cl.on(1, batch_put(b, {"inl/put"}, {{bytes_of(v)}}, remote))[0]);
    CHECK(b.stats().inline_writes - before.inline_writes == 1);
    std::vector<std::uint8_t> out(t);
    REQUIRE(cl.on(0, batch_get(a, {"inl/put"}, {one_piece(out)}))[0]);
    CHECK(out == v);
  }

  TEST_CASE("a batch whose owner is gone: the other owner's keys still succeed, the dead owner's fail") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    auto& c = cl.add("c");
    auto va = random_bytes(300'000, 1), vb = random_bytes(300'000, 2);
    REQUIRE(cl.on(0, put(a, "on-a", va)));
    REQUIRE(cl.on(1, put(b, "on-b", vb)));
    std::vector<std::uint8_t> oa(va.size()), ob(vb.size());
    auto warm = cl.on(2, batch_get(c, {"on-a", "on-b"}, {one_piece(oa), one_piece(ob)}));  // routes cached
    REQUIRE(warm[0].has_value());
    REQUIRE(warm[1].has_value());
    b.stop();
    std::fill(oa.begin(), oa.end(), 0);
    auto r = cl.on(2, batch_get(c, {"on-a", "on-b", "on-a"}, {one_piece(oa), one_piece(ob), one_piece(oa)}));
    REQUIRE(r[0].has_value());
    CHECK(oa == va);
    CHECK_FALSE(r[1].has_value());
    REQUIRE(r[2].has_value());  // a duplicate key is an independent item
  }

  TEST_CASE("bounded bytes in flight: a batch larger than the cap waits for room and stays byte-exact") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b", {}, "auto", [](mc::store::client_options& o) { o.max_inflight_bytes = 3 << 20; });
    std::vector<std::string> keys;
    std::vector<std::vector<std::uint8_t>> vals, outs;
    for (int i = 0; i < 12; ++i) {
      vals.push_back(random_bytes((1 << 20) + 13 * static_cast<std::size_t>(i), 40 + static_cast<std::uint64_t>(i)));
      keys.push_back(mc::test::numbered("cap/", static_cast<std::size_t>(i)));
      REQUIRE(cl.on(0, put(a, keys.back(), vals.back())));
      outs.emplace_back(vals.back().size());
    }
    vals.push_back(random_bytes((5 << 20) + 1, 99));  // one value larger than the cap runs alone
    keys.push_back("cap/big");
    REQUIRE(cl.on(0, put(a, keys.back(), vals.back())));
    outs.emplace_back(vals.back().size());
    std::vector<mut_pieces> pieces;
    for (auto& o : outs) pieces.push_back(one_piece(o));
    auto before = b.stats();
    auto r = cl.on(1, batch_get(b, keys, pieces));
    for (std::size_t i = 0; i < keys.size(); ++i) {
      REQUIRE_MESSAGE(r[i].has_value(), keys[i]);
      CHECK(outs[i] == vals[i]);
    }
    CHECK(b.stats().batch_rpcs - before.batch_rpcs >= 5);  // split into waves under the cap
  }

  TEST_CASE("a remote batch put mixing inline, transferred, scattered and duplicate items: one RPC, one result each") {
    // The owner moves every transferred item of the batch in one transfer
    // batch and commits them together; inline items are stored on the way.
    for (const char* transport : {"auto", "tcp"}) {
      CAPTURE(transport);
      cluster cl;
      auto& a = cl.add("a", {}, transport);
      auto& b = cl.add("b", {}, transport);
      const auto t = b.options().inline_threshold;
      std::vector<std::size_t> sizes = {1, t - 1, t, t + 1, (1u << 20) + 3, 3 * t + 7, 5};
      std::vector<std::string> keys;
      std::vector<std::vector<std::uint8_t>> vals;
      std::vector<const_pieces> pieces;
      std::vector<std::vector<std::uint8_t>> bufs(sizes.size() + 1);
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        keys.push_back(std::string("mix/") + transport + "/" + std::to_string(i));
        bufs[i] = random_bytes(sizes[i], 100 + i);
        auto mp = random_pieces(bufs[i], sizes[i] / 3 + 1, i);  // value order != memory order
        vals.push_back(gather(mp, sizes[i]));
        pieces.push_back(to_const(mp));
      }
      // The same key twice: independent items, both succeed; either may win.
      keys.push_back(keys[4]);
      vals.push_back(random_bytes(sizes[4], 999));
      bufs.back() = vals.back();
      pieces.push_back({bytes_of(bufs.back())});
      mc::store::put_options remote;
      remote.where = mc::store::placement::remote;
      remote.target = a.rpc_endpoint();
      auto before = b.stats();
      auto served_before = a.data().stats();
      const auto started = std::chrono::steady_clock::now();
      auto r = cl.on(1, batch_put(b, keys, pieces, remote));
      const auto took = static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count());
      REQUIRE(r.size() == keys.size());
      for (auto& x : r) CHECK(x.has_value());
      CHECK(b.stats().batch_rpcs - before.batch_rpcs == 1);
      CHECK(b.stats().inline_writes - before.inline_writes == 4);  // 1, t - 1, t, 5
      auto served = a.data().stats();
      CHECK(served.remote_writes - served_before.remote_writes == 4);
      // The transferred items were one served write batch; its stages took
      // time (a pull of > 1 MiB, a publish to the master), all of it inside
      // the requester's call.
      CHECK(served.write_batches - served_before.write_batches == 1);
      const auto pull = served.write_batch_transfer_ns - served_before.write_batch_transfer_ns;
      const auto commit = served.write_batch_commit_ns - served_before.write_batch_commit_ns;
      const auto prepare = served.write_batch_prepare_ns - served_before.write_batch_prepare_ns;
      CHECK(pull > 0);
      CHECK(commit > 0);
      CHECK(prepare + pull + commit <= took);
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        CAPTURE(i);
        std::vector<std::uint8_t> out(sizes[i] + 1, 0x5A);
        auto g = cl.on(0, batch_get(a, {keys[i]}, {one_piece(out)}));
        REQUIRE(g[0].has_value());
        CHECK(*g[0] == sizes[i]);
        out.pop_back();
        if (i == 4)
          CHECK((out == vals[4] || out == vals.back()));
        else
          CHECK(out == vals[i]);
      }
    }
  }

  TEST_CASE("batch puts publish in group commits; batch_exists is one lookup; too many keys are refused") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    std::vector<std::string> keys;
    std::vector<std::vector<std::uint8_t>> vals;
    std::vector<const_pieces> pieces;
    for (int i = 0; i < 64; ++i) {
      keys.push_back(mc::test::numbered("gc/", static_cast<std::size_t>(i)));
      vals.push_back(random_bytes(4096 + static_cast<std::size_t>(i), static_cast<std::uint64_t>(i)));
    }
    for (auto& v : vals) pieces.push_back({bytes_of(v)});
    auto before = a.stats();
    auto r = cl.on(0, batch_put(a, keys, pieces, {}));
    for (auto& x : r) REQUIRE(x.has_value());
    auto after = a.stats();
    CHECK(after.publishes - before.publishes == 64);
    CHECK(after.publish_batches - before.publish_batches == 1);  // one master call (group commit)
    auto probe = keys;
    probe.push_back("gc/none");
    probe.push_back("");
    auto e = cl.on(1, exists(b, probe));
    REQUIRE(e.size() == 66);
    for (int i = 0; i < 64; ++i) {
      REQUIRE(e[static_cast<std::size_t>(i)].has_value());
      CHECK(*e[static_cast<std::size_t>(i)]);
    }
    REQUIRE(e[64].has_value());
    CHECK_FALSE(*e[64]);
    CHECK_FALSE(e[65].has_value());
    // More than max_batch_keys: every key is refused, nothing is read.
    auto& c = cl.add("c", {}, "auto", [](mc::store::client_options& o) { o.max_batch_keys = 2; });
    std::vector<std::uint8_t> o1(10), o2(10), o3(10);
    auto refused = cl.on(2, batch_get(c, {"gc/0", "gc/1", "gc/2"}, {one_piece(o1), one_piece(o2), one_piece(o3)}));
    for (auto& x : refused) CHECK((!x.has_value() && mc::is(x.error(), mc::errc::invalid_params)));
  }

  TEST_CASE("SSD-resident values in a batch stream through double-buffered staging, byte-exact") {
    cluster cl;
    auto& a = cl.add("a", R"({"tiers":[{"type":"SSD","capacity":"96MiB","priority":10,"path":"@DIR@"}]})");
    auto& b = cl.add("b");
    std::vector<std::string> keys;
    std::vector<std::vector<std::uint8_t>> vals, outs;
    for (std::size_t n : {std::size_t{9 * (1 << 20) + 4097}, std::size_t{4 << 20}, std::size_t{70'001}}) {
      keys.push_back(mc::test::numbered("ssd/", n));
      vals.push_back(random_bytes(n, n));
      REQUIRE(cl.on(0, put(a, keys.back(), vals.back())));
      outs.emplace_back(n);
    }
    REQUIRE(a.backend().get(keys[0])->tier() == mc::tiered::tier_type::ssd);
    std::vector<mut_pieces> pieces;
    for (auto& o : outs) pieces.push_back(one_piece(o));
    auto r = cl.on(1, batch_get(b, keys, pieces));
    for (std::size_t i = 0; i < keys.size(); ++i) {
      REQUIRE_MESSAGE(r[i].has_value(), keys[i] << ": " << r[i].error().message());
      CHECK(mc::test::checksum(outs[i].data(), outs[i].size()) == mc::test::checksum(vals[i].data(), vals[i].size()));
    }
  }

  TEST_CASE("an owner over its serving cap makes items wait for room instead of refusing them") {
    cluster cl;
    auto& a = cl.add("a", {}, "auto", [](mc::store::client_options& o) { o.limits.max_serving_bytes = 2 << 20; });
    auto& b = cl.add("b");
    auto& c = cl.add("c", {}, "tcp");
    std::vector<std::string> keys;
    std::vector<std::vector<std::uint8_t>> vals;
    for (int i = 0; i < 8; ++i) {
      keys.push_back(mc::test::numbered("srv/", static_cast<std::size_t>(i)));
      vals.push_back(random_bytes((1 << 20) + static_cast<std::size_t>(i) * 101, 300 + static_cast<std::uint64_t>(i)));
      REQUIRE(cl.on(0, put(a, keys.back(), vals.back())));
    }
    vals.push_back(random_bytes(3 << 20, 399));  // larger than the cap: runs alone
    keys.push_back("srv/big");
    REQUIRE(cl.on(0, put(a, keys.back(), vals.back())));
    auto reader = [&](std::size_t node, mc::store::client& cli) {
      std::vector<std::vector<std::uint8_t>> outs;
      std::vector<mut_pieces> pieces;
      for (auto& v : vals) outs.emplace_back(v.size());
      for (auto& o : outs) pieces.push_back(one_piece(o));
      auto r = cl.on(node, batch_get(cli, keys, pieces));
      for (std::size_t i = 0; i < keys.size(); ++i) {  // CHECK: this runs on two threads
        CHECK_MESSAGE(r[i].has_value(), keys[i]);
        if (r[i]) CHECK(outs[i] == vals[i]);
      }
    };
    std::thread other([&] { reader(2, c); });
    reader(1, b);
    other.join();
    CHECK(a.stats().service_overloaded == 0);
  }

  TEST_CASE("gets into memory the caller registered use tokens derived from that registration") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b", {}, "tcp");
    auto v = random_bytes(300'007, 8);
    REQUIRE(cl.on(0, put(a, "reg/k", v)));
    std::vector<std::uint8_t> mem(1 << 20, 0);
    auto reg = b.register_buffer(writable(mem));
    REQUIRE(reg.has_value());
    auto regions0 = b.engine().stats().registered_regions;
    auto derived0 = b.engine().stats().derived_registrations;
    mut_pieces into{std::span<std::byte>(reinterpret_cast<std::byte*>(mem.data()) + 4096, v.size())};
    auto r = cl.on(1, batch_get(b, {"reg/k"}, {into}));
    REQUIRE(r[0].has_value());
    CHECK(std::equal(v.begin(), v.end(), mem.begin() + 4096));
    CHECK(b.engine().stats().derived_registrations == derived0 + 1);
    CHECK(b.engine().stats().registered_regions == regions0);  // the child is gone again
  }

  TEST_CASE("scattered gets and gathered puts inside one registered buffer take one derived token per key") {
    // The vLLM shape: a value's pieces strided through a registered pool
    // (one per layer), here of unequal sizes with gaps, in a shuffled order.
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b", {}, "tcp");
    auto v = random_bytes(300'007, 18);
    REQUIRE(cl.on(0, put(a, "sg-reg/k", v)));
    std::vector<std::uint8_t> mem(1 << 20, 0xAB);
    auto reg = b.register_buffer(writable(mem));
    REQUIRE(reg.has_value());
    auto* base = reinterpret_cast<std::byte*>(mem.data());
    mut_pieces into;
    std::size_t left = v.size(), at = 100;
    for (std::size_t i = 0; left > 0; ++i) {
      const auto n = std::min<std::size_t>(left, 4000 + (i * 7919) % 9000);
      into.emplace_back(base + at, n);
      left -= n;
      at += n + 1 + (i * 131) % 3000;  // a gap of 1 .. 3000 bytes
    }
    REQUIRE(at < mem.size());
    REQUIRE(into.size() > 20);
    std::rotate(into.begin(), into.begin() + 7, into.end());  // pieces need not be in address order
    const auto regions0 = b.engine().stats().registered_regions;
    const auto derived0 = b.engine().stats().derived_registrations;
    auto r = cl.on(1, batch_get(b, {"sg-reg/k"}, {into}));
    REQUIRE(r[0].has_value());
    CHECK(*r[0] == v.size());
    CHECK(gather(into, v.size()) == v);
    CHECK(b.engine().stats().derived_registrations == derived0 + 1);  // not one per piece
    CHECK(b.engine().stats().registered_regions == regions0);
    // The gaps are untouched.
    std::vector<bool> inside(mem.size(), false);
    for (auto& p : into)
      for (std::size_t k = 0; k < p.size(); ++k) inside[static_cast<std::size_t>(p.data() - base) + k] = true;
    std::size_t touched = 0;
    for (std::size_t k = 0; k < mem.size(); ++k)
      if (!inside[k] && mem[k] != 0xAB) ++touched;
    CHECK(touched == 0);
    // Gathered from the same pieces into a new key stored on a (a pulls
    // them with one token), read back there.
    mc::store::put_options remote;
    remote.where = mc::store::placement::remote;
    remote.target = a.rpc_endpoint();
    auto w = cl.on(1, batch_put(b, {"sg-reg/k2"}, {to_const(into)}, remote));
    REQUIRE(w[0].has_value());
    CHECK(b.engine().stats().derived_registrations == derived0 + 2);
    CHECK(b.engine().stats().registered_regions == regions0);
    std::vector<std::uint8_t> back(v.size());
    auto g = cl.on(0, batch_get(a, {"sg-reg/k2"}, {one_piece(back)}));
    REQUIRE(g[0].has_value());
    CHECK(back == v);
    // Pieces in two registrations: one derived token per piece, still exact.
    std::vector<std::uint8_t> mem2(1 << 19, 0);
    auto reg2 = b.register_buffer(writable(mem2));
    REQUIRE(reg2.has_value());
    mut_pieces split{std::span<std::byte>(base + 50, 1000),
                     std::span<std::byte>(reinterpret_cast<std::byte*>(mem2.data()) + 3, v.size() - 1000)};
    const auto derived1 = b.engine().stats().derived_registrations;
    auto r2 = cl.on(1, batch_get(b, {"sg-reg/k"}, {split}));
    REQUIRE(r2[0].has_value());
    CHECK(gather(split, v.size()) == v);
    CHECK(b.engine().stats().derived_registrations == derived1 + 2);
  }

  TEST_CASE("values put from and got into allocate_buffer memory move through the owner's mapping (same-host)") {
    cluster cl;
    auto& a = cl.add("a", {}, "same_host");
    auto& b = cl.add("b", {}, "same_host");
    const std::size_t size = (6u << 20) + 4099;
    auto buf = b.allocate_buffer(size);
    REQUIRE(buf.has_value());
    auto* base = buf->data();
    mc::store::put_options remote;
    remote.where = mc::store::placement::remote;
    remote.target = a.rpc_endpoint();
    // Sizes around the inline threshold and above a slice, none a multiple
    // of anything; each value gathered from 1 .. 5 pieces strided through
    // the buffer, then scattered back elsewhere in it.
    std::size_t at = 17;
    const std::size_t sizes[] = {1, 65535, 65537, 300'007, (1u << 20) + 3, (2u << 20) - 5};
    for (std::size_t i = 0; i < std::size(sizes); ++i) {
      const auto n = sizes[i];
      CAPTURE(n);
      auto v = random_bytes(n, 40 + i);
      const std::size_t parts = 1 + i % 5;
      auto cut = [&](std::size_t from) {
        mut_pieces ps;
        std::size_t left = n, p = from;
        for (std::size_t k = 0; k < parts && left > 0; ++k) {
          const auto len = k + 1 == parts ? left : std::max<std::size_t>(1, n / parts);
          ps.emplace_back(base + p, std::min(len, left));
          p += ps.back().size() + 13;
          left -= ps.back().size();
        }
        return std::pair{ps, p};
      };
      auto [src, end1] = cut(at);
      std::size_t k = 0;
      for (auto& p : src) {
        std::memcpy(p.data(), v.data() + k, p.size());
        k += p.size();
      }
      const std::string key = "shared/" + std::to_string(i);
      auto w = cl.on(1, batch_put(b, {key}, {to_const(src)}, remote));  // a pulls from b's shared memory
      REQUIRE(w[0].has_value());
      auto [dst, end2] = cut(end1 + 101);
      REQUIRE(end2 < size);
      auto r = cl.on(1, batch_get(b, {key}, {dst}));  // a pushes into b's shared memory
      REQUIRE(r[0].has_value());
      CHECK(*r[0] == n);
      CHECK(gather(dst, n) == v);
      std::vector<std::uint8_t> back(n);
      auto g = cl.on(0, batch_get(a, {key}, {one_piece(back)}));
      REQUIRE(g[0].has_value());
      CHECK(back == v);
      at = (end2 + 7) % (size / 4);
    }
    // The owner mapped b's memory (once; twice if two of its threads missed
    // it at the same moment) and copied through it; b passed its memfd that
    // often.
    const auto sa = a.engine().stats();
    CHECK(sa.shared_mappings >= 1);
    CHECK(sa.shared_mappings <= 2);
    CHECK(sa.shared_copies > 0);
    CHECK(b.engine().stats().shared_maps_served == sa.shared_mappings);
  }

  TEST_CASE("a batch of more keys than an owner admits per connection is sent in waves, never refused") {
    cluster cl;
    auto& a = cl.add("a");
    auto& b = cl.add("b");
    const std::size_t n = 2500;  // > max_inflight_keys_per_connection (1024)
    std::vector<std::string> keys;
    std::vector<std::vector<std::uint8_t>> vals, outs;
    std::vector<const_pieces> srcs;
    for (std::size_t i = 0; i < n; ++i) {
      keys.push_back(mc::test::numbered("many/", i));
      vals.push_back(random_bytes(100 + i % 7, i));
      outs.emplace_back(107);
    }
    for (auto& v : vals) srcs.push_back({bytes_of(v)});
    auto put = cl.on(0, batch_put(a, keys, srcs, {}));
    for (auto& r : put) REQUIRE(r.has_value());
    std::vector<mut_pieces> pieces;
    for (auto& o : outs) pieces.push_back(one_piece(o));
    auto before = b.stats();
    auto r = cl.on(1, batch_get(b, keys, pieces));
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE_MESSAGE(r[i].has_value(), keys[i] << ": " << r[i].error().message());
      CHECK(std::equal(vals[i].begin(), vals[i].end(), outs[i].begin()));
    }
    CHECK(b.stats().batch_rpcs - before.batch_rpcs == 3);
    CHECK(a.stats().service_overloaded == 0);
  }
}
