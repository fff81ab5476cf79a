// TransferEngine calls over TCP, initiator side: one request and its answer
// on a pooled connection (wire ops call_req / call_resp). tcp_call waits for
// or opens a connection (the caller bounds it with with_deadline);
// tcp_call_idle takes an idle one and is bounded by the thread's deadline
// queue. The entry point is engine_call.cpp, the target's side serve_call
// (tcp_server.cpp).
#include "engine_impl.hpp"
#include "io.hpp"
#include "wire.hpp"

#include <boost/asio/buffer.hpp>

#include <array>
#include <optional>
#include <span>
#include <string>
#include <utility>

namespace mc::transfer::detail {

namespace {

task<result<std::unique_ptr<pooled_conn<tcp_socket>>>> connect_pooled(engine_impl& eng, thread_state& ts,
                                                                      std::string endpoint) {
  auto s = co_await connect_tcp(ts.ex, std::move(endpoint));
  if (!s) co_return s.error();
  co_return std::make_unique<pooled_conn<tcp_socket>>(std::move(*s), ts.live, &eng.counters_.outbound);
}

/// Receives a call's answer: its header and reply bytes with as few system
/// calls as arrive (one, usually, besides the try right after the request),
/// straight into `rb` and `reply`; `got` counts the bytes received (also on
/// error). Each receive is recv_and_wait's (io.hpp): `rb` and `reply` belong
/// to the call until it returns, and the operation completes before. Nothing
/// follows an answer on the connection, so reading up to the reply's room is
/// safe; bytes beyond what the header announces are a protocol violation.
task<result<header>> recv_call_answer(tcp_socket& s, header_bytes& rb, std::span<std::byte> reply, std::size_t& got) {
  got = 0;
  std::size_t total = header_size + reply.size();
  std::optional<header> h;
  for (;;) {
    std::array<boost::asio::mutable_buffer, 2> bufs{};
    if (got < header_size) {
      bufs[0] = boost::asio::buffer(rb.data() + got, header_size - got);
      bufs[1] = boost::asio::buffer(reply.data(), total - header_size);
    } else {
      bufs[0] = boost::asio::buffer(reply.data() + (got - header_size), total - got);
    }
    auto n = co_await recv_and_wait(s, bufs);
    if (!n) co_return n.error();
    got += *n;
    if (!h && got >= header_size) {
      auto d = decode(rb);
      if (!d || d->length > reply.size()) co_return fail(errc::transfer_fail);
      h = *d;
      total = header_size + static_cast<std::size_t>(d->length);
      if (got > total) co_return fail(errc::transfer_fail);
    }
    if (h && got == total) co_return *h;
  }
}

/// A call's answer status as an error: a known mc code as itself, anything
/// else (a peer's unknown code) transfer_fail.
boost::system::error_code call_status_error(std::int32_t s) noexcept {
  auto e = mc::errc_from_value(s);
  return make_error_code(e && *e != errc::ok ? *e : errc::transfer_fail);
}

/// What one call exchange on a leased connection gave: the reply's size or
/// the error; `stale`: it failed before any byte of an answer on a reused
/// connection (the peer probably restarted; worth once more on a fresh one).
struct exchange_outcome {
  mc::result<std::size_t> value = fail(errc::transfer_fail);
  bool stale = false;
};

/// Sends the call on `c` and receives its answer. The connection is kept
/// for reuse only after a complete, well-formed answer; discarded otherwise.
task<exchange_outcome> exchange_call(conn_lease<tcp_socket>& c, std::span<const std::byte> request,
                                     std::span<std::byte> reply) {
  c.begin();
  header h;
  h.op = wire_op::call_req;
  h.request_id = c->next_id++;
  h.address = reply.size();
  h.length = request.size();
  header_bytes hb;
  encode(h, hb);
  std::array<iovec, 2> iov{iovec{hb.data(), header_size},
                           iovec{const_cast<std::byte*>(request.data()), request.size()}};
  header_bytes rb;
  std::size_t received = 0;
  auto sent = co_await send_all(c->sock, iov.data(), 2);
  auto resp = sent ? co_await recv_call_answer(c->sock, rb, reply, received) : mc::result<header>(sent.error());
  exchange_outcome out;
  if (!resp) {
    c.discard();
    if (mc::is(resp.error(), errc::cancelled) || received > 0) {
      out.value = resp.error();
    } else if (c.reused()) {
      out.stale = true;
    } else {
      // A fresh connection closed with no answer: a target that predates
      // calls (it closes on an unknown op), or one going away.
      out.value = fail(errc::unsupported);
    }
    co_return out;
  }
  if (resp->op != wire_op::call_resp || resp->request_id != h.request_id || resp->token != 0 ||
      (resp->status != 0 && resp->length != 0)) {
    c.discard();
    co_return out;  // transfer_fail
  }
  c->answered_id = c->next_id;
  c.keep();
  if (resp->status != 0)
    out.value = call_status_error(resp->status);
  else
    out.value = static_cast<std::size_t>(resp->length);
  co_return out;
}

}  // namespace

task<mc::result<std::size_t>> tcp_call(engine_impl& eng, thread_state& ts, const std::string& endpoint,
                                       std::span<const std::byte> request, std::span<std::byte> reply) {
  auto* pool = ts.tcp_pools.get(endpoint, ts.ex, eng.opts_.connections_per_peer, eng.opts_.max_peers, &ts.stopping);
  if (!pool) co_return fail(errc::no_available_handle);
  // One pointer captured: fits std::function's inline storage (no allocation per call).
  struct target {
    engine_impl& eng;
    thread_state& ts;
    const std::string& endpoint;
  } to{eng, ts, endpoint};
  const peer_pool<tcp_socket>::connect_fn connect = [t = &to] { return connect_pooled(t->eng, t->ts, t->endpoint); };
  // A pooled connection that fails before its answer is probably stale (the
  // peer restarted): once more on a fresh one. So a call may reach a handler
  // twice (handlers are idempotent: the store's reads are).
  for (int attempt = 0;; ++attempt) {
    auto got = co_await pool->acquire(connect, true, eng.opts_.call_connections_per_peer);
    if (!got) co_return got.error();
    if (!*got) co_return fail(errc::no_available_handle);
    auto c = std::move(*got);
    auto o = co_await exchange_call(c, request, reply);
    if (!o.stale) co_return std::move(o.value);
    if (attempt > 0) co_return fail(errc::unsupported);
    pool->drop_idle();
  }
}

task<std::optional<mc::result<std::size_t>>> tcp_call_idle(engine_impl& eng, thread_state& ts,
                                                           const std::string& endpoint,
                                                           std::span<const std::byte> request,
                                                           std::span<std::byte> reply, mc::time_point deadline) {
  auto cs = co_await boost::asio::this_coro::cancellation_state;
  if (cs.cancelled() != boost::asio::cancellation_type::none) co_return mc::result<std::size_t>(fail(errc::cancelled));
  auto* pool = ts.tcp_pools.get(endpoint, ts.ex, eng.opts_.connections_per_peer, eng.opts_.max_peers, &ts.stopping);
  if (!pool) co_return std::nullopt;
  auto c = pool->try_idle();
  if (!c) co_return std::nullopt;
  if (!ts.deadlines) ts.deadlines = mc::deadline_queue::make(ts.ex);
  // At the deadline the connection is interrupted (what it waits on ends at
  // once, and whatever it would wait on next); the exchange then fails and
  // the connection is discarded.
  mc::deadline_queue::entry dl;
  ts.deadlines->add(
      dl, deadline, [](void* s) noexcept { interrupt_socket(*static_cast<tcp_socket*>(s)); }, &c->sock);
  exchange_outcome o;
  try {
    o = co_await exchange_call(c, request, reply);
  } catch (const boost::system::system_error& e) {
    // The caller was cancelled between two waits (Asio throws at the next
    // one): an error value like every other cancellation.
    if (!mc::detail::is_abort(e)) throw;
    co_return mc::result<std::size_t>(fail(errc::cancelled));
  }
  dl.remove();
  if (dl.fired()) {
    c.discard();  // interrupted, even if the answer had arrived just before
    if (!o.value) co_return mc::result<std::size_t>(fail(errc::timeout));
  }
  if (o.stale) {
    pool->drop_idle();
    co_return std::nullopt;  // once more, on a fresh connection
  }
  co_return std::move(o.value);
}

}  // namespace mc::transfer::detail
