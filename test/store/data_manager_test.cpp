#include "mc/store/data_manager.hpp"
#include "mc/tiered/tiered_backend.hpp"
#include "mc/transfer/engine.hpp"
#include "store_parts.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

using namespace std::chrono_literals;
using mc::test::random_bytes;

namespace {
struct dm_fixture {
  mc::runtime::runtime rt{2};
  std::unique_ptr<mc::tiered::tiered_backend> backend;
  std::unique_ptr<mc::transfer::engine> owner_engine;   // node B (holds data)
  std::unique_ptr<mc::transfer::engine> reader_engine;  // node A (requester)
  std::unique_ptr<mc::store::data_manager> dm;
  dm_fixture() {
    rt.start();
    backend = mc::test::dram_backend(rt, "16MiB");
    const auto eo = mc::test::loopback_tcp_engine_options();
    owner_engine = std::make_unique<mc::transfer::engine>(rt, eo);
    reader_engine = std::make_unique<mc::transfer::engine>(rt, eo);
    REQUIRE(owner_engine->start());
    REQUIRE(reader_engine->start());
    dm = std::make_unique<mc::store::data_manager>(*backend, *owner_engine, 16);
  }
  ~dm_fixture() {
    dm.reset();
    owner_engine->stop();
    reader_engine->stop();
    rt.stop();
  }
};

/// Installs on `dm` a commit hook counting its calls and a batch commit hook
/// recording each call's values and failing `failing_key` with rpc_fail
/// (with short_answer set, it answers one result fewer than it was given).
/// Lives as long as dm's hooks can run.
struct hook_log {
  int single_calls = 0;
  std::vector<std::vector<mc::store::data_manager::committed_value>> calls;
  bool short_answer = false;
  std::string failing_key;

  hook_log(mc::store::data_manager& dm, std::string failing) : failing_key(std::move(failing)) {
    dm.set_commit_hook(
        [this](const std::string&, std::uint64_t, std::uint64_t, mc::tiered::value_tag) -> mc::task<mc::result<void>> {
          ++single_calls;
          co_return mc::result<void>{};
        });
    dm.set_commit_batch_hook(
        [this](std::vector<mc::store::data_manager::committed_value> vs) -> mc::task<std::vector<mc::result<void>>> {
          calls.push_back(vs);
          std::vector<mc::result<void>> r;
          for (auto& v : vs) r.push_back(v.key == failing_key ? mc::fail(mc::errc::rpc_fail) : mc::result<void>{});
          if (short_answer) r.pop_back();
          co_return r;
        });
  }
  hook_log(const hook_log&) = delete;
  hook_log& operator=(const hook_log&) = delete;
};

mc::task<mc::result<void>> put(mc::store::data_manager& dm, std::string key, std::vector<std::uint8_t> v) {
  co_return co_await dm.put(key, std::as_bytes(std::span(v)));
}
}  // namespace

