// TCP transport, target side: the listener. Accepts on runtime thread 0 and
// serves each connection on a runtime thread, round robin (serve_tcp,
// tcp_server.cpp), within max_inbound_connections.
#include "engine_impl.hpp"
#include "io.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/socket_base.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

namespace mc::transfer::detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

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
          asio::co_spawn(eng.rt_.executor(t), serve_tcp(&eng, std::move(holder), std::move(s)), asio::detached);
        }
      }(s_.get(), s_->eng.gate_.try_enter()),
      asio::detached);
}

void tcp_server::close() noexcept {
  // The accept loop may be waiting: wake it; it closes the acceptor itself.
  interrupt_socket(s_->acceptor);
}

}  // namespace mc::transfer::detail
