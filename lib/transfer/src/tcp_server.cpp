// TCP transport, target side: serves READ/WRITE requests against registered
// regions. Every request is validated (structure, token, whole range inside
// one region) before a byte moves; a refused WRITE's payload is drained.
// Fewer system calls per small request: a WRITE's payload is received
// together with the start of the next request's header, and header-only
// answers are queued and sent together when nothing more is readable.
#include "engine_impl.hpp"
#include "io.hpp"
#include "wire.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/socket_base.hpp>

#include <array>
#include <cstdio>

namespace mc::transfer::detail {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

/// Answers of a connection not sent yet: header-only answers (write
/// acknowledgements, refusals) are queued and leave in one send when the
/// connection has nothing more to read for the moment, before a read
/// answer, or when the queue is full. Never held across a wait for input,
/// so the initiator always gets every answer to what it sent.
struct answer_queue {
  static constexpr std::size_t capacity = 32;
  std::array<header_bytes, capacity> q;
  std::size_t n = 0;
};

struct served_conn final : closable {
  served_conn(tcp_socket s, std::unordered_set<closable*>& live) : sock(std::move(s)), reg(live, this) {}
  void close_now() noexcept override { interrupt_socket(sock); }
  tcp_socket sock;
  live_registration reg;
  std::shared_ptr<void> rdma_qp;  // target-side QP of an rdma_connect, lives as long as the connection
  answer_queue out;
  header_bytes next;          // the next request's header, as far as received
  std::size_t next_have = 0;  // its bytes received so far (read along with a payload)
};

task<bool> flush(served_conn& c) {
  if (c.out.n == 0) co_return true;
  const auto bytes = c.out.n * header_size;
  c.out.n = 0;
  auto r = co_await send_all(c.sock, c.out.q.data(), bytes);
  co_return static_cast<bool>(r);
}

/// Queues a header-only answer (sends the queue when it is full).
task<bool> answer(served_conn& c, wire_op op, std::uint64_t id, errc status) {
  header h;
  h.op = op;
  h.request_id = id;
  h.status = static_cast<std::int32_t>(status);
  encode(h, c.out.q[c.out.n++]);
  if (c.out.n < answer_queue::capacity) co_return true;
  const bool ok = co_await flush(c);
  co_return ok;
}

/// Waits until the socket is readable, sending the queued answers first.
task<bool> wait_input(served_conn& c) {
  const bool flushed = co_await flush(c);
  if (!flushed) co_return false;
  auto r = co_await wait_ready(c.sock, tcp_socket::wait_read);
  co_return static_cast<bool>(r);
}

/// Receives the next request header (part of it may have arrived with the
/// previous payload).
task<bool> next_header(served_conn& c) {
  while (c.next_have < header_size) {
    errc err{};
    ssize_t r = recv_once(c.sock.native_handle(), c.next.data() + c.next_have, header_size - c.next_have, err);
    if (r < 0) co_return false;
    if (r == 0) {
      if (!co_await wait_input(c)) co_return false;
      continue;
    }
    c.next_have += static_cast<std::size_t>(r);
  }
  c.next_have = 0;
  co_return true;
}

/// Receives a WRITE's n payload bytes straight into region memory at p, and
/// in the same system calls as much of the next request's header as has
/// arrived. Every system call that touches the region runs under its access
/// lock; when the region is revoked midway the rest is drained (the
/// connection stays usable) and `revoked` is returned.
task<region_io> recv_payload(served_conn& c, const region_entry& e, std::byte* p, std::uint64_t n) {
  rcvlowat lowat(c.sock.native_handle());
  while (n > 0) {
    ssize_t r;
    int saved = 0;
    {
      access_guard g(e);
      if (!g) {
        auto d = co_await discard(c.sock, n);
        co_return d ? region_io::revoked : region_io::failed;
      }
      iovec iov[2] = {{p, static_cast<std::size_t>(n)}, {c.next.data(), header_size}};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = 2;
      peer_memory_scope peer_bytes;  // see peer_memory.hpp
      r = ::recvmsg(c.sock.native_handle(), &msg, MSG_DONTWAIT);
      saved = errno;
    }
    if (r == 0) co_return region_io::failed;  // orderly shutdown mid-payload
    if (r < 0) {
      if (saved == EINTR) continue;
      if (saved != EAGAIN && saved != EWOULDBLOCK) co_return region_io::failed;
      lowat.before_wait(n);
      if (!co_await wait_input(c)) co_return region_io::failed;
      continue;
    }
    const auto got = static_cast<std::uint64_t>(r);
    if (got > n) c.next_have = static_cast<std::size_t>(got - n);
    p += std::min(got, n);
    n -= std::min(got, n);
  }
  co_return region_io::ok;
}

/// One request; false when the connection must be closed.
task<bool> serve_one(engine_impl& eng, served_conn& c, const header& h) {
  auto& ctr = eng.counters_;
  if (h.op == wire_op::read_req) {
    if (!co_await flush(c)) co_return false;  // answers leave in request order
    auto e = eng.registry_->find(h.address, h.length, h.token, region_access::remote_read);
    if (!e) {
      bump(ctr.served_rejects);
      co_return co_await answer(c, wire_op::read_resp, h.request_id, errc::access_denied);
    }
    header ok;
    ok.op = wire_op::read_resp;
    ok.request_id = h.request_id;
    ok.length = h.length;
    header_bytes hb;
    encode(ok, hb);
    auto r = co_await send_from_region(c.sock, **e, hb.data(), hb.size(), (*e)->ptr(h.address), h.length);
    if (r == region_io::revoked) bump(ctr.served_rejects);
    if (r != region_io::ok) co_return false;  // mid-payload: only closing tells the initiator
    bump(ctr.served_read_ops);
    bump(ctr.served_read_bytes, h.length);
    co_return true;
  }
  if (h.op == wire_op::write_req) {
    auto e = eng.registry_->find(h.address, h.length, h.token, region_access::remote_write);
    if (!e) {
      bump(ctr.served_rejects);
      if (!co_await flush(c)) co_return false;
      if (!co_await discard(c.sock, h.length)) co_return false;
      co_return co_await answer(c, wire_op::write_resp, h.request_id, errc::access_denied);
    }
    auto r = co_await recv_payload(c, **e, (*e)->ptr(h.address), h.length);
    if (r == region_io::failed) co_return false;
    if (r == region_io::revoked) {
      bump(ctr.served_rejects);
      co_return co_await answer(c, wire_op::write_resp, h.request_id, errc::access_denied);
    }
    bump(ctr.served_write_ops);
    bump(ctr.served_write_bytes, h.length);
    co_return co_await answer(c, wire_op::write_resp, h.request_id, errc::ok);
  }
  co_return false;  // not a request this socket serves
}

task<void> serve(engine_impl* eng, [[maybe_unused]] gate_holder g, tcp_socket sock) {
  auto& ts = eng->this_thread_state();
  served_conn c(std::move(sock), ts.live);
  if (ts.stopping) co_return;
  bump(eng->counters_.inbound);
  boost::system::error_code ig;
  c.sock.set_option(tcp::no_delay(true), ig);
  c.sock.set_option(asio::socket_base::keep_alive(true), ig);
  c.sock.non_blocking(true, ig);
  for (;;) {
    if (!co_await next_header(c)) break;  // EOF, reset, or stop
    auto h = decode(c.next);
    if (!h) break;  // protocol violation: close
    if (h->op >= wire_op::rdma_connect) {
      if (!co_await flush(c)) break;
      if (!co_await rdma_serve(*eng, c.sock, *h, c.rdma_qp)) break;
      continue;
    }
    if (!co_await serve_one(*eng, c, *h)) break;
  }
  // The answers to every complete request before the end (EOF, a protocol
  // violation) still go out, as they would have one by one.
  co_await flush(c);
  eng->counters_.inbound.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace

struct tcp_server::state {
  explicit state(engine_impl& e) : eng(e), acceptor(e.rt_.context(0)) {}
  engine_impl& eng;
  tcp::acceptor acceptor;
  std::size_t next_thread = 0;
};

tcp_server::tcp_server(engine_impl& eng) : s_(std::make_unique<state>(eng)) {}
tcp_server::~tcp_server() = default;

mc::result<std::uint16_t> tcp_server::listen(const std::string& host, std::uint16_t port) {
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) {
    std::fprintf(stderr, "transfer: bind_host '%s' is not an IP address\n", host.c_str());
    return fail(errc::invalid_params);
  }
  tcp::endpoint ep(addr, port);
  auto& a = s_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    std::fprintf(stderr, "transfer: cannot listen on %s:%u: %s\n", host.c_str(), unsigned(port), ec.message().c_str());
    a.close(ec);
    return fail(errc::io_error);
  }
  return a.local_endpoint().port();
}

