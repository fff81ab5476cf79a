// mc::http::server: Beast sessions as coroutines on the runtime's threads.
#include "mc/http/server.hpp"
#include "mc/runtime/blocking.hpp"

#include "mc/rpc/auth.hpp"
#include "mc/runtime/runtime.hpp"
#include "text.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <unordered_map>

namespace mc::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

struct route_entry {
  std::string path;
  handler h;
  std::size_t max_body = 0;
  bool prefix = false;
};

struct conn_entry {
  mc::executor ex;
  std::weak_ptr<beast::tcp_stream> stream;
};

method to_method(bhttp::verb v) {
  switch (v) {
    case bhttp::verb::get:
      return method::get;
    case bhttp::verb::head:
      return method::head;
    case bhttp::verb::put:
      return method::put;
    case bhttp::verb::post:
      return method::post;
    case bhttp::verb::delete_:
      return method::del;
    default:
      return method::other;
  }
}

bool is_http_error(const error_code& ec) {
  return ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category();
}

}  // namespace

struct server::impl : std::enable_shared_from_this<impl> {
  impl(mc::runtime::runtime& r, server_options o) : rt(r), opts(std::move(o)) {}

  mc::runtime::runtime& rt;
  server_options opts;
  std::vector<route_entry> routes;
  std::string message;
  std::uint16_t port = 0;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::size_t next_thread = 0;

  std::mutex mu;
  std::condition_variable idle_cv;
  std::size_t tasks = 0;  // accept loop + sessions
  bool started = false;
  bool stopping = false;
  std::unordered_map<std::uint64_t, conn_entry> conns;
  std::uint64_t next_id = 0;

  std::atomic<std::uint64_t> connections{0}, accepted{0}, refused{0}, requests{0}, bad_requests{0}, timeouts{0},
      auth_failures{0}, rejecting{0};
  std::array<std::atomic<std::uint64_t>, 4> by_class{};

  bool enter() {
    std::lock_guard lk(mu);
    if (stopping) return false;
    ++tasks;
    return true;
  }
  void leave() {
    std::lock_guard lk(mu);
    if (--tasks == 0) idle_cv.notify_all();
  }

  const route_entry* find(std::string_view path) const {
    const route_entry* best = nullptr;
    for (auto& r : routes) {
      bool match = r.prefix ? path.substr(0, r.path.size()) == r.path : path == r.path;
      if (match && (!best || r.path.size() > best->path.size())) best = &r;
    }
    return best;
  }

  void count_status(unsigned status) {
    requests.fetch_add(1, std::memory_order_relaxed);
    if (status >= 200 && status < 600) by_class[std::min(3u, status / 100 - 2)].fetch_add(1, std::memory_order_relaxed);
  }
};