TEST_SUITE("data manager") {
  TEST_CASE("MOONCAKE_DM_LOCK_SHARD_COUNT values are validated") {
    CHECK(*mc::store::parse_lock_shard_count("1024") == 1024);
    CHECK(*mc::store::parse_lock_shard_count("1") == 1);
    CHECK(mc::store::parse_lock_shard_count("0").has_error());
    CHECK(mc::store::parse_lock_shard_count("-3").has_error());
    CHECK(mc::store::parse_lock_shard_count("12x").has_error());
    CHECK(mc::store::parse_lock_shard_count("99999999999").has_error());
  }

  TEST_CASE("a key is non-empty, at most max_key_bytes and has no NUL byte") {
    CHECK(mc::store::check_key("k").has_value());
    CHECK(mc::store::check_key(std::string(mc::store::max_key_bytes, 'x')).has_value());
    CHECK(mc::is(mc::store::check_key("").error(), mc::errc::invalid_key));
    CHECK(mc::is(mc::store::check_key(std::string(mc::store::max_key_bytes + 1, 'x')).error(), mc::errc::invalid_key));
    // The store side of the master_rpc fuzz target's finding: a peer's
    // "s1\0x" was served as "s1" (the Text -> std::string conversion stopped
    // at the NUL).
    CHECK(mc::is(mc::store::check_key(std::string("s1\0x", 4)).error(), mc::errc::invalid_key));
  }

  TEST_CASE("remote read writes the exact value into the requester's registered buffer") {
    dm_fixture f;
    auto v = random_bytes(123457, 5);
    REQUIRE(f.rt.block_on(put(*f.dm, "k", v)));
    std::vector<std::uint8_t> dst(v.size());
    auto reg = f.reader_engine->register_memory(dst.data(), dst.size());
    REQUIRE(reg.has_value());
    auto r = f.rt.block_on(f.dm->read_remote("k", reg->describe(), 5s));
    REQUIRE(r.has_value());
    CHECK(*r == v.size());
    CHECK(dst == v);
    CHECK(f.dm->stats().remote_reads == 1);
  }

  TEST_CASE("a descriptor of the wrong length, a wrong token or a bad address fail and keep the value") {
    dm_fixture f;
    auto v = random_bytes(5000, 6);
    REQUIRE(f.rt.block_on(put(*f.dm, "k", v)));
    std::vector<std::uint8_t> dst(10000, 0);
    auto reg = f.reader_engine->register_memory(dst.data(), dst.size());
    REQUIRE(reg.has_value());
    std::uint64_t actual = 0;
    auto wrong_len = f.rt.block_on(f.dm->read_remote("k", reg->describe(0, 4999), 5s, &actual));
    CHECK(mc::is(wrong_len.error(), mc::errc::invalid_params));
    CHECK(actual == 5000);
    auto bad_token = reg->describe(0, 5000);
    bad_token.token ^= 0x5a5a;
    auto denied = f.rt.block_on(f.dm->read_remote("k", bad_token, 5s));
    CHECK(mc::is(denied.error(), mc::errc::access_denied));
    auto past_end = reg->describe(5001, 4999);
    past_end.length = 5000;
    auto oob = f.rt.block_on(f.dm->read_remote("k", past_end, 5s));
    CHECK(mc::is(oob.error(), mc::errc::access_denied));  // one code for every "not yours"
    CHECK(std::all_of(dst.begin(), dst.end(), [](std::uint8_t x) { return x == 0; }));
    auto missing = f.rt.block_on(f.dm->read_remote("nope", reg->describe(0, 5000), 5s));
    CHECK(mc::is(missing.error(), mc::errc::object_not_found));
    auto empty_key = f.rt.block_on(f.dm->read_remote("", reg->describe(0, 5000), 5s));
    CHECK(mc::is(empty_key.error(), mc::errc::invalid_key));
    // The stored value is intact.
    std::vector<std::uint8_t> back(5000);
    auto g = f.rt.block_on(f.dm->get("k", std::as_writable_bytes(std::span(back))));
    REQUIRE(g.has_value());
    CHECK(back == v);
  }

  TEST_CASE("a batch's commits reach the batch hook in one call; its per-value errors are reported per key") {
    dm_fixture f;
    hook_log log(*f.dm, "b2");
    auto& single_calls = log.single_calls;
    auto& calls = log.calls;
    auto& short_answer = log.short_answer;
    std::vector<std::vector<std::uint8_t>> src;
    std::vector<mc::transfer::region> regs;
    std::vector<mc::store::remote_write_item> items;
    const std::vector<std::string> keys{"b0", "b1", "b2", "b3", "b4"};
    for (std::size_t i = 0; i < keys.size(); ++i) {
      src.push_back(random_bytes(1000 + 777 * i, 40 + i));
      regs.push_back(*f.reader_engine->register_memory(src[i].data(), src[i].size()));
      mc::store::remote_write_item it;
      it.key = keys[i];
      it.src = {regs[i].describe()};
      it.tag = 10 + i;
      if (i == 3) it.version = ~0ull >> 1;  // far ahead of the clock: refused before the commit
      if (i == 4) it.src[0].token ^= 1;     // refused by the requester's engine: nothing committed
      items.push_back(std::move(it));
    }
    auto rs = f.rt.block_on(f.dm->write_remote_batch(items, 5s));
    REQUIRE(rs.size() == keys.size());
    CHECK(rs[0].has_value());
    CHECK(rs[1].has_value());
    CHECK(mc::is(rs[2].error(), mc::errc::rpc_fail));  // the hook's error for it; stored all the same
    CHECK(mc::is(rs[3].error(), mc::errc::invalid_params));
    CHECK(mc::is(rs[4].error(), mc::errc::access_denied));
    CHECK(single_calls == 0);
    REQUIRE(calls.size() == 1);  // one call for the batch, the committed values in order
    REQUIRE(calls[0].size() == 3);
    for (std::size_t k = 0; k < 3; ++k) {
      CHECK(calls[0][k].key == keys[k]);
      CHECK(calls[0][k].size == src[k].size());
      CHECK(calls[0][k].tag == 10 + k);
      CHECK(calls[0][k].version != 0);  // issued by the commit
    }
    for (std::size_t k = 0; k < 3; ++k) {
      std::vector<std::uint8_t> back(src[k].size());
      REQUIRE(f.rt.block_on(f.dm->get(keys[k], std::as_writable_bytes(std::span(back)))));
      CHECK(back == src[k]);
    }
    CHECK_FALSE(f.dm->exists("b3"));
    CHECK_FALSE(f.dm->exists("b4"));
    // A hook answering with another number of results fails every value it was given.
    short_answer = true;
    items.resize(2);
    auto again = f.rt.block_on(f.dm->write_remote_batch(items, 5s));
    REQUIRE(again.size() == 2);
    CHECK(mc::is(again[0].error(), mc::errc::rpc_fail));
    CHECK(mc::is(again[1].error(), mc::errc::rpc_fail));
    CHECK(calls.size() == 2);
  }

  TEST_CASE("put_batch: values in order, one batch hook call, per-item errors, the later of a duplicate key wins") {
    dm_fixture f;
    hook_log log(*f.dm, "p2");
    auto& single_calls = log.single_calls;
    auto& calls = log.calls;
    auto old_value = random_bytes(3000, 70);
    REQUIRE(f.rt.block_on(put(*f.dm, "p4", old_value)));  // a single put: the single hook
    single_calls = 0;
    calls.clear();
    // Sizes that are no multiple of anything; p1 twice (the later wins); an
    // empty key, an empty value and a version far ahead fail alone.
    const std::vector<std::string> keys{"p0", "p1", "p2", "", "p1", "p4", "p5", "p6"};
    std::vector<std::vector<std::uint8_t>> src;
    std::vector<mc::store::data_manager::put_item> items;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      src.push_back(random_bytes(i == 5 ? 0 : 1 + 4093 * i, 80 + i));
      mc::store::data_manager::put_item it;
      it.key = keys[i];
      it.value = std::as_bytes(std::span(src[i]));
      it.tag = 20 + i;
      if (i == 6) it.version = ~0ull >> 1;
      items.push_back(std::move(it));
    }
    auto rs = f.rt.block_on(f.dm->put_batch(std::move(items)));
    REQUIRE(rs.size() == keys.size());
    CHECK(rs[0].has_value());
    CHECK(rs[1].has_value());
    CHECK(mc::is(rs[2].error(), mc::errc::rpc_fail));  // the hook's error; stored all the same
    CHECK(mc::is(rs[3].error(), mc::errc::invalid_key));
    CHECK(rs[4].has_value());
    CHECK(mc::is(rs[5].error(), mc::errc::invalid_params));  // empty value: the old one stays
    CHECK(mc::is(rs[6].error(), mc::errc::invalid_params));  // version far ahead: refused at the commit
    CHECK(rs[7].has_value());
    CHECK(single_calls == 0);
    REQUIRE(calls.size() == 1);  // one call for the batch, the committed values in item order
    const std::vector<std::size_t> committed{0, 1, 2, 4, 7};
    REQUIRE(calls[0].size() == committed.size());
    for (std::size_t k = 0; k < committed.size(); ++k) {
      CHECK(calls[0][k].key == keys[committed[k]]);
      CHECK(calls[0][k].size == src[committed[k]].size());
      CHECK(calls[0][k].tag == 20 + committed[k]);
    }
    auto read = [&](const std::string& key, std::size_t n) {
      std::vector<std::uint8_t> back(n);
      auto g = f.rt.block_on(f.dm->get(key, std::as_writable_bytes(std::span(back))));
      REQUIRE(g.has_value());
      CHECK(*g == n);
      return back;
    };
    CHECK(read("p0", src[0].size()) == src[0]);
    CHECK(read("p1", src[4].size()) == src[4]);  // the later item
    CHECK(read("p2", src[2].size()) == src[2]);
    CHECK(read("p4", old_value.size()) == old_value);
    CHECK(read("p6", src[7].size()) == src[7]);
    CHECK_FALSE(f.dm->exists("p5"));
    // An empty batch: nothing to do, nothing called.
    CHECK(f.rt.block_on(f.dm->put_batch({})).empty());
    CHECK(calls.size() == 1);
  }

  TEST_CASE("put_batch without a batch hook runs the commit hook per value") {
    dm_fixture f;
    std::vector<std::string> hooked;
    f.dm->set_commit_hook([&hooked](const std::string& key, std::uint64_t, std::uint64_t,
                                    mc::tiered::value_tag) -> mc::task<mc::result<void>> {
      hooked.push_back(key);
      co_return mc::result<void>{};
    });
    std::vector<std::vector<std::uint8_t>> src{random_bytes(5, 90), random_bytes(70001, 91)};
    std::vector<mc::store::data_manager::put_item> items{{"q0", std::as_bytes(std::span(src[0]))},
                                                         {"q1", std::as_bytes(std::span(src[1]))}};
    auto rs = f.rt.block_on(f.dm->put_batch(std::move(items)));
    REQUIRE(rs.size() == 2);
    CHECK(rs[0].has_value());
    CHECK(rs[1].has_value());
    std::sort(hooked.begin(), hooked.end());
    CHECK(hooked == std::vector<std::string>{"q0", "q1"});
    std::vector<std::uint8_t> back(70001);
    REQUIRE(f.rt.block_on(f.dm->get("q1", std::as_writable_bytes(std::span(back)))));
    CHECK(back == src[1]);
  }

  TEST_CASE("a failed remote write releases its allocation and leaves the old value untouched") {
    dm_fixture f;
    auto old_value = random_bytes(4000, 7);
    REQUIRE(f.rt.block_on(put(*f.dm, "k", old_value)));
    auto used_before = f.backend->usage().at(0).used;
    auto fresh = random_bytes(8000, 8);
    auto reg = f.reader_engine->register_memory(fresh.data(), fresh.size());
    REQUIRE(reg.has_value());
    auto bad = reg->describe();
    bad.token += 1;
    auto r = f.rt.block_on(f.dm->write_remote("k", bad, 5s));
    CHECK(mc::is(r.error(), mc::errc::access_denied));
    auto zero = f.rt.block_on(f.dm->write_remote("k", reg->describe(0, 0), 5s));
    CHECK(mc::is(zero.error(), mc::errc::invalid_params));
    CHECK(f.backend->usage().at(0).used == used_before);
    std::vector<std::uint8_t> back(4000);
    REQUIRE(f.rt.block_on(f.dm->get("k", std::as_writable_bytes(std::span(back)))));
    CHECK(back == old_value);
    // And a good remote write replaces it completely.
    REQUIRE(f.rt.block_on(f.dm->write_remote("k", reg->describe(), 5s)));
    std::vector<std::uint8_t> back2(8000);
    auto g = f.rt.block_on(f.dm->get("k", std::as_writable_bytes(std::span(back2))));
    REQUIRE(g.has_value());
    CHECK(*g == 8000);
    CHECK(back2 == fresh);
  }

  TEST_CASE("the commit hook runs after the commit and its error is reported") {
    dm_fixture f;
    int calls = 0;
    f.dm->set_commit_hook([&calls](const std::string&, std::uint64_t, std::uint64_t,
                                   mc::tiered::value_tag) -> mc::task<mc::result<void>> {
      ++calls;
      co_return mc::fail(mc::errc::rpc_fail);
    });
    auto r = f.rt.block_on(put(*f.dm, "k", random_bytes(10, 1)));
    CHECK(mc::is(r.error(), mc::errc::rpc_fail));
    CHECK(calls == 1);
    CHECK(f.dm->exists("k"));  // stored; only publishing failed
  }
}
