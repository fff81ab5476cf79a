// TCP transport, target side: serves READ/WRITE requests against registered
// regions. Every request is validated (structure, token, whole range inside
// one region) before a byte moves; a refused WRITE's payload is drained.
#include "engine_impl.hpp"
#include "io.hpp"
#include "wire.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/socket_base.hpp>

#include <cstdio>

namespace mc::transfer::detail {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

struct served_conn final : closable {
  served_conn(tcp_socket s, std::unordered_set<closable*>& live) : sock(std::move(s)), reg(live, this) {}
  void close_now() noexcept override { interrupt_socket(sock); }
  tcp_socket sock;
  live_registration reg;
  std::shared_ptr<void> rdma_qp;  // target-side QP of an rdma_connect, lives as long as the connection
};

task<result<void>> respond(tcp_socket& s, wire_op op, std::uint64_t id, errc status) {
  header h;
  h.op = op;
  h.request_id = id;
  h.status = static_cast<std::int32_t>(status);
  header_bytes hb;
  encode(h, hb);
  co_return co_await send_all(s, hb.data(), hb.size());
}

/// One request; false when the connection must be closed.
task<bool> serve_one(engine_impl& eng, tcp_socket& s, const header& h) {
  auto& ctr = eng.counters_;
  if (h.op == wire_op::read_req) {
    auto e = eng.registry_->find(h.address, h.length, h.token, region_access::remote_read);
    if (!e) {
      bump(ctr.served_rejects);
      co_return static_cast<bool>(co_await respond(s, wire_op::read_resp, h.request_id, errc::access_denied));
    }
    header ok;
    ok.op = wire_op::read_resp;
    ok.request_id = h.request_id;
    ok.length = h.length;
    header_bytes hb;
    encode(ok, hb);
    auto r = co_await send_from_region(s, **e, hb.data(), hb.size(), (*e)->ptr(h.address), h.length);
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
      if (!co_await discard(s, h.length)) co_return false;
      co_return static_cast<bool>(co_await respond(s, wire_op::write_resp, h.request_id, errc::access_denied));
    }
    auto r = co_await recv_into_region(s, **e, (*e)->ptr(h.address), h.length);
    if (r == region_io::failed) co_return false;
    if (r == region_io::revoked) {
      bump(ctr.served_rejects);
      co_return static_cast<bool>(co_await respond(s, wire_op::write_resp, h.request_id, errc::access_denied));
    }
    bump(ctr.served_write_ops);
    bump(ctr.served_write_bytes, h.length);
    co_return static_cast<bool>(co_await respond(s, wire_op::write_resp, h.request_id, errc::ok));
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
    header_bytes hb;
    auto r = co_await recv_all(c.sock, hb.data(), hb.size());
    if (!r) break;  // EOF, reset, or stop
    auto h = decode(hb);
    if (!h) break;  // protocol violation: close
    if (h->op >= wire_op::rdma_connect) {
      if (!co_await rdma_serve(*eng, c.sock, *h, c.rdma_qp)) break;
      continue;
    }
    if (!co_await serve_one(*eng, c.sock, *h)) break;
  }
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
