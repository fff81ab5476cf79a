// Same-host transport: cross-memory attach (process_vm_readv/writev).
//
// The peer engine listens on an abstract unix socket named after its
// endpoint (abstract names are per network namespace, so finding it means:
// same kernel, same namespace). Per request the initiator asks for a grant
// (address, length, token); the target validates exactly like a TCP request
// and pins the region (unregistration waits for the grant's release). Only
// then does the initiator copy with process_vm_*, and it releases the grant
// right after. The target's control server runs on a private service thread,
// so a region destructor on a runtime thread can always wait for releases.
// When the kernel refuses (EPERM: ptrace policy, ENOSYS) items finish with
// errc::unsupported and the engine falls back to TCP.
#include "engine_impl.hpp"
#include "io.hpp"
#include "wire.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <cstring>
#include <thread>

#include "mc/runtime/when_all.hpp"

namespace mc::transfer::detail {
namespace {

namespace asio = boost::asio;
using local_ep = asio::local::stream_protocol::endpoint;
using lease = conn_lease<unix_socket>;
constexpr auto negative_cache_ttl = std::chrono::seconds(30);

local_ep abstract_endpoint(const std::string& name) { return local_ep(std::string(1, '\0') + name); }

std::int64_t peer_pid_of(unix_socket& s) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(s.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return 0;
  return cred.pid;
}

task<result<void>> send_header(unix_socket& s, const header& h) {
  header_bytes hb;
  encode(h, hb);
  co_return co_await send_all(s, hb.data(), hb.size());
}

task<result<header>> recv_header(unix_socket& s) {
  header_bytes hb;
  auto r = co_await recv_all(s, hb.data(), hb.size());
  if (!r) co_return r.error();
  co_return decode(hb);
}

class shm_transport final : public transport {
 public:
  explicit shm_transport(engine_impl& eng) : eng_(eng) {}
  transport_kind kind() const noexcept override { return transport_kind::same_host; }

  task<void> execute(thread_state& ts, const std::string& endpoint, std::span<transfer_item*> items) override {
    auto neg = ts.not_same_host.find(endpoint);
    if (neg != ts.not_same_host.end()) {
      if (std::chrono::steady_clock::now() - neg->second < negative_cache_ttl) {
        for (auto* it : items) it->finish(make_error_code(errc::unsupported));
        co_return;
      }
      ts.not_same_host.erase(neg);
    }
    auto* pool = ts.shm_pools.get(endpoint, ts.ex, eng_.opts_.connections_per_peer, eng_.opts_.max_peers,
                                  &ts.stopping);
    if (!pool) {
      for (auto* it : items) it->finish(make_error_code(errc::unsupported));
      co_return;
    }
    peer_pool<unix_socket>::connect_fn connect = [this, &ts, endpoint] { return this->connect(ts, endpoint); };
    std::size_t next = 0;
    auto workers = std::min<std::size_t>(items.size(), eng_.opts_.connections_per_peer);
    if (workers == 1) {
      co_await worker(*pool, connect, items, next, 0);
      co_return;
    }
    std::vector<task<int>> ws;
    for (std::size_t w = 0; w < workers; ++w) ws.push_back(worker(*pool, connect, items, next, w));
    co_await mc::when_all(std::move(ws));
  }

 private:
  task<int> worker(peer_pool<unix_socket>& pool, const peer_pool<unix_socket>::connect_fn& connect,
                   std::span<transfer_item*> items, std::size_t& next, std::size_t w) {
    auto got = co_await pool.acquire(connect, w == 0);
    if (!got) {
      if (!mc::is(got.error(), errc::cancelled))
        for (; next < items.size(); ++next) items[next]->finish(got.error());
      co_return 0;
    }
    lease c = std::move(*got);
    if (!c) co_return 0;
    bool first_on_conn = true;
    while (next < items.size()) {
      transfer_item& it = *items[next++];
      c.begin();
      auto r = co_await move_one(*c, it);
      if (r) c.keep();
      if (!r && !mc::is(r.error(), errc::cancelled) && c.reused() && first_on_conn && !it.done) {
        // A pooled connection failing on first use is probably stale (the
        // peer restarted): retry once on a fresh connection.
        c.discard();
        pool.drop_idle();
        auto again = co_await pool.acquire(connect, true);
        if (!again || !*again) {
          auto e = again ? make_error_code(errc::transfer_fail) : again.error();
          // The peer was reachable a moment ago: its socket vanishing means it died.
          if (mc::is(e, errc::unsupported)) e = make_error_code(errc::transfer_fail);
          if (!mc::is(e, errc::cancelled)) {
            it.finish(e);
            for (; next < items.size(); ++next) items[next]->finish(e);
          }
          co_return 0;
        }
        c = std::move(*again);
        c.begin();
        r = co_await move_one(*c, it);
        if (r) c.keep();
      }
      first_on_conn = false;
      if (!r) {
        c.discard();
        if (mc::is(r.error(), errc::cancelled)) co_return 0;
        it.finish(r.error());
        for (; next < items.size(); ++next) items[next]->finish(r.error());
        co_return 0;
      }
    }
    co_return 0;
  }

