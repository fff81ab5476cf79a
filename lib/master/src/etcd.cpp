#include "mc/master/etcd.hpp"

#include "mc/config/auth.hpp"
#include "mc/runtime/endpoint.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <memory>
#include <mutex>

namespace mc::master {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using ssl_stream = asio::ssl::stream<tcp::socket>;

/// Shortest share of a call's deadline one endpoint gets before the next is tried.
constexpr auto min_attempt = std::chrono::milliseconds(200);

/// A TCP connection to `endpoint` ("host:port"; a name is resolved).
task<result<tcp::socket>> open_socket(const std::string& endpoint) {
  auto ep = mc::endpoint::parse(endpoint);
  if (!ep) co_return fail(errc::invalid_params);
  auto ex = co_await asio::this_coro::executor;
  boost::system::error_code ec;
  std::vector<tcp::endpoint> targets;
  auto addr = asio::ip::make_address(ep->host(), ec);
  if (!ec) {
    targets.emplace_back(addr, ep->port());
  } else {
    tcp::resolver resolver(ex);
    auto [rec, results] =
        co_await resolver.async_resolve(ep->host(), std::to_string(ep->port()), asio::as_tuple(asio::use_awaitable));
    if (rec) co_return fail(rec == asio::error::operation_aborted ? errc::cancelled : errc::rpc_fail);
    for (auto& r : results) targets.push_back(r.endpoint());
  }
  tcp::socket s(ex);
  for (auto& t : targets) {
    if (s.is_open()) s.close(ec);
    auto [cec] = co_await s.async_connect(t, asio::as_tuple(asio::use_awaitable));
    if (cec == asio::error::operation_aborted) co_return fail(errc::cancelled);
    if (!cec) co_return std::move(s);
  }
  co_return fail(errc::rpc_fail);
}

/// A POST of JSON to `path` on `endpoint` (`close`: ask the server to close
/// the connection after its reply; `token`: etcd's auth token, if any).
http::request<http::string_body> post_request(const std::string& endpoint, std::string path, std::string body,
                                              bool close, const std::string& token) {
  http::request<http::string_body> req{http::verb::post, path, 11};
  req.set(http::field::host, endpoint);
  req.set(http::field::content_type, "application/json");
  if (!token.empty()) req.set(http::field::authorization, token);
  if (close) req.set(http::field::connection, "close");
  req.body() = std::move(body);
  req.prepare_payload();
  return req;
}

/// One connection to an etcd endpoint: plain TCP or TLS.
struct conn {
  std::optional<tcp::socket> plain;
  std::optional<ssl_stream> secure;
  /// Runs `f` on the stream in use (f returns the same awaitable for both).
  template <class F>
  auto on(F&& f) {
    return secure ? f(*secure) : f(*plain);
  }
};

}  // namespace

struct etcd_security::state {
  std::string username;
  std::string password;
  std::unique_ptr<asio::ssl::context> ctx;  ///< null: plain TCP
  mutable std::mutex m;
  std::string token;  ///< guarded by m; "" = none yet
};

