#include "mc/master/etcd.hpp"

#include "mc/runtime/endpoint.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>

namespace mc::master {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;

constexpr std::size_t max_endpoints = 16;
/// Shortest share of a call's deadline one endpoint gets before the next is tried.
constexpr auto min_attempt = std::chrono::milliseconds(200);

constexpr std::string_view b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// etcd's gateway writes int64 as JSON strings ("12"); tolerate numbers too.
std::optional<std::int64_t> int_of(const json::object& o, std::string_view name) {
  auto it = o.find(name);
  if (it == o.end()) return std::int64_t{0};  // proto3 omits zero values
  if (it->value().is_int64()) return it->value().as_int64();
  if (it->value().is_uint64()) {
    auto u = it->value().as_uint64();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (!it->value().is_string()) return std::nullopt;
  auto s = it->value().as_string();
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::optional<std::string> bytes_of(const json::object& o, std::string_view name) {
  auto it = o.find(name);
  if (it == o.end()) return std::string{};
  if (!it->value().is_string()) return std::nullopt;
  return etcd_unbase64(it->value().as_string());
}

std::optional<etcd_kv> kv_of(const json::value& v) {
  if (!v.is_object()) return std::nullopt;
  auto& o = v.as_object();
  etcd_kv kv;
  auto k = bytes_of(o, "key");
  auto val = bytes_of(o, "value");
  auto cr = int_of(o, "create_revision");
  auto mr = int_of(o, "mod_revision");
  auto l = int_of(o, "lease");
  if (!k || !val || !cr || !mr || !l) return std::nullopt;
  kv.key = std::move(*k);
  kv.value = std::move(*val);
  kv.create_revision = *cr;
  kv.mod_revision = *mr;
  kv.lease = *l;
  return kv;
}

/// The "kvs" of a range reply; nullopt when malformed or longer than `limit`.
std::optional<std::vector<etcd_kv>> kvs_of(const json::object& o, std::size_t limit) {
  std::vector<etcd_kv> out;
  auto it = o.find("kvs");
  if (it == o.end()) return out;
  if (!it->value().is_array() || it->value().as_array().size() > limit) return std::nullopt;
  for (auto& e : it->value().as_array()) {
    auto kv = kv_of(e);
    if (!kv) return std::nullopt;
    out.push_back(std::move(*kv));
  }
  return out;
}

std::optional<json::object> parse_object(std::string_view body) {
  boost::system::error_code ec;
  auto v = json::parse(body, ec);
  if (ec || !v.is_object()) return std::nullopt;
  return std::move(v.as_object());
}

/// The revision in a reply's "header".
std::optional<std::int64_t> header_revision(const json::object& o) {
  auto it = o.find("header");
  if (it == o.end() || !it->value().is_object()) return std::nullopt;
  return int_of(it->value().as_object(), "revision");
}

/// One POST to one endpoint; the reply body of a 200. `retriable` tells the
/// caller whether another endpoint may answer better.
task<result<std::string>> post_once(std::string endpoint, std::string path, std::string body, bool* retriable) {
  *retriable = true;
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
  bool connected = false;
  for (auto& t : targets) {
    if (s.is_open()) s.close(ec);
    auto [cec] = co_await s.async_connect(t, asio::as_tuple(asio::use_awaitable));
    if (cec == asio::error::operation_aborted) co_return fail(errc::cancelled);
    if (!cec) {
      connected = true;
      break;
    }
  }
  if (!connected) co_return fail(errc::rpc_fail);
  http::request<http::string_body> req{http::verb::post, path, 11};
  req.set(http::field::host, endpoint);
  req.set(http::field::content_type, "application/json");
  req.set(http::field::connection, "close");
  req.body() = std::move(body);
  req.prepare_payload();
  auto [wec, wn] = co_await http::async_write(s, req, asio::as_tuple(asio::use_awaitable));
  (void)wn;
  if (wec) co_return fail(wec == asio::error::operation_aborted ? errc::cancelled : errc::rpc_fail);
  boost::beast::flat_buffer buf(etcd_max_reply + 64 * 1024);
  http::response_parser<http::string_body> parser;
  parser.body_limit(etcd_max_reply);
  parser.header_limit(64 * 1024);
  auto [rec, rn] = co_await http::async_read(s, buf, parser, asio::as_tuple(asio::use_awaitable));
  (void)rn;
  s.shutdown(tcp::socket::shutdown_both, ec);
  if (rec) co_return fail(rec == asio::error::operation_aborted ? errc::cancelled : errc::rpc_fail);
  auto& res = parser.get();
  auto status = res.result_int();
  if (status != 200) {
    // 4xx: the request itself is wrong (the same on every member); 5xx and
    // others: this member may be unhealthy, another may answer.
    *retriable = status >= 500;
    co_return fail(errc::rpc_fail);
  }
  co_return std::move(res.body());
}

}  // namespace

std::string etcd_base64(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    std::uint32_t v = (std::uint8_t(in[i]) << 16) | (std::uint8_t(in[i + 1]) << 8) | std::uint8_t(in[i + 2]);
    out += b64[(v >> 18) & 63];
    out += b64[(v >> 12) & 63];
    out += b64[(v >> 6) & 63];
    out += b64[v & 63];
  }
  if (i < in.size()) {
    std::uint32_t v = std::uint8_t(in[i]) << 16;
    if (i + 1 < in.size()) v |= std::uint8_t(in[i + 1]) << 8;
    out += b64[(v >> 18) & 63];
    out += b64[(v >> 12) & 63];
    out += i + 1 < in.size() ? b64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> etcd_unbase64(std::string_view in) {
  if (in.size() % 4 != 0) return std::nullopt;
  std::array<int, 256> map{};
  map.fill(-1);
  for (std::size_t i = 0; i < b64.size(); ++i) map[std::uint8_t(b64[i])] = static_cast<int>(i);
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (std::size_t i = 0; i < in.size(); i += 4) {
    int pad = 0;
    std::uint32_t v = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      char c = in[i + j];
      if (c == '=') {
        // Padding only in the last group, only at its end (1 or 2 chars).
        if (i + 4 != in.size() || j < 2) return std::nullopt;
        ++pad;
        v <<= 6;
        continue;
      }
      if (pad) return std::nullopt;
      int d = map[std::uint8_t(c)];
      if (d < 0) return std::nullopt;
      v = (v << 6) | static_cast<std::uint32_t>(d);
    }
    out += static_cast<char>((v >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((v >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(v & 0xff);
  }
  return out;
}

result<std::vector<std::string>> parse_etcd_endpoints(std::string_view list, std::string* why) {
  auto refuse = [&](std::string w) -> result<std::vector<std::string>> {
    if (why) *why = std::move(w);
    return fail(errc::invalid_params);
  };
  if (list.starts_with("etcd://")) list.remove_prefix(7);
  std::vector<std::string> out;
  for (;;) {
    auto comma = list.find(',');
    auto item = list.substr(0, comma);
    if (item.starts_with("http://")) item.remove_prefix(7);
    while (!item.empty() && item.back() == '/') item.remove_suffix(1);
    std::string_view w;
    if (!mc::endpoint::parse(item, &w)) return refuse("etcd endpoint '" + std::string(item) + "': " + std::string(w));
    if (out.size() == max_endpoints) return refuse("more than 16 etcd endpoints");
    out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    list = list.substr(comma + 1);  // "a," leaves an empty item: refused above
  }
  return out;
}

etcd_client::etcd_client(std::vector<std::string> endpoints, mc::duration timeout)
    : endpoints_(std::move(endpoints)), timeout_(timeout) {}

task<result<std::string>> etcd_client::call(std::string path, std::string body) {
  if (endpoints_.empty()) co_return fail(errc::invalid_params);
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  auto share = std::max<mc::duration>(min_attempt, timeout_ / static_cast<int>(endpoints_.size()));
  errc last = errc::rpc_fail;
  for (auto& ep : endpoints_) {
    auto until = std::min(deadline, std::chrono::steady_clock::now() + share);
    bool retriable = true;
    auto r = co_await mc::with_deadline_at(post_once(ep, path, body, &retriable), until);
    if (r) co_return r;
    if (mc::is(r.error(), errc::cancelled)) co_return r;
    last = mc::is(r.error(), errc::timeout) ? errc::timeout : errc::rpc_fail;
    if (!retriable || std::chrono::steady_clock::now() >= deadline) break;
  }
  co_return fail(last);
}

// ---- reply parsers (untrusted text from etcd) -----------------------------

namespace etcd_reply {

result<etcd_client::lease> grant(std::string_view body) {
  auto o = parse_object(body);
  if (!o) return fail(errc::rpc_fail);
  auto id = int_of(*o, "ID");
  auto ttl = int_of(*o, "TTL");
  if (!id || !ttl || *id == 0 || *ttl <= 0) return fail(errc::rpc_fail);
  return etcd_client::lease{*id, *ttl};
}

result<std::int64_t> keepalive(std::string_view body) {
  // A streaming endpoint: one JSON object per line, {"result": {...}}.
  auto o = parse_object(body.substr(0, body.find('\n')));
  if (!o) return fail(errc::rpc_fail);
  auto it = o->find("result");
  if (it == o->end() || !it->value().is_object()) return fail(errc::rpc_fail);
  auto ttl = int_of(it->value().as_object(), "TTL");
  if (!ttl || *ttl < 0) return fail(errc::rpc_fail);
  return *ttl;
}

result<etcd_client::campaign_result> create_if_absent(std::string_view body, const std::string& key) {
  auto o = parse_object(body);
  if (!o) return fail(errc::rpc_fail);
  etcd_client::campaign_result out;
  auto s = o->find("succeeded");
  if (s != o->end() && !s->value().is_bool()) return fail(errc::rpc_fail);
  out.created = s != o->end() && s->value().as_bool();
  if (out.created) {
    auto rev = header_revision(*o);
    if (!rev || *rev <= 0) return fail(errc::rpc_fail);
    out.revision = *rev;
    return out;
  }
  // The failure branch's range: responses[0].response_range.kvs[0]. The key
  // may have vanished between the compare and now: then no holder (retry).
  auto rs = o->find("responses");
  if (rs == o->end() || !rs->value().is_array() || rs->value().as_array().size() != 1) return fail(errc::rpc_fail);
  auto& first = rs->value().as_array()[0];
  if (!first.is_object()) return fail(errc::rpc_fail);
  auto rr = first.as_object().find("response_range");
  if (rr == first.as_object().end() || !rr->value().is_object()) return fail(errc::rpc_fail);
  auto kvs = kvs_of(rr->value().as_object(), 1);
  if (!kvs) return fail(errc::rpc_fail);
  if (!kvs->empty()) {
    if (kvs->front().key != key) return fail(errc::rpc_fail);
    out.holder = std::move(kvs->front());
  }
  return out;
}

result<std::int64_t> revision(std::string_view body) {
  auto o = parse_object(body);
  if (!o) return fail(errc::rpc_fail);
  auto rev = header_revision(*o);
  if (!rev || *rev < 0) return fail(errc::rpc_fail);
  return *rev;
}

result<std::optional<etcd_kv>> get(std::string_view body, const std::string& key) {
  auto o = parse_object(body);
  if (!o) return fail(errc::rpc_fail);
  auto kvs = kvs_of(*o, 1);
  if (!kvs) return fail(errc::rpc_fail);
  if (kvs->empty()) return std::optional<etcd_kv>{};
  if (kvs->front().key != key) return fail(errc::rpc_fail);
  return std::optional<etcd_kv>{std::move(kvs->front())};
}

result<std::vector<etcd_kv>> get_prefix(std::string_view body, const std::string& prefix, std::size_t limit) {
  auto o = parse_object(body);
  if (!o) return fail(errc::rpc_fail);
  auto kvs = kvs_of(*o, limit);
  if (!kvs) return fail(errc::rpc_fail);
  for (auto& kv : *kvs)
    if (!kv.key.starts_with(prefix)) return fail(errc::rpc_fail);
  return std::move(*kvs);
}

result<std::int64_t> deleted(std::string_view body) {
  auto o = parse_object(body);
  if (!o) return fail(errc::rpc_fail);
  auto n = int_of(*o, "deleted");
  if (!n || *n < 0 || *n > 1) return fail(errc::rpc_fail);
  return *n;
}

result<bool> succeeded(std::string_view body) {
  auto o = parse_object(body);
  if (!o) return result<bool>(boost::system::in_place_error, fail(errc::rpc_fail));
  auto s = o->find("succeeded");
  if (s == o->end()) return false;  // proto3 omits false
  if (!s->value().is_bool()) return result<bool>(boost::system::in_place_error, fail(errc::rpc_fail));
  return s->value().as_bool();
}

}  // namespace etcd_reply

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

task<result<std::optional<etcd_kv>>> etcd_client::get(std::string key) {
  json::object req{{"key", etcd_base64(key)}};
  auto r = co_await call("/v3/kv/range", json::serialize(req));
  if (!r) co_return r.error();
  co_return etcd_reply::get(*r, key);
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