namespace {

using impl_ptr = std::shared_ptr<server::impl>;

/// Writes `res`. `head`: the request was HEAD, so the header is the one GET
/// would get (its Content-Length too) and no body follows (RFC 9110 9.3.2; a
/// body would be read as the start of the next response on the connection).
task<void> write_response(server::impl& s, beast::tcp_stream& stream, response& res, bool keep_alive,
                          bool head = false) {
  if (res.blob && res.blob_size > res.blob_capacity) {
    // A handler bug (or a size that came from a peer unchecked): never read
    // past the buffer.
    res = detail::json_response(500, {{"error", "INTERNAL_ERROR"}, {"message", "response size exceeds its buffer"}});
  }
  bhttp::response<bhttp::span_body<char>> msg{static_cast<bhttp::status>(res.status), 11};
  msg.set(bhttp::field::server, "mooncake-p2p");
  msg.set(bhttp::field::content_type, res.content_type);
  for (auto& [k, v] : res.headers) msg.set(k, v);
  if (res.blob)
    msg.body() = {reinterpret_cast<char*>(res.blob.get()), res.blob_size};
  else
    msg.body() = {res.text.data(), res.text.size()};
  msg.keep_alive(keep_alive);
  msg.prepare_payload();
  if (head) {
    const auto length = msg.body().size();
    msg.body() = {};
    msg.content_length(length);
  }
  s.count_status(res.status);
  stream.expires_after(s.opts.write_timeout);
  error_code ec;
  co_await bhttp::async_write(stream, msg, asio::redirect_error(asio::use_awaitable, ec));
  if (ec == beast::error::timeout) s.timeouts.fetch_add(1, std::memory_order_relaxed);
  if (ec) throw boost::system::system_error(ec);
}

/// Answers `res` and closes with a bounded lingering drain.
/// Lingering close: the client may still be sending (an oversize header or
/// body, or a request we answered without reading); closing with unread input
/// would reset the connection and could destroy the answer before the client
/// reads it. Stops sending, then drains until the client closes, `max_bytes`
/// or `until`.
task<void> linger(beast::tcp_stream& stream, std::chrono::steady_clock::time_point until, std::size_t max_bytes) {
  error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream.expires_at(until);
  std::array<char, 16384> sink;
  std::size_t drained = 0;
  while (!ec && drained < max_bytes) {
    drained += co_await stream.async_read_some(asio::buffer(sink), asio::redirect_error(asio::use_awaitable, ec));
  }
}

/// `head`: the request was HEAD (no body in the answer, as for any answer to
/// HEAD; the client would read a body as the next response).
task<void> answer_and_close(server::impl& s, beast::tcp_stream& stream, response& res, bool head = false) {
  co_await write_response(s, stream, res, false, head);
  co_await linger(stream, std::chrono::steady_clock::now() + std::chrono::seconds(2), std::size_t{1} << 20);
}

/// Answers a request that cannot be served (malformed / oversize) and closes.
/// `head`: the request's header was read and it is a HEAD.
task<void> reject(server::impl& s, beast::tcp_stream& stream, unsigned status, std::string_view why,
                  bool head = false) {
  s.bad_requests.fetch_add(1, std::memory_order_relaxed);
  auto res = detail::json_response(status, {{"error", detail::json_string(why)}});
  co_await answer_and_close(s, stream, res, head);
}

/// Whether a request for `path` with this Authorization header may proceed.
bool authorized(const server::impl& s, std::string_view path, std::string_view authorization) {
  if (s.opts.auth_tokens.empty()) return true;
  for (auto& p : s.opts.public_paths)
    if (path == p) return true;
  constexpr std::string_view scheme = "Bearer ";
  if (authorization.size() <= scheme.size()) return false;
  for (std::size_t i = 0; i < scheme.size(); ++i)  // the scheme is case-insensitive (RFC 7235)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) !=
        std::tolower(static_cast<unsigned char>(scheme[i])))
      return false;
  return mc::rpc::auth_token_accepted(authorization.substr(scheme.size()), s.opts.auth_tokens);
}

response unauthorized() {
  auto r = detail::json_response(401, {{"error", "ACCESS_DENIED"},
                                       {"code", static_cast<int>(errc::access_denied)},
                                       {"message", "missing or wrong bearer token (Authorization: Bearer <token>)"}});
  r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"mooncake\"");
  return r;
}

enum class auth_verdict { pass, answered, close };

/// With auth on and no accepted bearer token: answers 401 (counted) and says
/// whether the connection goes on (keep-alive, no body) or must close (a
/// body follows, never read; or no keep-alive).
task<auth_verdict> enforce_auth(server::impl& s, beast::tcp_stream& stream, const request& req,
                                std::string_view authorization, bool body_follows) {
  if (authorized(s, req.path, authorization)) co_return auth_verdict::pass;
  s.auth_failures.fetch_add(1, std::memory_order_relaxed);
  auto res = unauthorized();
  if (body_follows) {
    co_await answer_and_close(s, stream, res, req.verb == method::head);
    co_return auth_verdict::close;
  }
  co_await write_response(s, stream, res, req.keep_alive, req.verb == method::head);
  co_return req.keep_alive ? auth_verdict::answered : auth_verdict::close;
}