namespace {

/// Connects to `endpoint`; with TLS also handshakes, verifying the server's
/// certificate (chain and host name or IP address).
task<result<std::unique_ptr<conn>>> open_conn(const std::string& endpoint, const etcd_security& sec) {
  auto opened = co_await open_socket(endpoint);
  if (!opened) co_return opened.error();
  auto c = std::make_unique<conn>();
  if (!sec.tls()) {
    c->plain.emplace(std::move(*opened));
    co_return std::move(c);
  }
  auto ep = mc::endpoint::parse(endpoint);
  if (!ep) co_return fail(errc::invalid_params);
  c->secure.emplace(std::move(*opened), *sec.get()->ctx);
  boost::system::error_code ec;
  (void)asio::ip::make_address(ep->host(), ec);
  if (ec)  // SNI carries names, not addresses
    ::SSL_set_tlsext_host_name(c->secure->native_handle(), ep->host().c_str());
  ec = {};
  c->secure->set_verify_callback(asio::ssl::host_name_verification(ep->host()), ec);
  if (ec) co_return fail(errc::rpc_fail);
  auto [hec] = co_await c->secure->async_handshake(asio::ssl::stream_base::client, asio::as_tuple(asio::use_awaitable));
  if (hec) co_return fail(hec == asio::error::operation_aborted ? errc::cancelled : errc::rpc_fail);
  co_return std::move(c);
}

/// One POST to one endpoint; the reply body of a 200. `retriable` tells the
/// caller whether another endpoint may answer better; `*status` receives
/// the reply's HTTP status (0 when none came).
task<result<std::string>> post_once(std::string endpoint, std::string path, std::string body, std::string token,
                                    etcd_security sec, bool* retriable, int* status) {
  *retriable = true;
  *status = 0;
  auto opened = co_await open_conn(endpoint, sec);
  if (!opened) co_return opened.error();
  auto& c = **opened;
  auto req = post_request(endpoint, std::move(path), std::move(body), true, token);
  auto [wec, wn] =
      co_await c.on([&](auto& st) { return http::async_write(st, req, asio::as_tuple(asio::use_awaitable)); });
  (void)wn;
  if (wec) co_return fail(wec == asio::error::operation_aborted ? errc::cancelled : errc::rpc_fail);
  boost::beast::flat_buffer buf(etcd_max_reply + 64 * 1024);
  http::response_parser<http::string_body> parser;
  parser.body_limit(etcd_max_reply);
  parser.header_limit(64 * 1024);
  auto [rec, rn] =
      co_await c.on([&](auto& st) { return http::async_read(st, buf, parser, asio::as_tuple(asio::use_awaitable)); });
  (void)rn;
  if (c.plain) {
    boost::system::error_code ec;
    c.plain->shutdown(tcp::socket::shutdown_both, ec);
  }
  if (rec) co_return fail(rec == asio::error::operation_aborted ? errc::cancelled : errc::rpc_fail);
  auto& res = parser.get();
  *status = static_cast<int>(res.result_int());
  if (*status != 200) {
    // 4xx: the request itself is wrong (the same on every member); 5xx and
    // others: this member may be unhealthy, another may answer.
    *retriable = *status >= 500;
    co_return fail(errc::rpc_fail);
  }
  co_return std::move(res.body());
}

/// A watch's connection: the parser of its chunked reply, the text of a line
/// not complete yet, and events that came with the "created" message.
struct watch_stream {
  explicit watch_stream(std::unique_ptr<conn> conn_) : c(std::move(conn_)) {}
  std::unique_ptr<conn> c;
  boost::beast::flat_buffer buf{256 * 1024};  ///< raw bytes not parsed yet (bounded)
  http::response_parser<http::buffer_body> p;
  std::string pending;
  std::array<char, 16 * 1024> chunk{};
  std::vector<etcd_event> early;
};

/// The next non-blank line of a watch's reply body, without its newline.
/// Errors: rpc_fail (the stream ended, broke, or a line outgrew
/// etcd_max_reply), cancelled.
task<result<std::string>> next_line(watch_stream& w) {
  for (;;) {
    if (auto nl = w.pending.find('\n'); nl != std::string::npos) {
      std::string line = w.pending.substr(0, nl);
      w.pending.erase(0, nl + 1);
      if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
      co_return line;
    }
    if (w.pending.size() > etcd_max_reply || w.p.is_done()) co_return fail(errc::rpc_fail);
    w.p.get().body().data = w.chunk.data();
    w.p.get().body().size = w.chunk.size();
    auto [ec, n] = co_await w.c->on(
        [&](auto& st) { return http::async_read_some(st, w.buf, w.p, asio::as_tuple(asio::use_awaitable)); });
    (void)n;
    if (ec == http::error::need_buffer) ec = {};  // our chunk is full: take it
    if (ec) co_return fail(ec == asio::error::operation_aborted ? errc::cancelled : errc::rpc_fail);
    w.pending.append(w.chunk.data(), w.chunk.size() - w.p.get().body().size);
  }
}

/// Opens a watch on `endpoint`: connects, sends `body` (a create_request),
/// reads the reply header (200, else rpc_fail with the status in *status)
/// and the "created" message.
task<result<std::unique_ptr<watch_stream>>> open_watch(std::string endpoint, std::string body, std::string key,
                                                       std::string token, etcd_security sec, int* status) {
  *status = 0;
  auto opened = co_await open_conn(endpoint, sec);
  if (!opened) co_return opened.error();
  auto w = std::make_unique<watch_stream>(std::move(*opened));
  // The request body ends after the create_request; etcd keeps the watch
  // (and the reply stream) open until the connection closes.
  auto req = post_request(endpoint, "/v3/watch", std::move(body), false, token);
  auto [wec, wn] =
      co_await w->c->on([&](auto& st) { return http::async_write(st, req, asio::as_tuple(asio::use_awaitable)); });
  (void)wn;
  if (wec) co_return fail(wec == asio::error::operation_aborted ? errc::cancelled : errc::rpc_fail);
  w->p.header_limit(64 * 1024);
  w->p.body_limit(boost::none);  // a stream: bounded per line (next_line) and by the caller's wait
  auto [rec, rn] = co_await w->c->on(
      [&](auto& st) { return http::async_read_header(st, w->buf, w->p, asio::as_tuple(asio::use_awaitable)); });
  (void)rn;
  if (rec) co_return fail(rec == asio::error::operation_aborted ? errc::cancelled : errc::rpc_fail);
  *status = static_cast<int>(w->p.get().result_int());
  if (*status != 200) co_return fail(errc::rpc_fail);
  auto line = co_await next_line(*w);
  if (!line) co_return line.error();
  auto first = etcd_reply::watch(*line, key);
  if (!first || !first->created || first->canceled) co_return fail(errc::rpc_fail);
  w->early = std::move(first->events);
  co_return std::move(w);
}

/// The next change on the watch. Errors: rpc_fail (stream ended or
/// malformed, or etcd canceled the watch), cancelled.
task<result<etcd_event>> next_event(watch_stream& w, std::string key) {
  for (;;) {
    auto line = co_await next_line(w);
    if (!line) co_return line.error();
    auto m = etcd_reply::watch(*line, key);
    if (!m || m->canceled) co_return fail(errc::rpc_fail);
    if (!m->events.empty()) co_return std::move(m->events.front());
    // else a progress notification: keep waiting
  }
}

}  // namespace

