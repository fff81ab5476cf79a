// TCP or RDMA for a new RPC connection (see negotiate.hpp).
#include "negotiate.hpp"

#include "asio_stream.hpp"
#include "mc/rpc/auth.hpp"
#include "mc/rpc/client.hpp"
#include "mc/rpc/protocol.hpp"
#include "mc/runtime/deadline.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace mc::rpc {
namespace {
std::atomic<std::uint64_t> n_client_tcp{0}, n_client_rdma{0}, n_client_fallback{0}, n_server_tcp{0}, n_server_rdma{0};
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

enum class first { capnp, hello, auth };

/// Whether the `n` bytes at `b` are a prefix of `magic` (4 bytes).
bool prefix_of(const char* b, ssize_t n, const char* magic) {
  return std::memcmp(b, magic, static_cast<std::size_t>(n)) == 0;
}

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
    // Compare what is there; decide as soon as one byte differs from both magics.
    const bool hello = prefix_of(b, n, hello_magic), auth = prefix_of(b, n, auth_magic);
    if (!hello && !auth) co_return first::capnp;
    if (n == 4) co_return auth ? first::auth : first::hello;
    // 1-3 bytes of "MCRP"/"MCAU" so far: the rest is in flight. The socket stays
    // readable, so wait a little instead of spinning (bounded by the caller).
    if (++short_reads > 1000) co_return mc::fail(mc::errc::rpc_fail);
    co_await mc::sleep_for(std::chrono::milliseconds(1));
  }
}

mc::errc io_errc(const boost::system::error_code& ec) {
  return ec == asio::error::operation_aborted ? mc::errc::cancelled : mc::errc::rpc_fail;
}

/// Server: reads the auth frame (its magic was peeked) and answers it.
/// access_denied when `tokens` is non-empty and the frame carries no
/// accepted token (the refusal is answered first, best effort).
mc::task<mc::result<void>> serve_auth(tcp::socket& s, const std::vector<std::string>& tokens) {
  std::byte head[auth_header_size];
  auto [ec, n] = co_await asio::async_read(s, asio::buffer(head), asio::as_tuple(asio::use_awaitable));
  if (ec || n != sizeof head) co_return mc::fail(io_errc(ec));
  const auto len = get32(head + 4);
  // A length beyond the bound is malformed: refuse without reading it.
  if (len > max_auth_token_bytes) co_return mc::fail(tokens.empty() ? mc::errc::rpc_fail : mc::errc::access_denied);
  std::array<char, max_auth_token_bytes> token{};
  if (len > 0) {
    auto [tec, tn] = co_await asio::async_read(s, asio::buffer(token.data(), len), asio::as_tuple(asio::use_awaitable));
    if (tec || tn != len) co_return mc::fail(io_errc(tec));
  }
  auth_status st = auth_status::accepted;
  if (!tokens.empty() && !auth_token_accepted(std::string_view(token.data(), len), tokens))
    st = len == 0 ? auth_status::required : auth_status::refused;
  std::byte reply[auth_reply_size];
  std::memcpy(reply, auth_reply_magic, 4);
  put32(reply + 4, static_cast<std::uint32_t>(st));
  auto [wec, wn] = co_await asio::async_write(s, asio::buffer(reply), asio::as_tuple(asio::use_awaitable));
  if (st != auth_status::accepted) co_return mc::fail(mc::errc::access_denied);
  if (wec || wn != sizeof reply) co_return mc::fail(io_errc(wec));
  co_return mc::result<void>{};
}

/// Client: sends the auth frame (the process's first token, or none) and
/// reads the answer. access_denied with a message when refused.
mc::task<mc::result<void>> client_auth(tcp::socket& s, std::string* message) {
  auto tokens = current_auth_tokens();
  const std::string_view token = tokens->empty() ? std::string_view() : std::string_view(tokens->front());
  std::byte frame[auth_header_size + max_auth_token_bytes];
  std::memcpy(frame, auth_magic, 4);
  put32(frame + 4, static_cast<std::uint32_t>(token.size()));
  if (!token.empty()) std::memcpy(frame + auth_header_size, token.data(), token.size());  // data() may be null
  auto [wec, wn] = co_await asio::async_write(s, asio::buffer(frame, auth_header_size + token.size()),
                                              asio::as_tuple(asio::use_awaitable));
  if (wec) {
    *message = "sending the auth frame: " + wec.message();
    co_return mc::fail(io_errc(wec));
  }
  std::byte reply[auth_reply_size];
  auto [rec, rn] = co_await asio::async_read(s, asio::buffer(reply), asio::as_tuple(asio::use_awaitable));
  if (rec || rn != sizeof reply || std::memcmp(reply, auth_reply_magic, 4) != 0) {
    *message = rec && rec != asio::error::eof ? "reading the auth answer: " + rec.message()
                                              : "the server closed the connection during the auth handshake";
    co_return mc::fail(io_errc(rec));
  }
  switch (static_cast<auth_status>(get32(reply + 4))) {
    case auth_status::accepted:
      co_return mc::result<void>{};
    case auth_status::required:
      *message =
          "access denied: the server requires an auth token (--auth_token, --auth_token_file, MC_AUTH_TOKEN or "
          "MC_AUTH_TOKEN_FILE)";
      co_return mc::fail(mc::errc::access_denied);
    case auth_status::refused:
      *message = "access denied: the server refused this process's auth token";
      co_return mc::fail(mc::errc::access_denied);
  }
  *message = "auth answer with unknown status " + std::to_string(get32(reply + 4));
  co_return mc::fail(mc::errc::rpc_fail);
}

mc::task<mc::result<kj::Own<stream_base>>> negotiate_server(tcp::socket& s, bool rdma, token_list tokens) {
  auto f = co_await peek_first(s);
  if (!f) co_return f.error();
  if (*f == first::auth) {
    if (auto a = co_await serve_auth(s, *tokens); !a) co_return a.error();
    f = co_await peek_first(s);
    if (!f) co_return f.error();
    if (*f == first::auth) co_return mc::fail(mc::errc::rpc_fail);  // one frame per connection
  } else if (!tokens->empty()) {
    co_return mc::fail(mc::errc::access_denied);  // auth on: the frame must come first
  }
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

mc::task<mc::result<kj::Own<stream_base>>> server_negotiate(tcp::socket s, mc::duration timeout, bool rdma,
                                                            token_list tokens) {
  if (!tokens) tokens = std::make_shared<const std::vector<std::string>>();
  co_return co_await mc::with_deadline(negotiate_server(s, rdma, std::move(tokens)), timeout);
}

mc::task<mc::result<kj::Own<stream_base>>> client_negotiate(tcp::socket s, bool* fell_back, std::string* message) {
  *fell_back = false;
  // The auth frame goes first, before the RDMA hello and before Cap'n Proto.
  if (auto a = co_await client_auth(s, message); !a) co_return a.error();
  if (current_protocol() != protocol::rdma) co_return kj::Own<stream_base>(kj::heap<asio_stream>(std::move(s)));
  auto r = co_await negotiate_client(s, fell_back, message);
  if (!r && message->empty()) *message = "RDMA handshake failed";
  co_return r;
}

}  // namespace mc::rpc::detail
