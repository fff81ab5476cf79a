// The shared-secret auth frame in front of every RPC connection
// (mc/rpc/auth.hpp, lib/rpc/src/negotiate.cpp): accepted tokens, rotation,
// wrong and missing tokens, auth-off servers, garbage instead of the frame.
#include "auth_support.hpp"
#include "echo_call.hpp"
#include "mc/rpc/auth.hpp"
#include "raw_socket.hpp"
#include "rpc_fixture.hpp"
#include "test_support.hpp"

#include <array>
#include <cstring>
#include <thread>

using namespace mc::rpc::test;
using mc::errc;
using mc::task;

namespace {

mc::rpc::server_options auth_options(std::vector<std::string> tokens) {
  auto o = local_options();
  o.auth_tokens = std::move(tokens);
  return o;
}

std::vector<std::uint8_t> auth_frame(std::string_view token, std::uint32_t declared) {
  std::vector<std::uint8_t> f(8 + token.size());
  std::memcpy(f.data(), "MCAU", 4);
  std::memcpy(f.data() + 4, &declared, 4);
  std::memcpy(f.data() + 8, token.data(), token.size());
  return f;
}

}  // namespace

TEST_SUITE("rpc_auth") {
  TEST_CASE("token lists parse with at most two visible-ASCII tokens and errors never echo the token") {
    std::string msg;
    auto two = mc::rpc::parse_auth_tokens(" new-token , old-token\n", &msg);
    REQUIRE(two);
    CHECK(*two == std::vector<std::string>{"new-token", "old-token"});
    CHECK_FALSE(mc::rpc::parse_auth_tokens("a,b,c", &msg));
    CHECK(msg.find("at most 2") != std::string::npos);
    CHECK_FALSE(mc::rpc::parse_auth_tokens("", &msg));
    CHECK_FALSE(mc::rpc::parse_auth_tokens("good,", &msg));
    CHECK_FALSE(mc::rpc::parse_auth_tokens("se cret", &msg));
    CHECK(msg.find("se cret") == std::string::npos);
    CHECK_FALSE(mc::rpc::parse_auth_tokens(std::string("tab\x01"), &msg));
    CHECK(mc::rpc::parse_auth_tokens(std::string(256, 'x'), &msg));
    CHECK_FALSE(mc::rpc::parse_auth_tokens(std::string(257, 'x'), &msg));
    CHECK_FALSE(mc::rpc::set_auth_tokens({"a", "b", "c"}).empty());
    CHECK_FALSE(mc::rpc::set_auth_tokens({""}).empty());
    CHECK_FALSE(mc::rpc::auth_enabled());
  }

  TEST_CASE("a token matches only exactly: no prefix, no extension, no empty token") {
    std::vector<std::string> acc{"secret-1", "secret-2"};
    CHECK(mc::rpc::auth_token_accepted("secret-1", acc));
    CHECK(mc::rpc::auth_token_accepted("secret-2", acc));
    CHECK_FALSE(mc::rpc::auth_token_accepted("secret-", acc));
    CHECK_FALSE(mc::rpc::auth_token_accepted("secret-12", acc));
    CHECK_FALSE(mc::rpc::auth_token_accepted("secret-3", acc));
    CHECK_FALSE(mc::rpc::auth_token_accepted("", acc));
    CHECK_FALSE(mc::rpc::auth_token_accepted("", {""}));
    CHECK_FALSE(mc::rpc::auth_token_accepted("x", {}));
  }

  TEST_CASE("a server refuses to start with malformed or too many tokens") {
    mc::runtime::runtime rt(2);  // local_options() serves on 2 threads
    rt.start();
    for (auto tokens : {std::vector<std::string>{"bad token"}, std::vector<std::string>{"a", "b", "c"},
                        std::vector<std::string>{std::string(257, 'x')}}) {
      mc::rpc::server srv(rt, auth_options(tokens));
      auto r = srv.start();
      REQUIRE_FALSE(r);
      CHECK(mc::is(r.error(), errc::invalid_params));
      CHECK(srv.message().find("auth_tokens") != std::string::npos);
    }
    rt.stop();
  }

  TEST_CASE("a server with auth on serves the current and the rotation token and refuses the rest") {
    rpc_fixture f(auth_options({"tok-current", "tok-previous"}));
    const auto global0 = mc::rpc::auth_failures();
    {
      process_tokens t({"tok-current"});
      auto o = f.rt.block_on(fresh_echo(f.endpoint()), 2);
      CHECK_MESSAGE(o.r, o.message);
    }
    {
      process_tokens t({"tok-previous", "tok-current"});  // presents the first one
      auto o = f.rt.block_on(fresh_echo(f.endpoint()), 3);
      CHECK_MESSAGE(o.r, o.message);
    }
    CHECK(f.srv->stats().auth_failures == 0);
    {
      process_tokens t({"tok-wrong", "tok-current"});  // the second one is never presented
      auto o = f.rt.block_on(fresh_echo(f.endpoint()), 2);
      REQUIRE_FALSE(o.r);
      CHECK(mc::is(o.r.error(), errc::access_denied));
      CHECK(o.message.find("refused this process's auth token") != std::string::npos);
      CHECK(o.message.find("tok-wrong") == std::string::npos);
      // Plain TCP: the message names the handshake and the peer once, not RDMA.
      CHECK_MESSAGE(o.message.rfind("RPC handshake with " + f.endpoint() + ": access denied", 0) == 0, o.message);
      CHECK_MESSAGE(o.message.find("RDMA") == std::string::npos, o.message);
    }
    {
      // No token at all: the client still sends an empty frame, so it learns why.
      auto o = f.rt.block_on(fresh_echo(f.endpoint()), 3);
      REQUIRE_FALSE(o.r);
      CHECK(mc::is(o.r.error(), errc::access_denied));
      CHECK(o.message.find("requires an auth token") != std::string::npos);
    }
    CHECK(wait_auth_failures(*f.srv, 2));
    CHECK(f.srv->stats().auth_failures == 2);
    CHECK(mc::rpc::auth_failures() - global0 == 2);
    CHECK(f.srv->stats().handshake_failed == 0);
    {
      process_tokens t({"tok-current"});  // refusals leave no broken state behind
      auto o = f.rt.block_on(fresh_echo(f.endpoint()), 2);
      CHECK_MESSAGE(o.r, o.message);
    }
  }

  TEST_CASE("the process-wide setting applies to servers without their own tokens") {
    process_tokens t({"tok-process"});
    rpc_fixture f;  // server_options::auth_tokens unset
    auto ok = f.rt.block_on(fresh_echo(f.endpoint()), 2);
    CHECK_MESSAGE(ok.r, ok.message);
    int fd = raw_connect(f.srv->port());
    REQUIRE(fd >= 0);
    auto h = frame_header(1, 0);
    REQUIRE(raw_send(fd, h.data(), h.size()));
    CHECK(raw_wait_closed(fd, std::chrono::seconds(3)));
    ::close(fd);
    CHECK(wait_auth_failures(*f.srv, 1));
  }

  TEST_CASE("a server with auth off serves clients with and without the auth frame") {
    rpc_fixture f(auth_options({}));
    {
      process_tokens t({"tok-any"});
      auto o = f.rt.block_on(fresh_echo(f.endpoint()), 2);
      CHECK_MESSAGE(o.r, o.message);
    }
    auto o = f.rt.block_on(fresh_echo(f.endpoint()), 3);  // empty frame
    CHECK_MESSAGE(o.r, o.message);
    // A raw frame with any token is answered "accepted" and the connection stays open.
    int fd = raw_connect(f.srv->port());
    REQUIRE(fd >= 0);
    auto fr = auth_frame("whatever", 8);
    REQUIRE(raw_send(fd, fr.data(), fr.size()));
    std::array<std::uint8_t, 8> reply{};
    REQUIRE(raw_read(fd, reply.data(), reply.size(), std::chrono::seconds(3)));
    CHECK(std::memcmp(reply.data(), "MCAS", 4) == 0);
    std::uint32_t status = 99;
    std::memcpy(&status, reply.data() + 4, 4);
    CHECK(status == 0);
    CHECK_FALSE(raw_wait_closed(fd, std::chrono::milliseconds(100)));
    ::close(fd);
    CHECK(f.srv->stats().auth_failures == 0);
  }

  TEST_CASE("garbage in place of the auth frame is closed at once and counted; others are still served") {
    auto opts = auth_options({"tok-good"});
    opts.handshake_timeout = std::chrono::seconds(10);  // closing must not wait for it
    rpc_fixture f(opts);
    std::uint64_t expected = 0;
    auto closed_fast = [&](const std::vector<std::uint8_t>& bytes) {
      int fd = raw_connect(f.srv->port());
      REQUIRE(fd >= 0);
      auto t0 = std::chrono::steady_clock::now();
      REQUIRE(raw_send(fd, bytes.data(), bytes.size()));
      CHECK(raw_wait_closed(fd, std::chrono::seconds(5)));
      CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
      ::close(fd);
      CHECK(wait_auth_failures(*f.srv, ++expected));
    };
    SUBCASE("a Cap'n Proto frame first") { closed_fast(frame_header(1, 2)); }
    SUBCASE("an RDMA hello first") {
      std::vector<std::uint8_t> h(64, 0);
      std::memcpy(h.data(), "MCRPCRD1", 8);
      closed_fast(h);
    }
    SUBCASE("random bytes") { closed_fast(std::vector<std::uint8_t>{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4}); }
    SUBCASE("a declared token length beyond 256 bytes") { closed_fast(auth_frame("", 100000)); }
    SUBCASE("a wrong token is answered 'refused' before the close") {
      int fd = raw_connect(f.srv->port());
      REQUIRE(fd >= 0);
      auto fr = auth_frame("tok-bad", 7);
      REQUIRE(raw_send(fd, fr.data(), fr.size()));
      std::array<std::uint8_t, 8> reply{};
      REQUIRE(raw_read(fd, reply.data(), reply.size(), std::chrono::seconds(3)));
      std::uint32_t status = 0;
      std::memcpy(&status, reply.data() + 4, 4);
      CHECK(status == 2);
      CHECK(raw_wait_closed(fd, std::chrono::seconds(3)));
      ::close(fd);
      CHECK(wait_auth_failures(*f.srv, 1));
    }
    SUBCASE("a frame that stops halfway is closed by the handshake timeout, as idle") {
      f.srv.reset();  // a short timeout for this one
      auto o = auth_options({"tok-good"});
      o.handshake_timeout = std::chrono::milliseconds(300);
      f.srv = std::make_unique<mc::rpc::server>(f.rt, o);
      add_test_services(*f.srv);
      REQUIRE(f.srv->start());
      int fd = raw_connect(f.srv->port());
      REQUIRE(fd >= 0);
      auto fr = auth_frame("tok-good", 8);
      REQUIRE(raw_send(fd, fr.data(), 10));
      CHECK(raw_wait_closed(fd, std::chrono::seconds(5)));
      ::close(fd);
      CHECK(f.srv->stats().auth_failures == 0);
    }
    process_tokens t({"tok-good"});
    auto o = f.rt.block_on(fresh_echo(f.endpoint()), 2);
    CHECK_MESSAGE(o.r, o.message);
  }

}  // TEST_SUITE