result<etcd_security> etcd_security::load(const etcd_security_options& o, bool tls_endpoints, std::string* why) {
  auto refuse = [&](std::string w) -> result<etcd_security> {
    if (why) *why = std::move(w);
    return fail(errc::invalid_params);
  };
  etcd_security out;
  const bool tls = o.tls || tls_endpoints || !o.ca_file.empty() || !o.cert_file.empty() || !o.key_file.empty();
  const bool auth = !o.username.empty() || !o.password_file.empty();
  if (!tls && !auth) return out;
  auto st = std::make_shared<state>();
  if (auth) {
    if (o.username.empty()) return refuse("etcd_password_file is set but etcd_username is empty");
    if (o.password_file.empty()) return refuse("etcd_username is set but etcd_password_file is empty");
    std::string text;
    switch (mc::config::read_secret_file(o.password_file, 4096, &text)) {
      case mc::config::secret_file_status::unreadable:
        return refuse("etcd_password_file '" + o.password_file + "' cannot be read");
      case mc::config::secret_file_status::too_large:
        return refuse("etcd_password_file '" + o.password_file + "' is longer than 4 KiB");
      case mc::config::secret_file_status::empty:
        return refuse("etcd_password_file '" + o.password_file + "' is empty");
      case mc::config::secret_file_status::ok:
        break;
    }
    st->username = o.username;
    st->password = std::move(text);
  }
  if (tls) {
    if (o.cert_file.empty() != o.key_file.empty())
      return refuse("etcd_cert_file and etcd_key_file must be given together");
    auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
    boost::system::error_code ec;
    ctx->set_options(asio::ssl::context::no_sslv2 | asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                         asio::ssl::context::no_tlsv1_1,
                     ec);
    ctx->set_verify_mode(asio::ssl::verify_peer, ec);
    if (!o.ca_file.empty()) {
      ctx->load_verify_file(o.ca_file, ec);
      if (ec) return refuse("etcd_ca_file '" + o.ca_file + "': " + ec.message());
    } else {
      ctx->set_default_verify_paths(ec);
      if (ec) return refuse("the system's CA certificates: " + ec.message());
    }
    if (!o.cert_file.empty()) {
      ctx->use_certificate_chain_file(o.cert_file, ec);
      if (ec) return refuse("etcd_cert_file '" + o.cert_file + "': " + ec.message());
      ctx->use_private_key_file(o.key_file, asio::ssl::context::pem, ec);
      if (ec) return refuse("etcd_key_file '" + o.key_file + "': " + ec.message());
      if (::SSL_CTX_check_private_key(ctx->native_handle()) != 1)
        return refuse("etcd_key_file '" + o.key_file + "' is not the key of etcd_cert_file '" + o.cert_file + "'");
    }
    st->ctx = std::move(ctx);
  }
  out.s_ = std::move(st);
  return out;
}