/// Handles a read error. Returns the status to answer with, or 0 to just close.
/// On Asio 1.81's io_uring backend (no longer used, meson.build) a read cut off
/// by the stream's deadline could complete as EOF rather than as a timeout
/// (a cancel's completion delivered to the wrong operation); the `deadline`
/// check stays as a second line of defence.
unsigned read_error_status(server::impl& s, const error_code& ec, std::chrono::steady_clock::time_point deadline) {
  if (ec == beast::error::timeout || std::chrono::steady_clock::now() >= deadline) {
    s.timeouts.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  if (ec == bhttp::error::header_limit) return 431;
  if (ec == bhttp::error::body_limit || ec == bhttp::error::buffer_overflow) return 413;
  if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message) return 0;
  if (is_http_error(ec)) return 400;
  return 0;  // socket errors: nothing to answer
}

task<void> serve_connection(server::impl& s, beast::tcp_stream& stream) {
  beast::flat_buffer buf(s.opts.max_header_bytes + (64 << 10));
  for (;;) {
    bhttp::request_parser<bhttp::empty_body> hp;
    hp.header_limit(static_cast<std::uint32_t>(std::min<std::size_t>(s.opts.max_header_bytes, UINT32_MAX)));
    hp.body_limit(UINT64_MAX);  // checked per route below
    auto deadline = std::chrono::steady_clock::now() + s.opts.header_timeout;
    stream.expires_after(s.opts.header_timeout);
    error_code ec;
    co_await bhttp::async_read_header(stream, buf, hp, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (unsigned st = read_error_status(s, ec, deadline)) co_await reject(s, stream, st, ec.message());
      co_return;
    }
    request req;
    auto& head = hp.get();
    req.verb = to_method(head.method());
    req.target = std::string(head.target());
    std::string_view target = req.target;
    auto q = target.find('?');
    if (q != std::string_view::npos) req.query = std::string(target.substr(q + 1));
    auto decoded = detail::percent_decode(target.substr(0, q), false);
    if (!decoded || decoded->empty() || (*decoded)[0] != '/') {
      co_await reject(s, stream, 400, "bad request target", req.verb == method::head);
      co_return;
    }
    req.path = std::move(*decoded);
    req.keep_alive = hp.keep_alive();

    auto verdict = co_await enforce_auth(s, stream, req, head[bhttp::field::authorization], !hp.is_done());
    if (verdict == auth_verdict::close) co_return;
    if (verdict == auth_verdict::answered) continue;
    const route_entry* route = s.find(req.path);
    if (!hp.is_done()) {  // a body follows
      std::size_t limit = route ? route->max_body : 0;
      auto len = hp.content_length();
      if (limit == 0 || (len && *len > limit)) {
        co_await reject(s, stream, 413, "request body too large (limit " + std::to_string(limit) + " bytes)",
                        req.verb == method::head);
        co_return;
      }
      bhttp::request_parser<bhttp::vector_body<char>> bp(std::move(hp));
      bp.body_limit(limit);
      deadline = std::chrono::steady_clock::now() + s.opts.body_timeout;
      stream.expires_after(s.opts.body_timeout);
      co_await bhttp::async_read(stream, buf, bp, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (unsigned st = read_error_status(s, ec, deadline))
          co_await reject(s, stream, st, ec.message(), req.verb == method::head);
        co_return;
      }
      req.body = std::move(bp.get().body());
    }
    stream.expires_never();

    response res;
    if (!route) {
      res = detail::json_response(
          404, {{"error", "NOT_FOUND"}, {"message", detail::json_string("no such endpoint: " + req.path)}});
    } else {
      try {
        res = co_await route->h(req);
      } catch (const std::exception& e) {
        res = detail::json_response(500, {{"error", "INTERNAL_ERROR"}, {"message", detail::json_string(e.what())}});
      }
    }
    co_await write_response(s, stream, res, req.keep_alive, req.verb == method::head);
    if (!req.keep_alive) co_return;
  }
}

task<void> session(impl_ptr self, tcp::socket sock) {
  auto stream = std::make_shared<beast::tcp_stream>(std::move(sock));
  std::uint64_t id = 0;
  bool stopping = false;
  {
    std::lock_guard lk(self->mu);
    id = ++self->next_id;
    stopping = self->stopping;  // stop() may have missed this connection
    self->conns.emplace(id, conn_entry{stream->get_executor(), stream});
  }
  try {
    if (!stopping) co_await serve_connection(*self, *stream);
  } catch (const std::exception&) {
    // connection-level failure (reset, closed by stop(), write timeout)
  }
  error_code ignored;
  stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream->close();
  {
    std::lock_guard lk(self->mu);
    self->conns.erase(id);
  }
  self->connections.fetch_sub(1, std::memory_order_relaxed);
  self->leave();
}

