// Calls (engine::call / set_call_handler; wire ops call_req / call_resp):
// bytes round-trip exactly at every size bound, errors travel back as codes,
// a call shares pooled connections with transfers without putting them out
// of step, and the target closes on hostile call requests.
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/when_all.hpp"
#include "raw_conn.hpp"
#include "transfer_fixture.hpp"
#include "wire.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <thread>

using namespace mc::transfer;
using mc::transfer::test::answer;
using mc::transfer::test::bytes;
using mc::transfer::test::cbytes;
using mc::transfer::test::raw_conn;
using mc::transfer::test::two_engines;
namespace wire = mc::transfer::detail;
using namespace std::chrono_literals;

namespace {

/// The test handler: the reply is `want` bytes (the request's first 8 bytes,
/// little-endian), each the request's checksum plus its index, so a reply
/// proves which request it answers.
std::vector<std::byte> expected_reply(std::span<const std::byte> req) {
  std::uint64_t want = 0, sum = 0;
  for (std::size_t i = 0; i < 8 && i < req.size(); ++i)
    want |= std::uint64_t(std::to_integer<std::uint8_t>(req[i])) << (8 * i);
  for (auto b : req) sum = sum * 131 + std::to_integer<std::uint8_t>(b);
  std::vector<std::byte> out(static_cast<std::size_t>(want));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>(sum + i);
  return out;
}

std::vector<std::byte> make_request(std::size_t size, std::uint64_t want, std::mt19937_64& rng) {
  std::vector<std::byte> r(std::max<std::size_t>(size, 8));
  for (auto& b : r) b = static_cast<std::byte>(rng());
  for (std::size_t i = 0; i < 8; ++i) r[i] = static_cast<std::byte>(want >> (8 * i));
  r.resize(size);
  return r;
}

void install_echo(engine& e, std::atomic<int>* served = nullptr, std::string* peer = nullptr) {
  e.set_call_handler([served, peer](call_request q) -> mc::task<mc::result<std::vector<std::byte>>> {
    if (served) ++*served;
    if (peer) *peer = q.peer_ip;
    auto out = expected_reply(q.payload);
    co_return out;
  });
}

mc::result<std::size_t> do_call(two_engines& t, const std::vector<std::byte>& req, std::span<std::byte> reply,
                                std::chrono::steady_clock::duration timeout = 10s) {
  return t.rt.block_on(t.a->call(t.b->endpoint(), req, reply, timeout));
}

}  // namespace

