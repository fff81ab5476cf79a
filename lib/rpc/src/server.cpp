#include "mc/rpc/server.hpp"
#include "mc/runtime/blocking.hpp"

#include "negotiate.hpp"
#include "bootstrap.hpp"
#include "mc/rpc/auth.hpp"
#include "mc/rpc/capnp.hpp"
#include "mc/rpc/protocol.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/runtime/when_all.hpp"
#include "message_stream.hpp"
#include "thread_context.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <capnp/rpc-twoparty.h>
#include <kj/debug.h>

#include <atomic>
#include <cstdio>
#include <stdexcept>

namespace mc::rpc {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using detail::stream_base;
using detail::thread_context;

namespace {

struct server_thread;

/// One accepted connection, owned by its server_thread's task set.
struct server_connection {
  server_connection(server_thread& t, kj::Own<stream_base> s, const capnp::ReaderOptions& ro, connection_info info);
  ~server_connection();
  server_thread& owner;
  kj::Own<stream_base> stream;
  detail::pooled_message_stream messages;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
  bool closing = false;
  server_connection* prev = nullptr;
  server_connection* next = nullptr;
};

}  // namespace

struct server::impl : std::enable_shared_from_this<server::impl> {
  impl(mc::runtime::runtime& r, server_options o) : rt(r), opts(std::move(o)) {}
  ~impl();

  mc::runtime::runtime& rt;
  server_options opts;
  std::shared_ptr<detail::service_list> services = std::make_shared<detail::service_list>();
  std::unique_ptr<tcp::acceptor> acceptor;  // thread 0
  std::uint16_t bound_port = 0;
  std::string message;
  enum class state { created, running, stopping, stopped };
  std::atomic<state> st{state::created};
  std::size_t next_thread = 0;  // thread 0 only
  std::atomic<std::size_t> connections{0};
  std::atomic<std::uint64_t> accepted{0}, refused{0}, idle_closed{0}, backlog_closed{0}, rdma_accepted{0},
      handshake_failed{0}, auth_failed{0};
  /// Tokens from server_options::auth_tokens (set at start); null = the process-wide setting.
  detail::token_list own_tokens;
  // Slot i is created, used and destroyed on runtime thread i only.
  std::vector<std::shared_ptr<server_thread>> threads;

  mc::task<void> accept_loop();
  void adopt(std::size_t i, tcp::socket s);
  void adopt_stream(std::size_t i, kj::Own<stream_base> s, connection_info info);
  server_thread& thread_part(std::size_t i);
  mc::task<bool> drain_thread(std::size_t i, mc::time_point deadline);
};

namespace {

/// Per-thread server state (KJ objects), living on runtime thread `index`.
struct server_thread final : kj::TaskSet::ErrorHandler, std::enable_shared_from_this<server_thread> {
  server_thread(server::impl& o, std::size_t i)
      : owner(o),
        index(i),
        ex(o.rt.executor(i)),
        made(std::make_shared<detail::thread_services>()),
        tasks(kj::heap<kj::TaskSet>(*this)),
        sweep_timer(o.rt.context(i)) {
    reader.traversalLimitInWords = std::max<std::size_t>(o.opts.max_message_bytes / 8, 1024);
  }
  ~server_thread() { close_all(); }

  void taskFailed(kj::Exception&&) override {}  // a connection ended; nothing to do

  void link(server_connection* c) noexcept {
    c->next = head;
    if (head) head->prev = c;
    head = c;
  }
  void unlink(server_connection* c) noexcept {
    if (c->prev)
      c->prev->next = c->next;
    else
      head = c->next;
    if (c->next) c->next->prev = c->prev;
  }

  /// Destroys every connection (cancelling its calls) and the services.
  void close_all() noexcept {
    sweep_timer.cancel();
    tasks = nullptr;
    made->made.clear();
  }

  void arm_sweep() {
    auto period =
        std::clamp<mc::duration>(owner.opts.idle_timeout / 4, std::chrono::milliseconds(5), std::chrono::seconds(1));
    sweep_timer.expires_after(period);
    sweep_timer.async_wait([w = weak_from_this()](boost::system::error_code ec) {
      if (ec) return;
      if (auto self = w.lock()) self->sweep();
    });
  }

  void sweep() {
    auto now = std::chrono::steady_clock::now();
    for (auto* c = head; c; c = c->next) {
      if (c->closing) continue;
      if (now - c->stream->last_activity() > owner.opts.idle_timeout) {
        c->closing = true;
        ++owner.idle_closed;
        c->stream->close();
      } else if (c->network.getCurrentQueueSize() > owner.opts.max_outgoing_bytes) {
        c->closing = true;
        ++owner.backlog_closed;
        c->stream->close();
      }
    }
    if (tasks) arm_sweep();
  }

