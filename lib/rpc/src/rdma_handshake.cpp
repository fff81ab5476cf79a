// The RDMA half of an RPC connection's handshake (negotiate.hpp) and the
// process's RPC device (MC_RPC_PROTOCOL=rdma).
//
// Auth (mc/rpc/auth.hpp) happens before anything here: negotiate.cpp's
// client_negotiate() sends the auth frame and waits for "accepted" before it
// calls rdma_connect(), and server_negotiate() checks the frame before it
// reads a hello and calls rdma_accept(). So no queue pair is created, and no
// QP number is revealed, for a peer that has not presented an accepted token.
#include "rdma_hello.hpp"
#include "rdma_stream.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace mc::rpc::detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

std::mutex device_mutex;
std::shared_ptr<mc::verbs::device> rpc_device;  // set once, never reset

std::shared_ptr<mc::verbs::device> current_device() {
  std::lock_guard lk(device_mutex);
  return rpc_device;
}

}  // namespace

bool rdma_rpc_built() noexcept { return true; }

bool rdma_rpc_open(const std::vector<std::string>& names, std::string* message) {
  std::lock_guard lk(device_mutex);
  if (rpc_device) return true;
  try {
    mc::verbs::device_options o;
    o.device_names = names;
    o.who = "MC_RPC_PROTOCOL=rdma";
    rpc_device = std::make_shared<mc::verbs::device>(o);
    return true;
  } catch (const std::exception& e) {
    *message = e.what();
    return false;
  }
}

std::string rdma_rpc_device_name() {
  auto d = current_device();
  return d ? d->name() : std::string();
}

// ---- handshake --------------------------------------------------------------

namespace {

mc::task<bool> send_reply(tcp::socket& s, std::uint32_t status, const rdma_stream* st) {
  std::byte out[hello_reply_size];
  const auto q = st ? st->local_info() : mc::verbs::qp_info{};
  encode_hello_reply(out, status, st ? &q : nullptr);
  auto [ec, n] = co_await asio::async_write(s, asio::buffer(out), asio::as_tuple(asio::use_awaitable));
  co_return !ec && n == sizeof out;
}

std::atomic<bool> warned_server_setup{false};

}  // namespace

mc::task<mc::result<kj::Own<stream_base>>> rdma_accept(tcp::socket& s, const std::byte* hello, bool enabled) {
  auto dev = enabled ? current_device() : nullptr;
  const parsed_hello h = parse_hello(hello);
  if (!dev || h.verdict != hello_verdict::ok) {
    // status 1: this server has no RDMA control plane (or another framing):
    // continue over TCP. status 2: the client's qp_info is invalid.
    const std::uint32_t status = dev && h.verdict == hello_verdict::bad_qp ? 2 : 1;
    if (!co_await send_reply(s, status, nullptr)) co_return mc::fail(mc::errc::rpc_fail);
    co_return kj::Own<stream_base>();
  }
  std::string why;
  auto st = rdma_stream::create(dev, s.get_executor(), &why);
  if (st && !(*st)->connect(h.qp, &why)) st = mc::fail(mc::errc::rpc_fail);
  if (!st) {
    if (!warned_server_setup.exchange(true))
      std::fprintf(stderr, "mc::rpc: cannot set up RPC over RDMA for a client (%s); serving it over TCP\n",
                   why.c_str());
    if (!co_await send_reply(s, 2, nullptr)) co_return mc::fail(mc::errc::rpc_fail);
    co_return kj::Own<stream_base>();
  }
  if (!co_await send_reply(s, 0, st->get())) co_return mc::fail(mc::errc::rpc_fail);
  (*st)->start(std::move(s));
  co_return kj::Own<stream_base>(kj::mv(*st));
}

mc::task<mc::result<kj::Own<stream_base>>> rdma_connect(tcp::socket& s, std::string* message) {
  auto dev = current_device();
  if (!dev) {
    *message = "MC_RPC_PROTOCOL=rdma but no RDMA device is open in this process";
    co_return mc::fail(mc::errc::rpc_fail);
  }
  auto st = rdma_stream::create(dev, s.get_executor(), message);
  if (!st) co_return st.error();
  std::byte hello[hello_size];
  encode_hello(hello, (*st)->local_info());
  auto [wec, wn] = co_await asio::async_write(s, asio::buffer(hello), asio::as_tuple(asio::use_awaitable));
  if (wec || wn != sizeof hello) {
    *message = "sending the RDMA hello: " + wec.message();
    co_return mc::fail(wec == asio::error::operation_aborted ? mc::errc::cancelled : mc::errc::rpc_fail);
  }
  std::byte reply[hello_reply_size];
  auto [rec, rn] = co_await asio::async_read(s, asio::buffer(reply), asio::as_tuple(asio::use_awaitable));
  if (rec || rn != sizeof reply || std::memcmp(reply, reply_magic, 8) != 0) {
    *message = rec == asio::error::eof || (!rec && rn != sizeof reply)
                   ? std::string(
                         "the server closed the connection during the RDMA handshake "
                         "(a server too old for RPC over RDMA?)")
                   : "bad or missing RDMA handshake reply" + (rec ? ": " + rec.message() : std::string());
    co_return mc::fail(rec == asio::error::operation_aborted ? mc::errc::cancelled : mc::errc::rpc_fail);
  }
  const parsed_reply r = parse_hello_reply(reply);
  if (r.verdict == reply_verdict::fallback) {
    *message = r.status == 1 ? "the server has no RDMA control plane (MC_RPC_PROTOCOL is not rdma there)"
                             : "the server could not set up RDMA for this connection";
    co_return kj::Own<stream_base>();
  }
  if (r.verdict != reply_verdict::ok) {
    *message = "RDMA handshake reply with status " + std::to_string(r.status) +
               ", incompatible buffer sizes or an invalid queue pair description";
    co_return mc::fail(mc::errc::rpc_fail);
  }
  if (!(*st)->connect(r.qp, message)) co_return mc::fail(mc::errc::rpc_fail);
  (*st)->start(std::move(s));
  co_return kj::Own<stream_base>(kj::mv(*st));
}

}  // namespace mc::rpc::detail
