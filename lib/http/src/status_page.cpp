// The master's status page: "/" and "/status" (one self-contained HTML page,
// embedded at build time from status_page.html) and /status.json, which
// aggregates what the master knows (health, capacity, usage and keys per node,
// from registrations and heartbeats) with each node's /stats, fetched by the
// master from the node's registered HTTP endpoint. The page thus talks to one
// origin only (no CORS on the nodes, one token, nodes need not be reachable
// from the browser).
#include "mc/http/node_endpoints.hpp"
#include "mc/master/master_server.hpp"
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/endpoint.hpp"
#include "mc/runtime/when_all.hpp"
#include "status_page.hpp"
#include "text.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>

namespace mc::http {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace bj = boost::json;
using tcp = asio::ip::tcp;
using detail::json_response;
using detail::json_string;
using detail::method_not_allowed;

/// Bounds of the fan-out to the nodes' /stats.
constexpr std::size_t max_nodes_fetched = 64;     // nodes past this are listed without stats
constexpr std::size_t max_stats_body = 64 << 10;  // a node's /stats answer
constexpr auto stats_timeout = std::chrono::milliseconds(1500);
constexpr auto snapshot_max_age = std::chrono::milliseconds(500);  // concurrent viewers share a snapshot
constexpr int max_refreshes = 2;                                   // snapshots being built at once

errc io_errc(const boost::system::error_code& ec) {
  return ec == beast::error::timeout ? errc::timeout : errc::rpc_fail;
}

/// GET http://<endpoint>/stats, parsed. Errors: rpc_fail (connect, protocol,
/// non-200, not a JSON object), timeout, too_large (body over max_stats_body),
/// invalid_params (not host:port).
task<result<bj::object>> fetch_stats(std::string endpoint, std::string token) {
  auto ep = mc::endpoint::parse(endpoint);  // as valid_http_endpoint accepts
  if (!ep) co_return fail(errc::invalid_params);
  auto ex = co_await asio::this_coro::executor;
  boost::system::error_code ec;
  beast::tcp_stream stream(ex);
  stream.expires_after(stats_timeout);                          // beast's own deadline too: every step below is bounded
  if (auto ip = asio::ip::make_address(ep->host(), ec); !ec) {  // the usual case: no resolver involved
    co_await stream.async_connect(tcp::endpoint(ip, ep->port()), asio::redirect_error(asio::use_awaitable, ec));
  } else {  // a host name (asio resolves on its own thread; with_deadline bounds the wait)
    tcp::resolver resolver(ex);
    auto addrs = co_await resolver.async_resolve(ep->host(), std::to_string(ep->port()), tcp::resolver::numeric_service,
                                                 asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return fail(io_errc(ec));
    co_await stream.async_connect(addrs, asio::redirect_error(asio::use_awaitable, ec));
  }
  if (ec) co_return fail(io_errc(ec));
  bhttp::request<bhttp::empty_body> req{bhttp::verb::get, "/stats", 11};
  req.set(bhttp::field::host, endpoint);
  req.set(bhttp::field::connection, "close");
  if (!token.empty()) {
    std::string auth = "Bearer ";
    auth += token;
    req.set(bhttp::field::authorization, auth);
  }
  co_await bhttp::async_write(stream, req, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return fail(io_errc(ec));
  beast::flat_buffer buf;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.header_limit(16 << 10);
  parser.body_limit(max_stats_body);
  co_await bhttp::async_read(stream, buf, parser, asio::redirect_error(asio::use_awaitable, ec));
  if (ec == bhttp::error::body_limit) co_return fail(errc::too_large);
  if (ec) co_return fail(io_errc(ec));
  auto& res = parser.get();
  if (res.result_int() != 200) co_return fail(errc::rpc_fail);
  auto v = bj::parse(res.body(), ec);
  if (ec || !v.is_object()) co_return fail(errc::rpc_fail);
  co_return std::move(v.as_object());
}

task<result<bj::object>> fetch_stats_bounded(std::string endpoint, std::string token) {
  // The resolver is not bounded by the stream's expiry: this bounds the whole call.
  co_return co_await with_deadline(fetch_stats(std::move(endpoint), std::move(token)),
                                   stats_timeout + std::chrono::milliseconds(500));
}

/// obj[a][b] as an unsigned integer; 0 when absent or not a non-negative integer.
std::uint64_t u64_at(const bj::object& obj, std::string_view a, std::string_view b) {
  auto* inner = obj.if_contains(a);
  if (!inner || !inner->is_object()) return 0;
  auto* v = inner->as_object().if_contains(b);
  if (!v) return 0;
  if (v->is_uint64()) return v->as_uint64();
  if (v->is_int64() && v->as_int64() >= 0) return static_cast<std::uint64_t>(v->as_int64());
  return 0;
}

/// The counters the page charts, copied field by field out of a node's /stats
/// (never passed through: a node's answer is untrusted).
bj::object stats_summary(const bj::object& s) {
  std::uint64_t xfer_bytes = 0, xfer_ops = 0;
  if (auto* t = s.if_contains("transfer"); t && t->is_object())
    for (auto& [kind, _] : t->as_object()) {
      xfer_bytes += u64_at(t->as_object(), kind, "read_bytes") + u64_at(t->as_object(), kind, "write_bytes");
      xfer_ops += u64_at(t->as_object(), kind, "read_ops") + u64_at(t->as_object(), kind, "write_ops");
    }
  std::uint64_t tier_used = 0, tier_values = 0;
  if (auto* tiers = s.if_contains("tiers"); tiers && tiers->is_array())
    for (auto& t : tiers->as_array()) {
      if (!t.is_object()) continue;
      bj::object wrap{{"t", t}};
      tier_used += u64_at(wrap, "t", "used");
      tier_values += u64_at(wrap, "t", "values");
    }
  return bj::object{{"local_hits", u64_at(s, "client", "local_hits")},
                    {"remote_hits", u64_at(s, "client", "remote_hits")},
                    {"misses", u64_at(s, "client", "misses")},
                    {"transfer_bytes", xfer_bytes},
                    {"transfer_ops", xfer_ops},
                    {"tier_used", tier_used},
                    {"tier_values", tier_values}};
}

struct status_state {
  mc::master::master_server* master = nullptr;
  std::string node_token;
  std::mutex mu;  // guards snapshot/at; never held across I/O
  std::string snapshot;
  std::chrono::steady_clock::time_point at{};
  std::atomic<int> refreshing{0};
};

task<std::string> build_snapshot(status_state& st) {
  auto& md = st.master->state();
  auto clients = md.clients();
  std::vector<task<result<bj::object>>> fetches;
  std::vector<std::size_t> fetched;  // index in clients of each fetch
  for (std::size_t i = 0; i < clients.size() && fetches.size() < max_nodes_fetched; ++i) {
    auto& c = clients[i];
    if (c.info.http_endpoint.empty() || c.state == mc::master::health::dead) continue;
    fetches.push_back(fetch_stats_bounded(c.info.http_endpoint, st.node_token));
    fetched.push_back(i);
  }
  auto stats = co_await when_all(std::move(fetches));
  std::vector<const result<bj::object>*> by_client(clients.size(), nullptr);
  for (std::size_t j = 0; j < fetched.size(); ++j) by_client[fetched[j]] = &stats[j];
  bj::array nodes;
  nodes.reserve(clients.size());
  for (std::size_t i = 0; i < clients.size(); ++i) {
    auto& c = clients[i];
    std::int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(c.since_heartbeat).count();
    bj::object n{{"client_id", json_string(c.info.client_id)},
                 {"rpc_endpoint", json_string(c.info.rpc_endpoint)},
                 {"transfer_endpoint", json_string(c.info.transfer_endpoint)},
                 {"http_endpoint", json_string(c.info.http_endpoint)},
                 {"health", json_string(mc::master::health_name(c.state))},
                 {"since_heartbeat_ms", ms},
                 {"capacity", c.info.capacity},
                 {"used", c.info.used},
                 {"keys", c.keys}};
    if (auto* r = by_client[i]; r && *r) {
      n["stats"] = stats_summary(**r);
    } else {
      n["stats"] = nullptr;
      n["stats_error"] = !r ? (c.info.http_endpoint.empty() ? "no HTTP endpoint" : "not fetched")
                            : mc::error_name(mc::to_errc(r->error()));
    }
    nodes.push_back(std::move(n));
  }
  auto now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  bj::object body{{"time_ms", now_ms},
                  {"keys", md.key_count()},
                  {"replicas", md.replica_count()},
                  {"auth", !st.node_token.empty()},
                  {"nodes", std::move(nodes)}};
  std::string out = bj::serialize(body);
  out += '\n';
  co_return out;
}

}  // namespace

void add_status_page(server& s, mc::master::master_server& m, std::string node_token) {
  auto st = std::make_shared<status_state>();
  st->master = &m;
  st->node_token = std::move(node_token);

  // "/" is a prefix route (it ends with '/'): every other path that no
  // longer route matches lands here and is answered as the server would.
  auto page = [](request& req) -> task<response> {
    if (std::find(status_page_paths.begin(), status_page_paths.end(), req.path) == status_page_paths.end()) {
      std::string msg = "no such endpoint: ";
      msg += req.path;
      co_return json_response(404, {{"error", "NOT_FOUND"}, {"message", json_string(msg)}});
    }
    if (req.verb != method::get) co_return method_not_allowed();
    auto r = response::make(200, std::string(detail::status_page_html()), "text/html; charset=utf-8");
    r.headers.emplace_back("Cache-Control", "no-cache");
    r.headers.emplace_back("Content-Security-Policy",
                           "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                           "img-src data:; connect-src 'self'; frame-ancestors 'none'");
    r.headers.emplace_back("X-Content-Type-Options", "nosniff");
    co_return r;
  };
  for (auto p : status_page_paths) s.route(std::string(p), page);

  s.route("/status.json", [st](request& req) -> task<response> {
    if (req.verb != method::get) co_return method_not_allowed();
    {
      std::lock_guard lk(st->mu);
      if (!st->snapshot.empty() && std::chrono::steady_clock::now() - st->at < snapshot_max_age)
        co_return response::json(200, st->snapshot);
    }
    if (st->refreshing.fetch_add(1, std::memory_order_acq_rel) >= max_refreshes) {
      st->refreshing.fetch_sub(1, std::memory_order_acq_rel);
      std::lock_guard lk(st->mu);
      if (!st->snapshot.empty()) co_return response::json(200, st->snapshot);  // stale but bounded work
      auto r = error_response(errc::overloaded, "status snapshot being built; retry");
      r.headers.emplace_back("Retry-After", "1");
      co_return r;
    }
    std::string body;
    try {
      body = co_await build_snapshot(*st);
    } catch (...) {
      st->refreshing.fetch_sub(1, std::memory_order_acq_rel);
      throw;
    }
    st->refreshing.fetch_sub(1, std::memory_order_acq_rel);
    {
      std::lock_guard lk(st->mu);
      st->snapshot = body;
      st->at = std::chrono::steady_clock::now();
    }
    co_return response::json(200, std::move(body));
  });
}

}  // namespace mc::http
