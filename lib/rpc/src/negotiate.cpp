// TCP or RDMA for a new RPC connection (see negotiate.hpp).
#include "negotiate.hpp"

#include "asio_stream.hpp"
#include "mc/rpc/client.hpp"
#include "mc/rpc/protocol.hpp"
#include "mc/runtime/deadline.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace mc::rpc {
namespace {
std::atomic<std::uint64_t> n_client_tcp{0}, n_client_rdma{0}, n_client_fallback{0}, n_server_tcp{0},
    n_server_rdma{0};
}  // namespace

connection_counters connection_counts() noexcept {
  return {n_client_tcp.load(), n_client_rdma.load(), n_client_fallback.load(), n_server_tcp.load(),
          n_server_rdma.load()};
}
}  // namespace mc::rpc

namespace mc::rpc::detail {

namespace asio = boost::asio;

void note_connection(bool server, bool rdma, bool fell_back) noexcept {
  if (server) {
    ++(rdma ? n_server_rdma : n_server_tcp);
  } else {
    ++(rdma ? n_client_rdma : n_client_tcp);
    if (fell_back) ++n_client_fallback;
  }
}
using tcp = asio::ip::tcp;

namespace {

enum class first { capnp, hello };

/// Peeks at the first bytes without consuming them.
mc::task<mc::result<first>> peek_first(tcp::socket& s) {
  for (int short_reads = 0;;) {
    auto [ec] = co_await s.async_wait(tcp::socket::wait_read, asio::as_tuple(asio::use_awaitable));
    if (ec) co_return mc::fail(ec == asio::error::operation_aborted ? mc::errc::cancelled : mc::errc::rpc_fail);
    char b[4];
    ssize_t n = ::recv(s.native_handle(), b, sizeof b, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) co_return mc::fail(mc::errc::rpc_fail);  // closed before saying anything
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      co_return mc::fail(mc::errc::rpc_fail);
    }
    // Compare what is there; decide as soon as one byte differs.
    if (std::memcmp(b, hello_magic, static_cast<std::size_t>(n)) != 0) co_return first::capnp;
    if (n == 4) co_return first::hello;
    // 1-3 bytes of "MCRP" so far: the rest is in flight. The socket stays
    // readable, so wait a little instead of spinning (bounded by the caller).
    if (++short_reads > 1000) co_return mc::fail(mc::errc::rpc_fail);
    co_await mc::sleep_for(std::chrono::milliseconds(1));
  }
}

mc::task<mc::result<kj::Own<stream_base>>> negotiate_server(tcp::socket& s, bool rdma) {
  auto f = co_await peek_first(s);
  if (!f) co_return f.error();
  if (*f == first::capnp) co_return kj::Own<stream_base>(kj::heap<asio_stream>(std::move(s)));
  std::byte hello[hello_size];
  auto [ec, n] = co_await asio::async_read(s, asio::buffer(hello), asio::as_tuple(asio::use_awaitable));
  if (ec || n != hello_size) co_return mc::fail(mc::errc::rpc_fail);
  if (std::memcmp(hello, hello_magic, 8) != 0) co_return mc::fail(mc::errc::rpc_fail);
  auto r = co_await rdma_accept(s, hello, rdma);
  if (!r) co_return r.error();
  if (*r) co_return std::move(*r);
  co_return kj::Own<stream_base>(kj::heap<asio_stream>(std::move(s)));  // answered 1/2: TCP
}

mc::task<mc::result<kj::Own<stream_base>>> negotiate_client(tcp::socket& s, bool* fell_back, std::string* message) {
  auto r = co_await rdma_connect(s, message);
  if (!r) co_return r.error();
  if (*r) co_return std::move(*r);
  *fell_back = true;
  co_return kj::Own<stream_base>(kj::heap<asio_stream>(std::move(s)));
}

}  // namespace

mc::task<mc::result<kj::Own<stream_base>>> server_negotiate(tcp::socket s, mc::duration timeout, bool rdma) {
  co_return co_await mc::with_deadline(negotiate_server(s, rdma), timeout);
}

mc::task<mc::result<kj::Own<stream_base>>> client_negotiate(tcp::socket s, const std::string& endpoint,
                                                             bool* fell_back, std::string* message) {
  *fell_back = false;
  if (current_protocol() != protocol::rdma) co_return kj::Own<stream_base>(kj::heap<asio_stream>(std::move(s)));
  auto r = co_await negotiate_client(s, fell_back, message);
  if (!r && message->empty()) *message = "RDMA handshake with " + endpoint + " failed";
  co_return r;
}

}  // namespace mc::rpc::detail