/// Connections being answered 503 at once, at most (each holds a socket for
/// at most ~1 s); past it accepting pauses.
constexpr std::uint64_t max_rejecting = 64;

/// Answers a connection over max_connections: `503 Service Unavailable` with
/// `Retry-After: 1`, then reads (and drops) what the client sends until it
/// closes, 64 KiB or 1 s, so that closing is not a reset of unread data.
task<void> answer_busy(impl_ptr self, tcp::socket sock) {
  static const std::string busy = [] {
    std::string body =
        detail::json_response(503, {{"error", "OVERLOADED"}, {"message", "too many connections; retry later"}}).text;
    // (appends, not "literal" + string: gcc 12 -O3 raises a false -Wrestrict on that)
    std::string head =
        "HTTP/1.1 503 Service Unavailable\r\nServer: mooncake-p2p\r\nRetry-After: 1\r\n"
        "Content-Type: application/json\r\nContent-Length: ";
    head.append(std::to_string(body.size()));
    head.append("\r\nConnection: close\r\n\r\n");
    head.append(body);
    return head;
  }();
  beast::tcp_stream stream(std::move(sock));
  error_code ec;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);  // write and drain together
  stream.expires_at(until);
  co_await asio::async_write(stream, asio::buffer(busy.data(), busy.size()),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (!ec) co_await linger(stream, until, 64u << 10);
  stream.close();
  self->rejecting.fetch_sub(1, std::memory_order_relaxed);
  self->leave();
}

task<void> accept_loop(impl_ptr self) {
  auto& threads = self->opts.threads;
  for (;;) {
    std::size_t t = threads[self->next_thread++ % threads.size()];
    error_code ec;
    tcp::socket sock =
        co_await self->acceptor->async_accept(self->rt.executor(t), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !self->acceptor->is_open()) break;
      // EMFILE and friends: back off briefly instead of spinning.
      asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(50));
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    self->accepted.fetch_add(1, std::memory_order_relaxed);
    // A flood: over the bound with max_rejecting 503s pending. Hold this one
    // connection (the next ones wait in the kernel's listen backlog) until a
    // session or a 503 ends (each 503 within ~1 s), instead of closing it
    // unanswered, which the client would see as a reset.
    while (self->connections.load(std::memory_order_relaxed) >= self->opts.max_connections &&
           self->rejecting.load(std::memory_order_relaxed) >= max_rejecting && self->acceptor->is_open()) {
      asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(5));
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (self->connections.load(std::memory_order_relaxed) >= self->opts.max_connections) {
      // Over the bound: a 503 with Retry-After, not a reset.
      if (!self->enter()) {  // stopping
        sock.close(ec);
        continue;
      }
      self->refused.fetch_add(1, std::memory_order_relaxed);
      self->rejecting.fetch_add(1, std::memory_order_relaxed);
      auto ex = sock.get_executor();
      asio::co_spawn(ex, answer_busy(self, std::move(sock)), asio::detached);
      continue;
    }
    if (!self->enter()) {
      sock.close(ec);
      continue;
    }
    self->connections.fetch_add(1, std::memory_order_relaxed);
    auto ex = sock.get_executor();
    asio::co_spawn(ex, session(self, std::move(sock)), asio::detached);
  }
  self->leave();
}

}  // namespace

server::server(mc::runtime::runtime& rt, server_options opts) : impl_(std::make_shared<impl>(rt, std::move(opts))) {
  if (impl_->opts.threads.empty())
    for (std::size_t i = 0; i < rt.size(); ++i) impl_->opts.threads.push_back(i);
}

server::~server() { stop(); }

void server::route(std::string path, handler h, std::size_t max_body_bytes) {
  bool prefix = !path.empty() && path.back() == '/' && path != "/";
  impl_->routes.push_back(route_entry{std::move(path), std::move(h), max_body_bytes, prefix});
}

