// The text side of the etcd client (etcd.hpp): endpoint lists, base64 as
// the JSON gateway encodes bytes, and the parsers of its replies
// (etcd_reply), which read untrusted text: sizes, counts, base64 and
// integers are checked; anything malformed is rpc_fail. Pure functions, no
// I/O (the exchanges are in etcd.cpp).
#include "mc/master/etcd.hpp"

#include "mc/runtime/endpoint.hpp"

#include <boost/json.hpp>

#include <array>
#include <charconv>
#include <limits>

namespace mc::master {
namespace {

namespace json = boost::json;

constexpr std::size_t max_endpoints = 16;

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

result<std::vector<std::string>> parse_etcd_endpoints(std::string_view list, std::string* why, bool* tls) {
  auto refuse = [&](std::string w) -> result<std::vector<std::string>> {
    if (why) *why = std::move(w);
    return fail(errc::invalid_params);
  };
  if (list.starts_with("etcd://")) list.remove_prefix(7);
  std::vector<std::string> out;
  int secure = 0;  // endpoints written https://
  for (;;) {
    auto comma = list.find(',');
    auto item = list.substr(0, comma);
    if (item.starts_with("http://")) {
      item.remove_prefix(7);
    } else if (item.starts_with("https://")) {
      item.remove_prefix(8);
      ++secure;
    }
    while (!item.empty() && item.back() == '/') item.remove_suffix(1);
    std::string_view w;
    if (!mc::endpoint::parse(item, &w)) return refuse("etcd endpoint '" + std::string(item) + "': " + std::string(w));
    if (out.size() == max_endpoints) return refuse("more than 16 etcd endpoints");
    out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    list = list.substr(comma + 1);  // "a," leaves an empty item: refused above
  }
  if (secure != 0 && secure != static_cast<int>(out.size()))
    return refuse("etcd endpoints mix https:// and plain ones");
  if (tls) *tls = secure != 0;
  return out;
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

result<std::optional<etcd_kv>> get(std::string_view body, const std::string& key, std::int64_t* revision) {
  auto o = parse_object(body);
  if (!o) return fail(errc::rpc_fail);
  if (revision) {
    auto rev = header_revision(*o);
    if (!rev || *rev < 0) return fail(errc::rpc_fail);
    *revision = *rev;
  }
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

result<etcd_watch_reply> watch(std::string_view line, const std::string& key) {
  auto o = parse_object(line);
  if (!o) return fail(errc::rpc_fail);
  auto it = o->find("result");  // {"error": {...}} is a failed stream
  if (it == o->end() || !it->value().is_object()) return fail(errc::rpc_fail);
  const auto& r = it->value().as_object();
  etcd_watch_reply out;
  auto flag = [&](std::string_view name, bool& dst) {
    auto f = r.find(name);
    if (f == r.end()) return true;  // proto3 omits false
    if (!f->value().is_bool()) return false;
    dst = f->value().as_bool();
    return true;
  };
  if (!flag("created", out.created) || !flag("canceled", out.canceled)) return fail(errc::rpc_fail);
  auto compact = int_of(r, "compact_revision");
  if (!compact || *compact < 0) return fail(errc::rpc_fail);
  out.compact_revision = *compact;
  if (r.contains("header")) {
    auto rev = header_revision(r);
    if (!rev || *rev < 0) return fail(errc::rpc_fail);
    out.revision = *rev;
  }
  auto ev = r.find("events");
  if (ev == r.end()) return out;
  if (!ev->value().is_array() || ev->value().as_array().size() > etcd_max_watch_events) return fail(errc::rpc_fail);
  std::int64_t last = 0;
  for (const auto& e : ev->value().as_array()) {
    if (!e.is_object()) return fail(errc::rpc_fail);
    const auto& eo = e.as_object();
    etcd_event one;
    if (auto t = eo.find("type"); t != eo.end()) {
      if (!t->value().is_string()) return fail(errc::rpc_fail);
      const auto& name = t->value().as_string();
      if (name == "DELETE")
        one.deleted = true;
      else if (name != "PUT")
        return fail(errc::rpc_fail);
    }
    auto kv = eo.find("kv");
    if (kv == eo.end()) return fail(errc::rpc_fail);
    auto parsed = kv_of(kv->value());
    if (!parsed || parsed->key != key || parsed->mod_revision <= 0 || parsed->mod_revision < last)
      return fail(errc::rpc_fail);
    if (!one.deleted && parsed->create_revision <= 0) return fail(errc::rpc_fail);
    last = parsed->mod_revision;
    one.kv = std::move(*parsed);
    out.events.push_back(std::move(one));
  }
  return out;
}

result<std::string> token(std::string_view body) {
  auto o = parse_object(body);
  if (!o) return fail(errc::rpc_fail);
  auto t = o->find("token");
  if (t == o->end() || !t->value().is_string()) return fail(errc::rpc_fail);
  const auto& v = t->value().as_string();
  if (v.empty() || v.size() > 4096) return fail(errc::rpc_fail);
  for (char c : v)
    if (c < 0x21 || c > 0x7e) return fail(errc::rpc_fail);  // it becomes an HTTP header value
  return std::string(v.data(), v.size());
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

}  // namespace mc::master
