// The RDMA half of an RPC connection's handshake (negotiate.hpp) and the
// process's RPC device (MC_RPC_PROTOCOL=rdma).
//
// Auth (mc/rpc/auth.hpp) happens before anything here: negotiate.cpp's
// client_negotiate() sends the auth frame and waits for "accepted" before it
// calls rdma_connect(), and server_negotiate() checks the frame before it
// reads a hello and calls rdma_accept(). So no queue pair is created, and no
// QP number is revealed, for a peer that has not presented an accepted token.
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

void encode_tail(std::byte* p, const mc::verbs::qp_info& q) {
  mc::verbs::encode_qp_info(q, p);
  put32(p + mc::verbs::qp_info_size, rdma_data_credits);
  put32(p + mc::verbs::qp_info_size + 4, rdma_chunk_bytes);
}

/// Checks the peer's credits/chunk against ours (same constants both sides).
bool tail_ok(const std::byte* p) {
  return get32(p + mc::verbs::qp_info_size) == rdma_data_credits &&
         get32(p + mc::verbs::qp_info_size + 4) == rdma_chunk_bytes;
}

mc::task<bool> send_reply(tcp::socket& s, std::uint32_t status, const rdma_stream* st) {
  std::byte out[hello_reply_size] = {};
  std::memcpy(out, reply_magic, 8);
  put32(out + 8, status);
  if (st) encode_tail(out + 12, st->local_info());
  auto [ec, n] = co_await asio::async_write(s, asio::buffer(out), asio::as_tuple(asio::use_awaitable));
  co_return !ec && n == sizeof out;
}

std::atomic<bool> warned_server_setup{false};

}  // namespace

mc::task<mc::result<kj::Own<stream_base>>> rdma_accept(tcp::socket& s, const std::byte* hello, bool enabled) {
  auto dev = enabled ? current_device() : nullptr;
  if (!dev || !tail_ok(hello + 8)) {
    // status 1: this server has no RDMA control plane (or another framing):
    // continue over TCP.
    if (!co_await send_reply(s, 1, nullptr)) co_return mc::fail(mc::errc::rpc_fail);
    co_return kj::Own<stream_base>();
  }
  std::string why;
  auto st = rdma_stream::create(dev, s.get_executor(), &why);
  if (st && !(*st)->connect(mc::verbs::decode_qp_info(hello + 8), &why)) st = mc::fail(mc::errc::rpc_fail);
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
  std::byte hello[hello_size] = {};
  std::memcpy(hello, hello_magic, 8);
  encode_tail(hello + 8, (*st)->local_info());
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
  const auto status = get32(reply + 8);
  if (status == 1 || status == 2) {
    *message = status == 1 ? "the server has no RDMA control plane (MC_RPC_PROTOCOL is not rdma there)"
                           : "the server could not set up RDMA for this connection";
    co_return kj::Own<stream_base>();
  }
  if (status != 0 || !tail_ok(reply + 12)) {
    *message = "RDMA handshake reply with status " + std::to_string(status) + " or incompatible buffer sizes";
    co_return mc::fail(mc::errc::rpc_fail);
  }
  if (!(*st)->connect(mc::verbs::decode_qp_info(reply + 12), message)) co_return mc::fail(mc::errc::rpc_fail);
  (*st)->start(std::move(s));
  co_return kj::Own<stream_base>(kj::mv(*st));
}

}  // namespace mc::rpc::detail
