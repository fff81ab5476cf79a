// A peer is untrusted: a fake ClientService that lies (wrong size, huge
// size, unknown code, wrong batch count) must make the requester fail the
// call, never write past the value, and keep serving.
#include "client_service.capnp.h"
#include "mc/master/master_client.hpp"
#include "mc/rpc/capnp.hpp"
#include "mc/runtime/deadline.hpp"
#include "mc/rpc/server.hpp"
#include "mc/store/client_service.hpp"
#include "mc/store/peer_client.hpp"
#include "store_fixture.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>

using namespace std::chrono_literals;
using mc::test::bytes_of;
using mc::test::random_bytes;
using mc::test::writable;

namespace {

enum class lie { wrong_size, huge_size, unknown_code, short_batch, honest_code, inline_overflow, silent };

/// What a silent liar saw: the requester's transfer descriptors.
struct seen_descriptors {
  std::mutex mu;
  std::vector<mc::transfer::remote_buffer> dest;
};

/// Answers every read with `mode`'s lie, without transferring anything.
class lying_service final : public mc::rpc::service<ClientService> {
 public:
  lying_service(mc::executor ex, std::shared_ptr<std::atomic<lie>> mode, std::shared_ptr<std::atomic<int>> calls,
                std::shared_ptr<seen_descriptors> seen)
      : service(std::move(ex)), mode_(std::move(mode)), calls_(std::move(calls)), seen_(std::move(seen)) {}

  kj::Promise<void> readRemoteData(ReadRemoteDataContext ctx) override {
    ++*calls_;
    fill(ctx.getResults().initResult(), ctx.getParams().getItem().getDest().getLength());
    return kj::READY_NOW;
  }
  kj::Promise<void> batchReadRemoteData(BatchReadRemoteDataContext ctx) override {
    ++*calls_;
    auto items = ctx.getParams().getItems();
    if (mode_->load() == lie::silent) {  // keep the descriptors, never answer
      std::lock_guard lk(seen_->mu);
      for (auto it : items) {
        auto d = it.getDest();
        seen_->dest.push_back({d.getEndpoint(), d.getAddress(), d.getLength(), d.getToken(), 0});
      }
      return kj::NEVER_DONE;
    }
    unsigned n = mode_->load() == lie::short_batch ? items.size() - 1 : items.size();
    auto out = ctx.getResults().initResults(n);
    for (unsigned i = 0; i < n; ++i) {
      if (mode_->load() == lie::inline_overflow) {  // more inline bytes than the requester allowed
        auto extra = items[i].getInlineMax() + 100;
        out[i].setSize(extra);
        auto d = out[i].initData(static_cast<unsigned>(extra));
        std::fill(d.begin(), d.end(), 0x77);
        continue;
      }
      fill(out[i], items[i].getDest().getLength());
    }
    return kj::READY_NOW;
  }
  kj::Promise<void> query(QueryContext ctx) override {
    ++*calls_;
    fill(ctx.getResults().initResult(), 10);
    return kj::READY_NOW;
  }

 private:
  void fill(ItemResult::Builder b, std::uint64_t asked) {
    switch (mode_->load()) {
      case lie::wrong_size:
        b.setCode(0), b.setSize(asked + 4096);
        break;
      case lie::huge_size:
        b.setCode(0), b.setSize(std::uint64_t{1} << 62);
        break;
      case lie::unknown_code:
        b.setCode(-123456), b.setSize(asked);
        break;
      case lie::short_batch:
        b.setCode(0), b.setSize(asked);
        break;
      case lie::honest_code:
      case lie::inline_overflow:  // (batch reads handle these two themselves)
      case lie::silent:
        b.setCode(static_cast<std::int32_t>(mc::errc::object_not_found));
        break;
    }
  }
  std::shared_ptr<std::atomic<lie>> mode_;
  std::shared_ptr<std::atomic<int>> calls_;
  std::shared_ptr<seen_descriptors> seen_;
};

struct liar {
  std::shared_ptr<std::atomic<lie>> mode = std::make_shared<std::atomic<lie>>(lie::wrong_size);
  std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<seen_descriptors> seen = std::make_shared<seen_descriptors>();
  std::unique_ptr<mc::rpc::server> server;