bool etcd_security::tls() const noexcept { return s_ && s_->ctx; }
bool etcd_security::authenticates() const noexcept { return s_ && !s_->username.empty(); }

etcd_client::etcd_client(std::vector<std::string> endpoints, mc::duration timeout, etcd_security security)
    : endpoints_(std::move(endpoints)), timeout_(timeout), security_(std::move(security)) {}

std::string etcd_client::token() const {
  if (!security_.authenticates()) return {};
  std::lock_guard lk(security_.get()->m);
  return security_.get()->token;
}

task<result<std::string>> etcd_client::call_once(std::string path, std::string body, int* status) {
  *status = 0;
  if (endpoints_.empty()) co_return fail(errc::invalid_params);
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  auto share = std::max<mc::duration>(min_attempt, timeout_ / static_cast<int>(endpoints_.size()));
  errc last = errc::rpc_fail;
  const auto tok = path == "/v3/auth/authenticate" ? std::string{} : token();
  for (auto& ep : endpoints_) {
    auto until = std::min(deadline, std::chrono::steady_clock::now() + share);
    bool retriable = true;
    int st = 0;
    auto r = co_await mc::with_deadline_at(post_once(ep, path, body, tok, security_, &retriable, &st), until);
    if (st != 0) *status = st;
    if (r) co_return r;
    if (mc::is(r.error(), errc::cancelled)) co_return r;
    last = mc::is(r.error(), errc::timeout) ? errc::timeout : errc::rpc_fail;
    if (!retriable || std::chrono::steady_clock::now() >= deadline) break;
  }
  co_return fail(last);
}

task<result<void>> etcd_client::authenticate() {
  auto& st = *security_.get();
  json::object req{{"name", st.username}, {"password", st.password}};
  int status = 0;
  auto r = co_await call_once("/v3/auth/authenticate", json::serialize(req), &status);
  if (!r) {
    // etcd answers a wrong user or password 400 (InvalidArgument), a
    // disabled auth 400 too ("authentication is not enabled").
    if (status >= 400 && status < 500) co_return fail(errc::access_denied);
    co_return r.error();
  }
  auto t = etcd_reply::token(*r);
  if (!t) co_return t.error();
  std::lock_guard lk(st.m);
  st.token = std::move(*t);
  co_return result<void>{};
}