  /// Grant, copy, release. An error result means the connection is unusable;
  /// a refusal finishes the item and returns success.
  task<result<void>> move_one(pooled_conn<unix_socket>& c, transfer_item& it) {
    header g;
    g.op = wire_op::shm_grant;
    g.flags = it.op == op_kind::write ? grant_write : 0;
    g.request_id = c.next_id++;
    g.address = it.address;
    g.length = it.length;
    g.token = it.token;
    if (auto s = co_await send_header(c.sock, g); !s) co_return s.error();
    auto resp = co_await recv_header(c.sock);
    if (!resp) co_return resp.error();
    if (resp->op != wire_op::shm_grant_resp || resp->request_id != g.request_id) co_return fail(errc::transfer_fail);
    if (resp->status != 0) {
      it.finish(status_to_error(resp->status));
      co_return result<void>{};
    }
    auto copied = copy(c.peer_pid, it);
    header rel;
    rel.op = wire_op::shm_release;
    rel.request_id = g.request_id;
    auto s = co_await send_header(c.sock, rel);
    it.finish(copied);
    if (!s) co_return s.error();
    co_return result<void>{};
  }

  boost::system::error_code copy(std::int64_t pid, const transfer_item& it) {
    std::uint64_t done = 0;
    while (done < it.length) {
      iovec l{it.local + done, static_cast<std::size_t>(it.length - done)};
      iovec r{reinterpret_cast<void*>(static_cast<std::uintptr_t>(it.address + done)),
              static_cast<std::size_t>(it.length - done)};
      ssize_t n = -1;
      if (eng_.refuse_cma_for_tests_)
        errno = EPERM;
      else
        n = it.op == op_kind::read ? ::process_vm_readv(static_cast<pid_t>(pid), &l, 1, &r, 1, 0)
                                   : ::process_vm_writev(static_cast<pid_t>(pid), &l, 1, &r, 1, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EPERM || errno == EACCES || errno == ENOSYS) {
          if (!eng_.cma_refused_.exchange(true))
            std::fprintf(stderr, "transfer: the kernel refuses cross-memory attach (%s); using TCP on this host\n",
                         std::strerror(errno));
          bump(eng_.counters_.same_host_fallbacks);
          return make_error_code(errc::unsupported);
        }
        return make_error_code(errc::transfer_fail);  // ESRCH (peer gone), EFAULT
      }
      if (n == 0) return make_error_code(errc::transfer_fail);
      done += static_cast<std::uint64_t>(n);
    }
    return {};
  }

  task<result<std::unique_ptr<pooled_conn<unix_socket>>>> connect(thread_state& ts, std::string endpoint) {
    unix_socket s(ts.ex);
    auto [ec] = co_await s.async_connect(abstract_endpoint("mooncake-p2p.transfer/" + endpoint),
                                         asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::operation_aborted) co_return fail(errc::cancelled);
    if (ec) {
      ts.not_same_host[endpoint] = std::chrono::steady_clock::now();
      co_return fail(errc::unsupported);
    }
    boost::system::error_code ig;
    s.non_blocking(true, ig);
    auto c = std::make_unique<pooled_conn<unix_socket>>(std::move(s), ts.live, nullptr);
    c->peer_pid = peer_pid_of(c->sock);
    header h;
    h.op = wire_op::shm_hello;
    if (auto r = co_await send_header(c->sock, h); !r) co_return r.error();
    auto resp = co_await recv_header(c->sock);
    if (!resp) co_return resp.error();
    if (resp->op != wire_op::shm_hello_resp || resp->status != 0 || c->peer_pid <= 0 ||
        static_cast<std::int64_t>(resp->address) != c->peer_pid)
      co_return fail(errc::transfer_fail);
    co_return c;
  }

  engine_impl& eng_;
};

// ---- target side -------------------------------------------------------------

struct served_unix final : closable {
  served_unix(unix_socket s, std::unordered_set<closable*>& live) : sock(std::move(s)), reg(live, this) {}
  void close_now() noexcept override { interrupt_socket(sock); }
  unix_socket sock;
  live_registration reg;
};

}  // namespace

std::unique_ptr<transport> make_shm_transport(engine_impl& eng) { return std::make_unique<shm_transport>(eng); }