TEST_SUITE("transfer_call") {
  TEST_CASE("calls round-trip exact bytes from 1 byte to the bounds, on reused connections") {
    two_engines t;
    std::string peer;
    install_echo(*t.b, nullptr, &peer);
    std::mt19937_64 rng(77);
    // (request size, reply size): the bounds, one off them, and odd sizes.
    const std::vector<std::pair<std::size_t, std::size_t>> cases{{8, 1},
                                                                 {8, 4096},
                                                                 {9, 4097},
                                                                 {100, 65535},
                                                                 {65536, 1},
                                                                 {8, wire::max_call_reply},
                                                                 {65535, wire::max_call_reply - 1},
                                                                 {4099, 777777}};
    for (int round = 0; round < 3; ++round)
      for (auto [rq, rp] : cases) {
        auto req = make_request(rq, rp, rng);
        std::vector<std::byte> reply(wire::max_call_reply + 16, std::byte{0xEE});
        auto n = do_call(t, req, std::span(reply).first(std::min(rp + (round == 2 ? 16 : 0), wire::max_call_reply)));
        REQUIRE_MESSAGE(n, n.error().message());
        CHECK(*n == rp);
        auto want = expected_reply(req);
        CHECK(std::memcmp(reply.data(), want.data(), rp) == 0);
        CHECK(reply[rp] == std::byte{0xEE});  // nothing beyond the reply
      }
    CHECK(peer == "127.0.0.1");
    auto sa = t.a->stats(), sb = t.b->stats();
    CHECK(sa.initiated_calls == 3 * cases.size());
    CHECK(sb.served_calls == 3 * cases.size());
    CHECK(sa.outbound_connections <= t.a->options().connections_per_peer);  // pooled, not one per call
  }

  TEST_CASE("errors come back as codes: no handler, the handler's error, an oversized reply, bad sizes") {
    two_engines t;
    std::vector<std::byte> req(16, std::byte{1}), reply(64);
    auto r = do_call(t, req, reply);
    REQUIRE_FALSE(r);
    CHECK(mc::is(r.error(), mc::errc::unsupported));

    t.b->set_call_handler([](call_request) -> mc::task<mc::result<std::vector<std::byte>>> {
      co_return mc::fail(mc::errc::object_not_found);
    });
    r = do_call(t, req, reply);
    REQUIRE_FALSE(r);
    CHECK(mc::is(r.error(), mc::errc::object_not_found));

    // A handler answering more than the caller accepts is refused at the target.
    t.b->set_call_handler([](call_request q) -> mc::task<mc::result<std::vector<std::byte>>> {
      co_return std::vector<std::byte>(q.reply_capacity + 1);
    });
    r = do_call(t, req, reply);
    REQUIRE_FALSE(r);
    CHECK(mc::is(r.error(), mc::errc::buffer_overflow));

    // Sizes out of range never leave the initiator.
    std::vector<std::byte> big(wire::max_call_request + 1), huge(wire::max_call_reply + 1);
    CHECK(mc::is(do_call(t, {}, reply).error(), mc::errc::invalid_params));
    CHECK(mc::is(do_call(t, big, reply).error(), mc::errc::invalid_params));
    CHECK(mc::is(do_call(t, req, {}).error(), mc::errc::invalid_params));
    CHECK(mc::is(do_call(t, req, huge).error(), mc::errc::invalid_params));
    CHECK(mc::is(t.rt.block_on(t.a->call("", req, reply, 1s)).error(), mc::errc::invalid_params));

    // The handler removed again: unsupported; and a working one afterwards
    // on the same pooled connections.
    t.b->set_call_handler({});
    CHECK(mc::is(do_call(t, req, reply).error(), mc::errc::unsupported));
    install_echo(*t.b);
    std::mt19937_64 rng(5);
    auto ok_req = make_request(32, 40, rng);
    auto n = do_call(t, ok_req, reply);
    REQUIRE(n);
    CHECK(*n == 40);
    CHECK(t.b->stats().served_call_errors == 4);
  }

  TEST_CASE("calls and transfers share the pooled connections without getting out of step") {
    two_engines t;
    install_echo(*t.b);
    std::vector<std::uint8_t> target(8u << 20), local(8u << 20);
    std::mt19937_64 rng(9);
    for (auto& x : target) x = static_cast<std::uint8_t>(rng());
    auto reg = t.b->register_memory(target.data(), target.size());
    REQUIRE(reg);
    auto rb = reg->describe();
    for (int round = 0; round < 20; ++round) {
      // Reads of odd sizes and calls, concurrently, over the same peer.
      auto res = t.rt.block_on(
          [](two_engines& t, remote_buffer rb, std::vector<std::uint8_t>& local, int round) -> mc::task<bool> {
            std::vector<request> reqs;
            const std::size_t len = 1000 + static_cast<std::size_t>(round) * 40000,
                              at = static_cast<std::size_t>(round) * 4099;
            auto src = rb;
            src.address += at;
            src.length = len;
            reqs.push_back(request::make_read(std::span(reinterpret_cast<std::byte*>(local.data()) + at, len), src));
            std::mt19937_64 rng(static_cast<std::uint64_t>(round));
            std::vector<std::vector<std::byte>> calls, replies;
            for (int k = 0; k < 4; ++k) {
              calls.push_back(make_request(24, 3000 + static_cast<std::uint64_t>(k), rng));
              replies.emplace_back(8192);
            }
            std::vector<mc::task<mc::result<std::size_t>>> cs;
            for (int k = 0; k < 4; ++k) cs.push_back(t.a->call(t.b->endpoint(), calls[k], replies[k], 10s));
            auto moved = co_await t.a->batch(std::move(reqs), 10s);
            auto answered = co_await mc::when_all(std::move(cs));
            if (!moved.front()) co_return false;
            for (int k = 0; k < 4; ++k) {
              auto want = expected_reply(calls[k]);
              if (!answered[k] || *answered[k] != want.size() ||
                  std::memcmp(replies[k].data(), want.data(), want.size()) != 0)
                co_return false;
            }
            co_return true;
          }(t, rb, local, round));
      REQUIRE(res);
      const std::size_t len = 1000 + static_cast<std::size_t>(round) * 40000,
                        at = static_cast<std::size_t>(round) * 4099;
      CHECK(std::memcmp(local.data() + at, target.data() + at, len) == 0);
    }
  }

  TEST_CASE("calls in flight beyond connections_per_peer open connections up to call_connections_per_peer") {
    // Each handler waits until `want` calls are in it at once (or 3 s), so
    // the calls only overlap that much if each has its own connection.
    for (std::size_t bound : {std::size_t{16}, std::size_t{6}}) {
      CAPTURE(bound);
      auto oa = mc::transfer::test::loopback_options();
      oa.connections_per_peer = 4;
      oa.call_connections_per_peer = bound;
      two_engines t(oa);
      constexpr int calls_n = 8;
      const int want = std::min<int>(calls_n, static_cast<int>(bound));
      std::atomic<int> in{0}, most{0};
      t.b->set_call_handler([&, want](call_request q) -> mc::task<mc::result<std::vector<std::byte>>> {
        const int now = ++in;
        for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {}
        for (int i = 0; i < 3000 && most.load() < want; ++i) (void)co_await mc::sleep_for(1ms);
        --in;
        co_return expected_reply(q.payload);
      });
      std::mt19937_64 rng(bound);
      std::vector<std::vector<std::byte>> reqs, replies;
      for (int k = 0; k < calls_n; ++k) {
        reqs.push_back(make_request(16, 32 + static_cast<std::uint64_t>(k), rng));
        replies.emplace_back(64);
      }
      auto got = t.rt.block_on(
          [](two_engines& t, std::vector<std::vector<std::byte>>& reqs,
             std::vector<std::vector<std::byte>>& replies) -> mc::task<std::vector<mc::result<std::size_t>>> {
            std::vector<mc::task<mc::result<std::size_t>>> cs;
            for (std::size_t k = 0; k < reqs.size(); ++k)
              cs.push_back(t.a->call(t.b->endpoint(), reqs[k], replies[k], 10s));
            co_return co_await mc::when_all(std::move(cs));
          }(t, reqs, replies));
      CHECK(most.load() == want);  // never more connections than the bound, and all of them used
      for (int k = 0; k < calls_n; ++k) {
        REQUIRE(got[static_cast<std::size_t>(k)]);
        auto w = expected_reply(reqs[static_cast<std::size_t>(k)]);
        CHECK(*got[static_cast<std::size_t>(k)] == w.size());
        CHECK(std::memcmp(replies[static_cast<std::size_t>(k)].data(), w.data(), w.size()) == 0);
      }
    }
    // Out of range: refused at construction.
    auto bad = mc::transfer::test::loopback_options();
    bad.call_connections_per_peer = 65;
    mc::runtime::runtime rt(1);
    CHECK_THROWS_AS(engine(rt, bad), std::invalid_argument);
  }

  TEST_CASE("a call past its deadline times out, and the next call is served") {
    two_engines t;
    std::atomic<bool> slow{true};
    t.b->set_call_handler([&slow](call_request q) -> mc::task<mc::result<std::vector<std::byte>>> {
      if (slow.load()) (void)co_await mc::sleep_for(500ms);
      co_return expected_reply(q.payload);
    });
    std::mt19937_64 rng(1);
    auto req = make_request(16, 100, rng);
    std::vector<std::byte> reply(128);
    auto r = do_call(t, req, reply, 50ms);
    REQUIRE_FALSE(r);
    CHECK(mc::is(r.error(), mc::errc::timeout));
    slow = false;
    auto n = do_call(t, req, reply);
    REQUIRE(n);
    CHECK(*n == 100);
  }

  TEST_CASE("on an idle pooled connection: the deadline, the caller's cancellation, then calls served again") {
    // The first call opens the connection (the general path); the later ones
    // find it idle and run under the thread's deadline queue.
    two_engines t;
    std::atomic<int> slow_ms{0};
    std::atomic<int> served{0};
    t.b->set_call_handler([&](call_request q) -> mc::task<mc::result<std::vector<std::byte>>> {
      ++served;
      if (int ms = slow_ms.load(); ms > 0) (void)co_await mc::sleep_for(std::chrono::milliseconds(ms));
      co_return expected_reply(q.payload);
    });
    std::mt19937_64 rng(2);
    auto req = make_request(24, 300, rng);
    std::vector<std::byte> reply(512);
    REQUIRE(do_call(t, req, reply));
    const auto before = t.a->stats();
    slow_ms = 500;
    const auto t0 = std::chrono::steady_clock::now();
    auto r = do_call(t, req, reply, 50ms);
    const auto took = std::chrono::steady_clock::now() - t0;
    REQUIRE_FALSE(r);
    CHECK(mc::is(r.error(), mc::errc::timeout));
    CHECK(took < 450ms);  // the deadline ended it, not the handler's answer
    // The caller cancelled (its own shorter deadline): cancelled inside,
    // timeout outside, never an exception.
    auto outer = t.rt.block_on(mc::with_deadline(t.a->call(t.b->endpoint(), req, reply, 10s), 50ms));
    REQUIRE_FALSE(outer);
    CHECK(mc::is(outer.error(), mc::errc::timeout));
    slow_ms = 0;
    for (int i = 0; i < 20; ++i) {
      std::fill(reply.begin(), reply.end(), std::byte{0});
      auto n = do_call(t, req, reply);
      REQUIRE(n);
      REQUIRE(*n == 300);
      auto want = expected_reply(req);
      CHECK(std::equal(want.begin(), want.end(), reply.begin()));
    }
    CHECK(t.a->stats().initiated_call_errors >= before.initiated_call_errors + 2);
  }

  TEST_CASE("a target that predates calls (closes on the op) reads as unsupported") {
    two_engines t;
    // A listener that reads a request and closes, like an older target
    // whose header check refuses the op.
    int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(lfd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    REQUIRE(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(lfd, 4) == 0);
    ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &alen);
    std::thread old([lfd] {
      int c = ::accept(lfd, nullptr, nullptr);
      if (c < 0) return;
      std::byte b[wire::header_size];
      (void)::recv(c, b, sizeof b, MSG_WAITALL);
      ::close(c);
    });
    std::vector<std::byte> req(16, std::byte{2}), reply(64);
    auto r = t.rt.block_on(t.a->call("127.0.0.1:" + std::to_string(ntohs(a.sin_port)), req, reply, 5s));
    old.join();
    ::close(lfd);
    REQUIRE_FALSE(r);
    CHECK(mc::is(r.error(), mc::errc::unsupported));
  }

  TEST_CASE("hostile call requests close the connection; a well-formed one is answered") {
    two_engines t;
    install_echo(*t.b);
    auto request = [](std::uint64_t cap, std::uint64_t len, std::uint64_t token, std::size_t payload) {
      wire::header h;
      h.op = wire::wire_op::call_req;
      h.request_id = 1;
      h.address = cap;
      h.length = len;
      h.token = token;
      wire::header_bytes hb;
      wire::encode(h, hb);
      std::vector<std::byte> out(hb.size() + payload, std::byte{0});
      std::copy(hb.begin(), hb.end(), out.begin());
      return out;
    };
    struct bad {
      std::uint64_t cap, len, token;
    };
    for (auto b : {bad{0, 8, 0}, bad{wire::max_call_reply + 1, 8, 0}, bad{64, 0, 0},
                   bad{64, wire::max_call_request + 1, 0}, bad{64, 8, 7}}) {
      raw_conn c(t.b->endpoint());
      c.send(request(b.cap, b.len, b.token, 8));
      CHECK(c.closed_by_peer());
    }
    // A call response sent to the target is not a request: closed.
    {
      raw_conn c(t.b->endpoint());
      auto r = request(64, 8, 0, 8);
      r[5] = static_cast<std::byte>(wire::wire_op::call_resp);
      c.send(r);
      CHECK(c.closed_by_peer());
    }
    // Well formed (a reply of 8 bytes: the request's first 8 bytes are 8).
    raw_conn c(t.b->endpoint());
    auto ok = request(64, 8, 0, 8);
    ok[wire::header_size] = std::byte{8};
    c.send(ok);
    auto h = answer(c);
    REQUIRE(h);
    CHECK(h->op == wire::wire_op::call_resp);
    CHECK(h->status == 0);
    CHECK(h->length == 8);
    CHECK(c.recv(8).size() == 8);
  }
}