task<result<std::string>> etcd_client::call(std::string path, std::string body) {
  const bool auth = security_.authenticates();
  if (auth && token().empty()) {
    auto a = co_await authenticate();
    if (!a) co_return a.error();
  }
  int status = 0;
  auto r = co_await call_once(path, body, &status);
  if (!r && auth && status == 401) {  // the token expired or was revoked: once more with a new one
    auto a = co_await authenticate();
    if (!a) co_return a.error();
    r = co_await call_once(std::move(path), std::move(body), &status);
  }
  if (!r && (status == 401 || status == 403)) co_return fail(errc::access_denied);
  co_return r;
}

task<void> etcd_client::follow(std::string key, std::function<bool(const std::optional<etcd_kv>&)> seen,
                               mc::duration window, mc::duration pause, std::atomic<std::uint64_t>* watch_failures,
                               std::int64_t from) {
  co_await asio::this_coro::throw_if_cancelled(false);
  for (;;) {
    if (from == 0) {  // read the key, then watch from just after the read
      std::int64_t rev = 0;
      auto kv = co_await get(key, &rev);
      if (kv) {
        if (!seen(*kv)) co_return;
        from = std::max(rev, *kv ? (*kv)->mod_revision : 0) + 1;
        continue;
      }
      if (mc::is(kv.error(), errc::cancelled)) co_return;
    } else {
      auto ev = co_await watch_once(key, from, window);
      if (ev) {
        if (!*ev) continue;  // no change within the window: watch again
        if (!seen((*ev)->deleted ? std::nullopt : std::optional<etcd_kv>((*ev)->kv))) co_return;
        from = (*ev)->kv.mod_revision + 1;
        continue;
      }
      if (mc::is(ev.error(), errc::cancelled)) co_return;
      if (watch_failures) watch_failures->fetch_add(1, std::memory_order_relaxed);
      from = 0;
    }
    auto slept = co_await mc::sleep_for(pause);
    if (!slept) co_return;  // cancelled
  }
}

// ---- requests ----------------------------------------------------------------

task<result<etcd_client::lease>> etcd_client::grant(std::int64_t ttl_s) {
  json::object req{{"TTL", std::to_string(ttl_s)}};
  auto r = co_await call("/v3/lease/grant", json::serialize(req));
  if (!r) co_return r.error();
  co_return etcd_reply::grant(*r);
}

task<result<std::int64_t>> etcd_client::keepalive(std::int64_t lease_id) {
  json::object req{{"ID", std::to_string(lease_id)}};
  auto r = co_await call("/v3/lease/keepalive", json::serialize(req));
  if (!r) co_return r.error();
  co_return etcd_reply::keepalive(*r);
}

task<result<void>> etcd_client::revoke(std::int64_t lease_id) {
  json::object req{{"ID", std::to_string(lease_id)}};
  auto r = co_await call("/v3/lease/revoke", json::serialize(req));
  if (!r) co_return r.error();
  co_return result<void>{};
}

task<result<etcd_client::campaign_result>> etcd_client::create_if_absent(std::string key, std::string value,
                                                                         std::int64_t lease_id) {
  auto k = etcd_base64(key);
  json::object put{{"key", k}, {"value", etcd_base64(value)}};
  if (lease_id != 0) put["lease"] = std::to_string(lease_id);
  json::object req{{"compare", json::array{json::object{
                                   {"key", k}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}}}},
                   {"success", json::array{json::object{{"request_put", put}}}},
                   {"failure", json::array{json::object{{"request_range", json::object{{"key", k}}}}}}};
  auto r = co_await call("/v3/kv/txn", json::serialize(req));
  if (!r) co_return r.error();
  co_return etcd_reply::create_if_absent(*r, key);
}

task<result<std::int64_t>> etcd_client::put(std::string key, std::string value, std::int64_t lease_id) {
  json::object req{{"key", etcd_base64(key)}, {"value", etcd_base64(value)}};
  if (lease_id != 0) req["lease"] = std::to_string(lease_id);
  auto r = co_await call("/v3/kv/put", json::serialize(req));
  if (!r) co_return r.error();
  co_return etcd_reply::revision(*r);
}