struct shm_server::state {
  explicit state(engine_impl& e) : eng(e), acceptor(ctx) {}
  engine_impl& eng;
  asio::io_context ctx{1};
  asio::local::stream_protocol::acceptor acceptor;
  std::unordered_set<closable*> live;  // service thread only
  bool stopping = false;               // service thread only
  std::size_t running = 0;             // accept loop + connection coroutines; service thread only
  asio::steady_timer stop_bound{ctx};  // stop(): run() ends after 2 s even if a coroutine never unwinds
  std::thread thread;
};

namespace {
/// Counts a coroutine of the service thread. stop() ends run() itself once the
/// last one has unwound: work that Asio's io_uring backend lost (see
/// interrupt_socket) must not keep the thread, and stop(), waiting forever.
struct running_guard {
  explicit running_guard(shm_server::state* s) : st(s) { ++st->running; }
  ~running_guard() {
    if (--st->running == 0 && st->stopping) st->ctx.stop();
  }
  running_guard(const running_guard&) = delete;
  running_guard& operator=(const running_guard&) = delete;
  shm_server::state* st;
};
}  // namespace

namespace {

task<void> serve_unix(shm_server::state* st, unix_socket sock);

}  // namespace

shm_server::shm_server(engine_impl& eng) : s_(std::make_unique<state>(eng)) {}
shm_server::~shm_server() { stop(); }

mc::result<void> shm_server::listen(const std::string& name) {
  boost::system::error_code ec;
  auto ep = abstract_endpoint(name);
  s_->acceptor.open(ep.protocol(), ec);
  if (!ec) s_->acceptor.bind(ep, ec);
  if (!ec) s_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    s_->acceptor.close(ec);
    return fail(errc::io_error);
  }
  asio::co_spawn(
      s_->ctx,
      [](state* st) -> task<void> {
        running_guard counted(st);
        for (;;) {
          unix_socket s(st->ctx);
          auto [ec] = co_await st->acceptor.async_accept(s, asio::as_tuple(asio::use_awaitable));
          if (!st->acceptor.is_open() || st->stopping) {
            st->acceptor.close(ec);  // nothing is pending on it any more
            break;
          }
          if (ec) continue;
          asio::co_spawn(st->ctx, serve_unix(st, std::move(s)), asio::detached);
        }
      }(s_.get()),
      asio::detached);
  s_->thread = std::thread([st = s_.get()] { st->ctx.run(); });
  return {};
}

void shm_server::stop() noexcept {
  if (!s_->thread.joinable()) return;
  asio::post(s_->ctx, [st = s_.get()] {
    st->stopping = true;  // connections accepted but not yet started end at once
    interrupt_socket(st->acceptor);  // the accept loop wakes and closes it
    std::vector<closable*> all(st->live.begin(), st->live.end());
    for (auto* c : all) c->close_now();
    if (st->running == 0) st->ctx.stop();
    st->stop_bound.expires_after(std::chrono::seconds(2));
    st->stop_bound.async_wait([st](boost::system::error_code) { st->ctx.stop(); });
  });
  s_->thread.join();  // run() returns once every connection coroutine ended
}

namespace {

task<void> serve_unix(shm_server::state* st, unix_socket sock) {
  running_guard counted(st);
  served_unix c(std::move(sock), st->live);
  if (st->stopping) co_return;  // spawned before stop() swept `live`: would wait forever
  auto& ctr = st->eng.counters_;
  boost::system::error_code ig;
  c.sock.non_blocking(true, ig);
  std::unordered_map<std::uint64_t, std::shared_ptr<region_entry>> grants;
  for (;;) {
    auto h = co_await recv_header(c.sock);
    if (!h) break;
    header resp;
    resp.request_id = h->request_id;
    if (h->op == wire_op::shm_hello) {
      resp.op = wire_op::shm_hello_resp;
      resp.address = static_cast<std::uint64_t>(::getpid());
    } else if (h->op == wire_op::shm_grant) {
      resp.op = wire_op::shm_grant_resp;
      auto e = st->eng.registry_->find(h->address, h->length, h->token);
      if (e && !grants.count(h->request_id) && (*e)->try_grant()) {
        grants.emplace(h->request_id, *e);
        bool w = h->flags & grant_write;
        bump(w ? ctr.served_write_ops : ctr.served_read_ops);
        bump(w ? ctr.served_write_bytes : ctr.served_read_bytes, h->length);
      } else {
        bump(ctr.served_rejects);
        resp.status = static_cast<std::int32_t>(e ? errc::out_of_range : to_errc(e.error()));
      }
    } else if (h->op == wire_op::shm_release) {
      auto it = grants.find(h->request_id);
      if (it == grants.end()) break;  // protocol violation
      it->second->release_grant();
      grants.erase(it);
      continue;  // no response
    } else {
      break;
    }
    if (!co_await send_header(c.sock, resp)) break;
  }
  for (auto& [id, e] : grants) e->release_grant();  // peer gone: its copies are over
}

}  // namespace
}  // namespace mc::transfer::detail
