// The first bytes of a connection choose TCP or RDMA (lib/rpc/src/negotiate.hpp):
// what a TCP-only server does with RDMA hellos, broken hellos and silence.
#include "raw_socket.hpp"
#include "echo_call.hpp"
#include "rpc_fixture.hpp"
#include "test_support.hpp"

#include <array>
#include <cstring>
#include <thread>

using namespace mc::rpc::test;
using mc::errc;
using mc::task;

namespace {

std::array<std::uint8_t, 64> hello(const char* magic = "MCRPCRD1") {
  std::array<std::uint8_t, 64> h{};
  std::memcpy(h.data(), magic, 8);
  const std::uint32_t credits = 32, chunk = 16384;
  std::memcpy(h.data() + 56, &credits, 4);
  std::memcpy(h.data() + 60, &chunk, 4);
  return h;
}

}  // namespace

TEST_SUITE("rpc_negotiate") {
  TEST_CASE("an RDMA hello to a TCP-only server is answered 'TCP only' and the connection stays usable") {
    rpc_fixture f;
    int fd = raw_connect(f.srv->port());
    REQUIRE(fd >= 0);
    auto h = hello();
    REQUIRE(raw_send(fd, h.data(), h.size()));
    std::array<std::uint8_t, 68> reply{};
    REQUIRE(raw_read(fd, reply.data(), reply.size(), std::chrono::seconds(5)));
    CHECK(std::memcmp(reply.data(), "MCRPCRA1", 8) == 0);
    std::uint32_t status = 0;
    std::memcpy(&status, reply.data() + 8, 4);
    CHECK(status == 1);
    // Cap'n Proto continues on this connection: garbage now is a capnp error,
    // and the server keeps serving everyone else.
    CHECK_FALSE(raw_wait_closed(fd, std::chrono::milliseconds(100)));
    ::close(fd);
    CHECK(f.rt.block_on(echo(f.endpoint(), 1000), 2));
    CHECK(f.srv->stats().rdma == 0);
  }

  TEST_CASE("broken hellos close only their own connection") {
    auto o = local_options();
    o.idle_timeout = std::chrono::milliseconds(300);
    rpc_fixture f(o);
    const auto failed0 = f.srv->stats().handshake_failed;
    SUBCASE("the magic prefix with a wrong tail") {
      int fd = raw_connect(f.srv->port());
      REQUIRE(fd >= 0);
      auto h = hello("MCRPxxxx");
      REQUIRE(raw_send(fd, h.data(), h.size()));
      CHECK(raw_wait_closed(fd, std::chrono::seconds(5)));
      ::close(fd);
      // Counted right after the close (another thread): give it a moment.
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (f.srv->stats().handshake_failed == failed0 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      CHECK(f.srv->stats().handshake_failed > failed0);
    }
    SUBCASE("a truncated hello, then close") {
      int fd = raw_connect(f.srv->port());
      REQUIRE(fd >= 0);
      auto h = hello();
      REQUIRE(raw_send(fd, h.data(), 20));
      ::shutdown(fd, SHUT_WR);
      CHECK(raw_wait_closed(fd, std::chrono::seconds(5)));
      ::close(fd);
    }
    SUBCASE("two bytes of the magic, then silence: closed by the idle timeout") {
      int fd = raw_connect(f.srv->port());
      REQUIRE(fd >= 0);
      REQUIRE(raw_send(fd, "MC", 2));
      auto t0 = std::chrono::steady_clock::now();
      CHECK(raw_wait_closed(fd, std::chrono::seconds(5)));
      CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(250));
      ::close(fd);
    }
    SUBCASE("a closed connection before any byte") {
      int fd = raw_connect(f.srv->port());
      REQUIRE(fd >= 0);
      ::close(fd);
    }
    CHECK(f.rt.block_on(echo(f.endpoint(), 4097), 2));  // everyone else is still served
    CHECK(f.rt.block_on(echo(f.endpoint(), 3), 3));
  }

}  // TEST_SUITE