void tcp_server::start_accepting() {
  asio::co_spawn(
      s_->eng.rt_.executor(0),
      [](state* st, [[maybe_unused]] gate_holder g) -> task<void> {
        auto& eng = st->eng;
        for (;;) {
          std::size_t t = st->next_thread++ % eng.rt_.size();
          tcp_socket s(eng.rt_.context(t));
          auto [ec] = co_await st->acceptor.async_accept(s, asio::as_tuple(asio::use_awaitable));
          if (eng.stopping_.load() || !st->acceptor.is_open()) {
            st->acceptor.close(ec);  // nothing is pending on it any more
            break;
          }
          if (ec) {
            // EMFILE and friends: back off briefly rather than spin.
            asio::steady_timer backoff(co_await asio::this_coro::executor, std::chrono::milliseconds(10));
            co_await backoff.async_wait(asio::as_tuple(asio::use_awaitable));
            continue;
          }
          if (eng.counters_.inbound.load(std::memory_order_relaxed) >= eng.opts_.max_inbound_connections) {
            s.close(ec);
            continue;
          }
          auto holder = eng.gate_.try_enter();
          if (!holder) break;
          asio::co_spawn(eng.rt_.executor(t), serve(&eng, std::move(holder), std::move(s)), asio::detached);
        }
      }(s_.get(), s_->eng.gate_.try_enter()),
      asio::detached);
}

void tcp_server::close() noexcept {
  // The accept loop may be waiting: wake it; it closes the acceptor itself.
  interrupt_socket(s_->acceptor);
}

}  // namespace mc::transfer::detail