task<result<std::optional<etcd_kv>>> etcd_client::get(std::string key, std::int64_t* revision) {
  json::object req{{"key", etcd_base64(key)}};
  auto r = co_await call("/v3/kv/range", json::serialize(req));
  if (!r) co_return r.error();
  co_return etcd_reply::get(*r, key, revision);
}

task<result<std::optional<etcd_event>>> etcd_client::watch_once(std::string key, std::int64_t start_revision,
                                                                mc::duration wait) {
  if (endpoints_.empty() || start_revision <= 0) co_return fail(errc::invalid_params);
  const auto until = std::chrono::steady_clock::now() + wait;
  json::object create{{"key", etcd_base64(key)}, {"start_revision", std::to_string(start_revision)}};
  const auto body = json::serialize(json::object{{"create_request", std::move(create)}});
  const bool auth = security_.authenticates();
  if (auth && token().empty()) {
    auto a = co_await authenticate();
    if (!a) co_return a.error();
  }
  std::unique_ptr<watch_stream> w;
  int status = 0;
  for (std::size_t i = 0; i < endpoints_.size(); ++i) {
    auto opened =
        co_await mc::with_deadline(open_watch(endpoints_[i], body, key, token(), security_, &status), timeout_);
    if (!opened && auth && status == 401) {  // the token expired: a new one, this endpoint again
      auto a = co_await authenticate();
      if (!a) co_return a.error();
      opened = co_await mc::with_deadline(open_watch(endpoints_[i], body, key, token(), security_, &status), timeout_);
    }
    if (opened) {
      w = std::move(*opened);
      break;
    }
    if (mc::is(opened.error(), errc::cancelled)) co_return opened.error();
    if (std::chrono::steady_clock::now() >= until) break;
  }
  if (!w) co_return fail(status == 401 || status == 403 ? errc::access_denied : errc::rpc_fail);
  if (!w->early.empty()) co_return std::optional<etcd_event>(std::move(w->early.front()));
  auto ev = co_await mc::with_deadline_at(next_event(*w, key), until);
  if (ev) co_return std::optional<etcd_event>(std::move(*ev));
  if (mc::is(ev.error(), errc::timeout)) co_return std::optional<etcd_event>{};
  co_return ev.error();
}

task<result<std::vector<etcd_kv>>> etcd_client::get_prefix(std::string prefix, std::int64_t limit) {
  if (prefix.empty() || limit <= 0) co_return fail(errc::invalid_params);
  // range_end: the prefix with its last byte incremented (bytes of 0xff carried).
  std::string end = prefix;
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (end.empty()) co_return fail(errc::invalid_params);
  end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  json::object req{{"key", etcd_base64(prefix)}, {"range_end", etcd_base64(end)}, {"limit", std::to_string(limit)}};
  auto r = co_await call("/v3/kv/range", json::serialize(req));
  if (!r) co_return r.error();
  co_return etcd_reply::get_prefix(*r, prefix, static_cast<std::size_t>(limit));
}

task<result<std::int64_t>> etcd_client::del(std::string key) {
  json::object req{{"key", etcd_base64(key)}};
  auto r = co_await call("/v3/kv/deleterange", json::serialize(req));
  if (!r) co_return r.error();
  co_return etcd_reply::deleted(*r);
}

task<result<bool>> etcd_client::del_if_created(std::string key, std::int64_t create_revision) {
  auto k = etcd_base64(key);
  json::object req{{"compare", json::array{json::object{{"key", k},
                                                        {"target", "CREATE"},
                                                        {"result", "EQUAL"},
                                                        {"create_revision", std::to_string(create_revision)}}}},
                   {"success", json::array{json::object{{"request_delete_range", json::object{{"key", k}}}}}}};
  auto r = co_await call("/v3/kv/txn", json::serialize(req));
  if (!r) co_return result<bool>(boost::system::in_place_error, r.error());
  co_return etcd_reply::succeeded(*r);
}

}  // namespace mc::master
