// interrupt_socket (pool.hpp), what engine::stop() uses on every connection
// and listener: a pending wait or accept always completes. With Asio 1.81's
// io_uring backend, close() of a socket with an operation in flight loses
// that operation's completion as soon as the socket's state is recycled (a
// new socket opened on the same context): stop() then waited forever.
#include "pool.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <doctest/doctest.h>

#include <chrono>

namespace asio = boost::asio;
using mc::transfer::detail::interrupt_socket;

TEST_SUITE("transfer_interrupt") {
  TEST_CASE("an interrupted socket completes its pending wait even when its state is recycled at once") {
    asio::io_context ctx(1);
    asio::local::stream_protocol::socket a(ctx), b(ctx);
    asio::local::connect_pair(a, b);
    int calls = 0;
    boost::system::error_code got;
    a.async_wait(asio::socket_base::wait_read, [&](boost::system::error_code ec) {
      ++calls;
      got = ec;
    });
    ctx.poll();  // the wait is in the kernel
    interrupt_socket(a);
    asio::local::stream_protocol::socket c(ctx), d(ctx);
    asio::local::connect_pair(c, d);  // would reuse a closed socket's state
    ctx.run_for(std::chrono::seconds(5));
    REQUIRE(calls == 1);
    CHECK(got == asio::error::operation_aborted);
    // Later I/O fails at once instead of waiting for the peer.
    char byte = 0;
    boost::system::error_code ec;
    a.non_blocking(true, ec);
    CHECK(a.read_some(asio::buffer(&byte, 1), ec) == 0);
    CHECK(ec);
  }

  TEST_CASE("an interrupted listener completes its pending accept") {
    asio::io_context ctx(1);
    asio::ip::tcp::acceptor acc(ctx, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    asio::ip::tcp::socket peer(ctx);
    int calls = 0;
    acc.async_accept(peer, [&](boost::system::error_code ec) {
      ++calls;
      CHECK(ec);
    });
    ctx.poll();
    interrupt_socket(acc);
    asio::ip::tcp::socket other(ctx);
    other.open(asio::ip::tcp::v4());
    ctx.run_for(std::chrono::seconds(5));
    CHECK(calls == 1);
  }
}