  server::impl& owner;
  std::size_t index;
  mc::executor ex;
  capnp::ReaderOptions reader;
  std::shared_ptr<detail::thread_services> made;  // services shared by this thread's connections
  kj::Own<kj::TaskSet> tasks;
  server_connection* head = nullptr;
  asio::steady_timer sweep_timer;
};

server_connection::server_connection(server_thread& t, kj::Own<stream_base> s, const capnp::ReaderOptions& ro,
                                     connection_info info)
    : owner(t),
      stream(kj::mv(s)),
      messages(*stream, thread_context::current().recv_buffers()),
      network(messages, capnp::rpc::twoparty::Side::SERVER, ro),
      rpc(capnp::makeRpcServer(network, detail::make_bootstrap(t.owner.services, t.ex, t.made, std::move(info)))) {
  owner.link(this);
}

server_connection::~server_connection() {
  owner.unlink(this);
  --owner.owner.connections;
}

}  // namespace

server::impl::~impl() {
  // Normally empty (stop() destroyed them on their threads). If the runtime
  // was stopped first, the KJ state cannot be destroyed off its thread: leak it.
  for (auto& t : threads)
    if (t) new std::shared_ptr<server_thread>(std::move(t));
}

namespace {
/// The kernel's view of the peer (IPv4-mapped IPv6 shown as IPv4).
connection_info peer_of(const tcp::socket& s) {
  boost::system::error_code ec;
  auto ep = s.remote_endpoint(ec);
  if (ec) return {};
  auto a = ep.address();
  if (a.is_v6() && a.to_v6().is_v4_mapped()) a = asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
  return {a.to_string(), ep.port()};
}
}  // namespace

server_thread& server::impl::thread_part(std::size_t i) {
  if (!threads[i]) {
    auto& tc = thread_context::current();
    threads[i] = std::make_shared<server_thread>(*this, i);
    threads[i]->arm_sweep();
    tc.add_teardown_hook(threads[i].get(), [w = weak_from_this(), i] {
      if (auto self = w.lock()) self->threads[i].reset();
    });
  }
  return *threads[i];
}

void server::impl::adopt(std::size_t i, tcp::socket s) {
  if (st.load() != state::running) {
    --connections;
    return;  // `s` closes
  }
  // The first bytes say TCP or RDMA (negotiate.hpp); bounded by handshake_timeout.
  // The auth frame comes first when auth is on (mc/rpc/auth.hpp).
  const bool rdma = opts.accept_rdma && current_protocol() == protocol::rdma;
  auto tokens = own_tokens ? own_tokens : detail::current_auth_tokens();
  asio::co_spawn(
      rt.executor(i),
      [](std::shared_ptr<impl> self, std::size_t i, tcp::socket s, bool rdma,
         detail::token_list tokens) -> mc::task<void> {
        auto info = peer_of(s);
        // A client that never speaks is an idle connection: the idle timeout bounds it too.
        const auto limit = std::min(self->opts.handshake_timeout, self->opts.idle_timeout);
        auto r = co_await detail::server_negotiate(std::move(s), limit, rdma, std::move(tokens));
        if (!r) {
          --self->connections;
          if (mc::is(r.error(), mc::errc::access_denied)) {
            ++self->auth_failed;
            detail::note_auth_failure();
          } else {
            ++(mc::is(r.error(), mc::errc::timeout) ? self->idle_closed : self->handshake_failed);
          }
          co_return;
        }
        self->adopt_stream(i, kj::mv(*r), std::move(info));
      }(shared_from_this(), i, std::move(s), rdma, std::move(tokens)),
      asio::detached);
}

void server::impl::adopt_stream(std::size_t i, kj::Own<stream_base> s, connection_info info) {
  if (st.load() != state::running) {
    --connections;
    return;
  }
  try {
    auto& part = thread_part(i);
    const bool is_rdma = std::string_view(s->transport()) == "rdma";
    auto c = kj::heap<server_connection>(part, kj::mv(s), part.reader, std::move(info));
    detail::note_connection(true, is_rdma, false);
    if (is_rdma) ++rdma_accepted;
    auto& net = c->network;
    part.tasks->add(net.onDisconnect().attach(kj::mv(c)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mc::rpc::server: dropping a connection: %s\n", e.what());
  }
}

mc::task<void> server::impl::accept_loop() {
  auto self = shared_from_this();
  for (;;) {
    std::size_t i = next_thread++ % opts.threads;
    auto [ec, sock] = co_await acceptor->async_accept(rt.executor(i), asio::as_tuple(asio::use_awaitable));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor->is_open() || st.load() != state::running) break;
      // e.g. EMFILE under a connection flood: back off briefly instead of spinning.
      co_await mc::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    ++accepted;
    if (connections.load() >= opts.max_connections) {
      ++refused;
      boost::system::error_code ignored;
      sock.close(ignored);
      continue;
    }
    ++connections;
    asio::post(rt.executor(i), [self, i, s = std::move(sock)]() mutable { self->adopt(i, std::move(s)); });
  }
}

mc::task<bool> server::impl::drain_thread(std::size_t i, mc::time_point deadline) {
  auto part = threads[i];
  if (!part) co_return true;
  auto& tc = thread_context::current();
  tc.begin_drain();
  bool drained = co_await tc.wait_calls_idle(deadline);
  part->close_all();  // closes connections; remaining calls get cancelled
  co_await tc.wait_calls_idle(std::chrono::steady_clock::now() + std::chrono::seconds(1));
  tc.end_drain();
  tc.remove_teardown_hook(part.get());
  threads[i].reset();
  part.reset();
  co_return drained;
}

// ------------------------------------------------------------------ server

server::server(mc::runtime::runtime& rt, server_options opts) : impl_(std::make_shared<impl>(rt, std::move(opts))) {}

server::~server() {
  auto s = impl_->st.load();
  if (s != impl::state::running) return;
  if (mc::runtime::runtime::current()) {
    std::fprintf(stderr, "mc::rpc::server destroyed on a runtime thread while running; call stop_async() first\n");
    return;
  }
  stop();
}

void server::add_service(std::string name, service_factory factory) {
  if (impl_->st.load() != impl::state::created)
    throw std::logic_error("mc::rpc::server::add_service: server already started");
  impl_->services->emplace_back(std::move(name), std::move(factory));
}

mc::result<void> server::start() {
  auto& m = *impl_;
  if (m.st.load() != impl::state::created) {
    m.message = "server already started";
    return mc::fail(mc::errc::invalid_params);
  }
  if (m.opts.threads == 0 || m.opts.threads > m.rt.size()) {
    m.message = "server_options.threads must be in 1.." + std::to_string(m.rt.size()) + " (the runtime's thread count)";
    return mc::fail(mc::errc::invalid_params);
  }
  if (m.opts.auth_tokens) {
    if (m.opts.auth_tokens->size() > max_auth_tokens) {
      m.message = "server_options.auth_tokens: at most " + std::to_string(max_auth_tokens) + " tokens";
      return mc::fail(mc::errc::invalid_params);
    }
    for (auto& t : *m.opts.auth_tokens)
      if (auto why = check_auth_token(t); !why.empty()) {
        m.message = "server_options.auth_tokens: " + why;
        return mc::fail(mc::errc::invalid_params);
      }
    m.own_tokens = std::make_shared<const std::vector<std::string>>(*m.opts.auth_tokens);
  }
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(m.opts.host, ec);
  if (ec) {
    m.message = "invalid listen address '" + m.opts.host + "': " + ec.message();
    return mc::fail(mc::errc::invalid_params);
  }
  tcp::endpoint ep(addr, m.opts.port);
  auto acc = std::make_unique<tcp::acceptor>(m.rt.context(0));
  auto fail_with = [&](const char* what) {
    m.message = std::string(what) + " " + m.opts.host + ":" + std::to_string(m.opts.port) + ": " + ec.message();
    return mc::fail(mc::errc::rpc_fail);
  };
  acc->open(ep.protocol(), ec);
  if (ec) return fail_with("open");
  acc->set_option(asio::socket_base::reuse_address(true), ec);
  acc->bind(ep, ec);
  if (ec) return fail_with("bind");
  acc->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail_with("listen");
  m.bound_port = acc->local_endpoint(ec).port();
  m.acceptor = std::move(acc);
  m.threads.resize(m.opts.threads);
  m.st = impl::state::running;
  asio::co_spawn(m.rt.executor(0), m.accept_loop(), asio::detached);
  return {};
}

std::uint16_t server::port() const noexcept { return impl_->bound_port; }
const std::string& server::message() const noexcept { return impl_->message; }

server_stats server::stats() const {
  server_stats s;
  s.connections = impl_->connections.load();
  s.accepted = impl_->accepted.load();
  s.refused = impl_->refused.load();
  s.idle_closed = impl_->idle_closed.load();
  s.backlog_closed = impl_->backlog_closed.load();
  s.rdma = impl_->rdma_accepted.load();
  s.handshake_failed = impl_->handshake_failed.load();
  s.auth_failures = impl_->auth_failed.load();
  return s;
}

mc::task<void> server::stop_async() {
  auto self = impl_;
  auto expected = impl::state::running;
  if (!self->st.compare_exchange_strong(expected, impl::state::stopping)) co_return;
  co_await mc::run_on(self->rt.executor(0), [](std::shared_ptr<impl> s) -> mc::task<void> {
    boost::system::error_code ec;
    s->acceptor->close(ec);  // the accept loop ends
    co_return;
  }(self));
  auto deadline = std::chrono::steady_clock::now() + self->opts.drain_timeout;
  std::vector<mc::task<bool>> drains;
  for (std::size_t i = 0; i < self->threads.size(); ++i)
    drains.push_back(mc::run_on(self->rt.executor(i), self->drain_thread(i, deadline)));
  co_await mc::when_all(std::move(drains));
  self->st = impl::state::stopped;
}

void server::stop() {
  if (impl_->st.load() != impl::state::running) return;
  mc::runtime::assert_may_block("mc::rpc::server::stop");
  if (mc::runtime::runtime::current())
    throw std::logic_error(
        "mc::rpc::server::stop() blocks: call it from a non-runtime thread, "
        "or co_await stop_async()");
  if (!impl_->rt.running()) {
    std::fprintf(stderr, "mc::rpc::server::stop(): the runtime is not running; leaking server state\n");
    impl_->st = impl::state::stopped;
    return;
  }
  impl_->rt.block_on(stop_async(), 0);
}

}  // namespace mc::rpc