std::size_t connection_bound_for_fd_limit(std::uint64_t soft_limit) noexcept {
  if (soft_limit == RLIM_INFINITY) return 4096;
  return static_cast<std::size_t>(std::clamp<std::uint64_t>(soft_limit / 4, 64, 16384));
}

std::size_t connection_bound_from_fd_limit() noexcept {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 4096;
  return connection_bound_for_fd_limit(rl.rlim_cur);
}

result<void> server::start() {
  auto& s = *impl_;
  if (s.opts.max_connections == 0) s.opts.max_connections = connection_bound_from_fd_limit();
  {
    std::lock_guard lk(s.mu);
    if (s.started || s.stopping) return mc::fail(errc::unavailable_in_current_status);
    s.started = true;
  }
  if (s.opts.auth_tokens.size() > mc::rpc::max_auth_tokens) {
    s.message = "http: at most " + std::to_string(mc::rpc::max_auth_tokens) + " auth tokens";
    return mc::fail(errc::invalid_params);
  }
  for (auto& t : s.opts.auth_tokens)
    if (auto why = mc::rpc::check_auth_token(t); !why.empty()) {
      s.message = "http: " + why;
      return mc::fail(errc::invalid_params);
    }
  for (auto t : s.opts.threads)
    if (t >= s.rt.size()) {
      s.message = "http: thread index out of range";
      return mc::fail(errc::invalid_params);
    }
  error_code ec;
  auto addr = asio::ip::make_address(s.opts.host, ec);
  if (ec) {
    s.message = "http: bad host '" + s.opts.host + "': " + ec.message();
    return mc::fail(errc::invalid_params);
  }
  auto acc = std::make_unique<tcp::acceptor>(s.rt.context(s.opts.threads.front()));
  tcp::endpoint ep(addr, s.opts.port);
  acc->open(ep.protocol(), ec);
  if (!ec) acc->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc->bind(ep, ec);
  if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    s.message = "http: cannot listen on " + s.opts.host + ":" + std::to_string(s.opts.port) + ": " + ec.message();
    return mc::fail(errc::io_error);
  }
  s.port = acc->local_endpoint().port();
  s.acceptor = std::move(acc);
  {
    std::lock_guard lk(s.mu);
    ++s.tasks;
  }
  asio::co_spawn(s.rt.executor(s.opts.threads.front()), accept_loop(impl_), asio::detached);
  return {};
}

void server::stop() {
  auto& s = *impl_;
  std::vector<conn_entry> open;
  {
    std::lock_guard lk(s.mu);
    if (s.stopping) return;
    s.stopping = true;
    if (!s.started) return;
    for (auto& [id, c] : s.conns) open.push_back(c);
  }
  if (s.acceptor) {
    asio::post(s.acceptor->get_executor(), [self = impl_] {
      error_code ec;
      self->acceptor->close(ec);
    });
  }
  for (auto& c : open)
    asio::post(c.ex, [w = c.stream] {
      if (auto st = w.lock()) {
        error_code ec;
        st->socket().close(ec);
      }
    });
  std::unique_lock lk(s.mu);
  mc::runtime::assert_may_block("mc::http::server::stop (waits for its tasks)");
  s.idle_cv.wait(lk, [&] { return s.tasks == 0; });
}

std::uint16_t server::port() const noexcept { return impl_->port; }
const std::string& server::message() const noexcept { return impl_->message; }

server_stats server::stats() const {
  auto& s = *impl_;
  auto ld = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  server_stats o;
  o.connections = ld(s.connections);
  o.accepted = ld(s.accepted);
  o.refused = ld(s.refused);
  o.requests = ld(s.requests);
  o.status_2xx = ld(s.by_class[0]);
  o.status_3xx = ld(s.by_class[1]);
  o.status_4xx = ld(s.by_class[2]);
  o.status_5xx = ld(s.by_class[3]);
  o.bad_requests = ld(s.bad_requests);
  o.timeouts = ld(s.timeouts);
  o.auth_failures = ld(s.auth_failures);
  return o;
}

}  // namespace mc::http