  explicit liar(mc::runtime::runtime& rt) {
    mc::rpc::server_options so;
    so.host = "127.0.0.1";
    so.threads = 1;
    server = std::make_unique<mc::rpc::server>(rt, so);
    server->add_service(mc::store::client_service_name, mc::rpc::make_service<lying_service>(mode, calls, seen));
    REQUIRE(server->start());
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(server->port()); }
};

/// Registers the liar with the cluster's master as client "liar" holding `items`.
mc::result<void> announce(mc::test::cluster& c, const liar& l, std::vector<mc::master::publish_item> items) {
  mc::master::master_client m(c.master_address(), 5s);
  mc::master::client_info info;
  info.client_id = "liar";
  info.rpc_endpoint = l.endpoint();
  info.transfer_endpoint = "127.0.0.1:9";
  info.capacity = 1 << 30;
  return c.on(0,
              [](mc::master::master_client& m, mc::master::client_info info,
                 std::vector<mc::master::publish_item> items) -> mc::task<mc::result<void>> {
                if (auto r = co_await m.register_client(info); !r) co_return r;
                auto r = co_await m.add_replicas("liar", std::move(items));
                if (!r) co_return r.error();
                co_return r->front();
              }(m, info, std::move(items)));
}

}  // namespace

TEST_SUITE("peer trust") {
  TEST_CASE("unknown codes from the wire read as RPC_FAIL, known ones as themselves") {
    CHECK(mc::store::from_wire_code(0).has_value());
    CHECK(mc::is(mc::store::from_wire_code(-704).error(), mc::errc::object_not_found));
    CHECK(mc::is(mc::store::from_wire_code(-1107).error(), mc::errc::overloaded));
    CHECK(mc::is(mc::store::from_wire_code(-123456).error(), mc::errc::rpc_fail));
    CHECK(mc::is(mc::store::from_wire_code(7).error(), mc::errc::rpc_fail));
    CHECK(mc::is(mc::store::from_wire_code(INT32_MIN).error(), mc::errc::rpc_fail));
    CHECK(mc::error_name(mc::errc::overloaded) == "OVERLOADED");
  }

  TEST_CASE(
      "a lying owner (wrong size, huge size, unknown code, short batch) fails the get; the buffer past "
      "the value is untouched and the requester serves on") {
    mc::test::cluster c;
    auto& a = c.add("A");
    auto& b = c.add("B");
    liar l(*c.nodes[1].rt);  // hosted on B's runtime, as a third "node"

    // Register the liar with the master as the holder of "lied".
    auto reg = announce(c, l, {{"lied", 3001, 1}});
    REQUIRE(reg.has_value());
    auto good = random_bytes(7777, 3);
    REQUIRE(c.on(1, b.put("good", bytes_of(good))));

    for (auto mode : {lie::wrong_size, lie::huge_size, lie::unknown_code}) {
      l.mode->store(mode);
      int before = l.calls->load();
      std::vector<std::uint8_t> buf(16384, 0xAB);
      auto r = c.on(0, a.get("lied", writable(buf)));
      REQUIRE(r.has_error());
      CHECK(mc::is(r.error(), mc::errc::rpc_fail));
      CHECK(l.calls->load() > before);  // the liar really answered
      CHECK(std::all_of(buf.begin() + 3001, buf.end(), [](std::uint8_t x) { return x == 0xAB; }));
      // A keeps serving: a real remote read right after is exact.
      std::vector<std::uint8_t> back(good.size() + 5, 0);
      auto g = c.on(0, a.get("good", writable(back)));
      REQUIRE(g.has_value());
      CHECK(*g == good.size());
      CHECK(std::equal(good.begin(), good.end(), back.begin()));
    }

    // The peer client itself: batch replies with the wrong count, huge sizes.
    auto& eng = a.engine();
    std::vector<std::uint8_t> b1(100, 0x11), b2(200, 0x22);
    auto r1 = eng.register_memory(b1.data(), b1.size());
    auto r2 = eng.register_memory(b2.data(), b2.size());
    REQUIRE((r1 && r2));
    mc::store::peer_client pc(2s);
    auto batch = [&]() -> mc::task<mc::result<std::vector<mc::store::peer_read_result>>> {
      std::vector<mc::store::peer_item> items{{"x", r1->describe()}, {"y", r2->describe()}};
      co_return co_await pc.batch_read_remote(l.endpoint(), std::move(items));
    };
    l.mode->store(lie::short_batch);
    auto short_r = c.on(0, batch());
    REQUIRE(short_r.has_error());
    CHECK(mc::is(short_r.error(), mc::errc::rpc_fail));
    l.mode->store(lie::huge_size);
    auto huge = c.on(0, batch());
    REQUIRE(huge.has_value());
    REQUIRE(huge->size() == 2);
    for (auto& x : *huge) CHECK(mc::is(x.value.error(), mc::errc::rpc_fail));
    l.mode->store(lie::honest_code);
    auto honest = c.on(0, batch());
    REQUIRE(honest.has_value());
    for (auto& x : *honest) CHECK(mc::is(x.value.error(), mc::errc::object_not_found));
    l.mode->store(lie::unknown_code);
    auto q = c.on(0, pc.query(l.endpoint(), "x"));
    CHECK(mc::is(q.error(), mc::errc::rpc_fail));
    CHECK(std::all_of(b1.begin(), b1.end(), [](std::uint8_t x) { return x == 0x11; }));
    CHECK(std::all_of(b2.begin(), b2.end(), [](std::uint8_t x) { return x == 0x22; }));
    c.nodes[1].rt->block_on(l.server->stop_async());
  }

  TEST_CASE(
      "an owner answering late can never write into the caller's buffer after the get returned; an "
      "inline answer larger than allowed is refused") {
    mc::test::cluster c;
    auto& a = c.add("A", {}, "auto", [](mc::store::client_options& o) { o.rpc_timeout = 300ms; });
    auto& b = c.add("B");
    liar l(*c.nodes[1].rt);
    const std::uint64_t big = 200'001, small = 1000;
    auto reg = announce(c, l, {{"late", big, 1}, {"tiny", small, 1}});
    REQUIRE(reg.has_value());

    l.mode->store(lie::silent);
    std::vector<std::uint8_t> buf(big, 0xAB);
    auto r = c.on(0, a.get("late", writable(buf)));
    REQUIRE(r.has_error());
    CHECK((mc::is(r.error(), mc::errc::timeout) || mc::is(r.error(), mc::errc::rpc_fail)));
    std::vector<mc::transfer::remote_buffer> seen;
    {
      std::lock_guard lk(l.seen->mu);
      seen = l.seen->dest;
    }
    REQUIRE_FALSE(seen.empty());
    // The "owner" now writes into the descriptor it was given: refused, the
    // caller's buffer stays as it was.
    auto junk = random_bytes(big, 5);
    for (auto& d : seen) {
      REQUIRE(d.length == big);
      auto w = c.on(1, b.engine().write(bytes_of(junk), d, 2s));
      REQUIRE(w.has_error());
      CHECK(mc::is(w.error(), mc::errc::access_denied));
    }
    CHECK(std::all_of(buf.begin(), buf.end(), [](std::uint8_t x) { return x == 0xAB; }));

    // Cancelling a batch (the caller's deadline, far below rpc_timeout) ends
    // it promptly; its descriptors are dead too.
    auto& patient = c.add("P", {}, "auto", [](mc::store::client_options& o) { o.rpc_timeout = 30s; });
    {
      std::lock_guard lk(l.seen->mu);
      l.seen->dest.clear();
    }
    std::vector<std::uint8_t> buf2(big, 0xAB);
    auto t0 = std::chrono::steady_clock::now();
    auto cancelled =
        c.on(2, mc::with_deadline(
                    [](mc::store::client& cl,
                       std::span<std::byte> into) -> mc::task<mc::result<std::vector<mc::result<std::size_t>>>> {
                      std::vector<std::string> keys(1, "late");
                      std::vector<std::span<std::byte>> bufs(1, into);
                      co_return co_await cl.batch_get(std::move(keys), std::move(bufs));
                    }(patient, writable(buf2)),
                    200ms));
    CHECK(std::chrono::steady_clock::now() - t0 < 10s);
    REQUIRE(cancelled.has_error());
    {
      std::lock_guard lk(l.seen->mu);
      seen = l.seen->dest;
    }
    REQUIRE_FALSE(seen.empty());
    for (auto& d : seen) {
      auto w = c.on(1, b.engine().write(bytes_of(junk), d, 2s));
      REQUIRE(w.has_error());
      CHECK(mc::is(w.error(), mc::errc::access_denied));
    }
    CHECK(std::all_of(buf2.begin(), buf2.end(), [](std::uint8_t x) { return x == 0xAB; }));

    l.mode->store(lie::inline_overflow);
    std::vector<std::uint8_t> tiny(small + 50, 0xCD);
    auto t = c.on(0, a.get("tiny", writable(tiny)));
    REQUIRE(t.has_error());
    CHECK(mc::is(t.error(), mc::errc::rpc_fail));
    CHECK(std::all_of(tiny.begin(), tiny.end(), [](std::uint8_t x) { return x == 0xCD; }));
    c.nodes[1].rt->block_on(l.server->stop_async());
  }
}
