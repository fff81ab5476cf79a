// Master endpoints: /metrics, /health, /clients, /keys, /key/<key>, /prometheus/targets
// (the status page and /status.json: status_page.cpp).
#include "mc/http/node_endpoints.hpp"
#include "mc/http/prometheus.hpp"
#include "mc/master/master_server.hpp"
#include "text.hpp"

#include <array>
#include <charconv>

namespace mc::http {

namespace {

constexpr std::size_t default_key_limit = 100;
constexpr std::size_t max_key_limit = 10000;

using detail::json_response;
using detail::json_string;
using detail::method_not_allowed;
namespace bj = boost::json;

/// Parses all of `text` as a decimal number (no sign, no blanks); false
/// when empty, malformed or out of T's range.
template <class T>
bool whole_number(std::string_view text, T& out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && p == text.data() + text.size();
}

bj::array replicas_json(const std::vector<mc::master::replica>& rs) {
  bj::array out;
  out.reserve(rs.size());
  for (auto& r : rs)
    out.push_back(bj::object{{"client_id", json_string(r.client_id)},
                             {"rpc_endpoint", json_string(r.rpc_endpoint)},
                             {"transfer_endpoint", json_string(r.transfer_endpoint)}});
  return out;
}

/// {"key":..,"size":..,"replicas":[..]} of /keys and /key/.
bj::object key_json(std::string_view key, const mc::master::key_info& info) {
  return bj::object{{"key", json_string(key)}, {"size", info.size}, {"replicas", replicas_json(info.replicas)}};
}

}  // namespace

void add_master_endpoints(server& s, mc::master::master_server& m, node_status& status,
                          std::string self_metrics_endpoint) {
  auto* srv = &s;
  auto* master = &m;
  auto* st = &status;

  s.route("/health", [st, master](request& req) -> task<response> {
    if (req.verb != method::get) co_return method_not_allowed();
    auto state = st->state.load(std::memory_order_relaxed);
    if (state == node_state::serving && master->ha_enabled()) {
      // HA: only the leader serves (200; also while it rebuilds its table).
      // A standby answers 503 so that a load balancer or readiness probe
      // sends clients elsewhere; its process is alive all the same (/livez).
      const bool standby = !master->leading();
      const char* role = standby ? "standby" : master->rebuilding() ? "rebuilding" : "leader";
      co_return json_response(standby ? 503 : 200, {{"status", standby ? "standby" : "serving"},
                                                    {"role", role},
                                                    {"term", std::to_string(master->term())},
                                                    {"leader", master->leader()}});
    }
    if (state == node_state::serving) co_return json_response(200, {{"status", "serving"}});
    co_return json_response(503, {{"status", state == node_state::starting ? "starting" : "draining"}});
  });

  // Liveness: 200 once the master serves, whatever its HA role (a standby
  // or a draining master too), 503 while it starts: what systemd and
  // liveness probes ask (a standby's /health is 503).
  s.route("/livez", [st](request& req) -> task<response> {
    if (req.verb != method::get) co_return method_not_allowed();
    auto state = st->state.load(std::memory_order_relaxed);
    if (state == node_state::starting) co_return json_response(503, {{"status", "starting"}});
    co_return json_response(200, {{"status", state == node_state::draining ? "draining" : "alive"}});
  });

  s.route("/metrics", [srv, master](request& req) -> task<response> {
    if (req.verb != method::get) co_return method_not_allowed();
    exposition e;
    append_common_metrics(e, *srv);
    auto& md = master->state();
    auto clients = md.clients();
    std::array<std::uint64_t, 3> by_health{};
    for (auto& c : clients) by_health[static_cast<std::size_t>(c.state)]++;
    e.family("mc_master_clients", "gauge", "Registered clients by health state.");
    for (auto h : {mc::master::health::healthy, mc::master::health::suspect, mc::master::health::dead})
      e.sample("mc_master_clients", {{"health", mc::master::health_name(h)}}, by_health[static_cast<std::size_t>(h)]);
    e.single("mc_master_keys", "gauge", "Keys known to the master.", static_cast<double>(md.key_count()));
    e.single("mc_master_replicas", "gauge", "Replicas (key, holder) known to the master.",
             static_cast<double>(md.replica_count()));
    {
      auto rs = md.repairs();
      e.single("mc_master_under_replicated_keys", "gauge",
               "Replicated keys with fewer live copies than asked (at least one), as of the last background scan.",
               static_cast<double>(rs.under_replicated));
      e.single("mc_master_repairs_queued", "gauge", "Under-replicated keys waiting for a repair plan.",
               static_cast<double>(rs.queued));
      e.single("mc_master_repairs_in_flight", "gauge", "Repairs handed to a holder and not yet published.",
               static_cast<double>(rs.in_flight));
      e.family("mc_master_repairs_total", "counter", "Replica repairs by outcome.");
      e.sample("mc_master_repairs_total", {{"outcome", "scheduled"}}, static_cast<double>(rs.scheduled));
      e.sample("mc_master_repairs_total", {{"outcome", "completed"}}, static_cast<double>(rs.completed));
      e.sample("mc_master_repairs_total", {{"outcome", "timed_out"}}, static_cast<double>(rs.timed_out));
      e.sample("mc_master_repairs_total", {{"outcome", "no_target"}}, static_cast<double>(rs.no_target));
      e.single("mc_master_replicas_trimmed_total", "counter",
               "Copies refused because their key already had the copies its put asked for.",
               static_cast<double>(rs.trimmed));
    }
    {
      auto ts = md.table();
      e.family("mc_master_table_scans_total", "counter",
               "Passes over the key table to drop a holder's entries (sweep, unregister, finish_republish), and "
               "those skipped because the holder had nothing to drop.");
      e.sample("mc_master_table_scans_total", {{"outcome", "run"}}, static_cast<double>(ts.scans));
      e.sample("mc_master_table_scans_total", {{"outcome", "skipped"}}, static_cast<double>(ts.scans_skipped));
      e.single("mc_master_retired_keys", "gauge",
               "Keys of a table set aside when this master stopped leading, not freed yet.",
               static_cast<double>(ts.retired_keys));
    }
    {
      auto os = md.ordering();
      e.single("mc_master_drop_notice_overflows_total", "counter",
               "Times a holder's drop-notice queue overflowed (the holder was asked to re-publish everything).",
               static_cast<double>(os.notice_overflows));
      e.single("mc_master_drop_notices_resent_total", "counter",
               "Drop notices sent again because the holder did not acknowledge the reply that carried them.",
               static_cast<double>(os.notices_resent));
    }
    std::uint64_t cap = 0, used = 0;
    for (auto& c : clients) {
      cap += c.info.capacity;
      used += c.info.used;
    }
    e.single("mc_master_cluster_capacity_bytes", "gauge", "Sum of the clients' reported capacity.",
             static_cast<double>(cap));
    e.single("mc_master_cluster_used_bytes", "gauge", "Sum of the clients' reported usage.", static_cast<double>(used));
    if (master->ha_enabled()) {
      e.single("mc_master_ha_leader", "gauge", "1 while this master leads (HA on etcd), else 0.",
               master->leading() ? 1.0 : 0.0);
      e.single("mc_master_ha_rebuilding", "gauge",
               "1 while a new leader waits for its registered clients to re-publish.",
               master->rebuilding() ? 1.0 : 0.0);
      e.single("mc_master_ha_term", "gauge", "The leader's term (etcd revision of its election); 0 when not leading.",
               static_cast<double>(master->term()));
      e.single("mc_master_ha_elections_total", "counter", "Elections this master process has won.",
               static_cast<double>(master->elections()));
      e.single("mc_master_ha_watch_failures_total", "counter",
               "Watches of the leader key that failed while standing by (each followed by a read of the key).",
               static_cast<double>(master->leader_watch_failures()));
    }
    co_return response::make(200, e.take(), std::string(prometheus_content_type));
  });

  s.route("/clients", [master](request& req) -> task<response> {
    if (req.verb != method::get) co_return method_not_allowed();
    bj::array clients;
    for (auto& c : master->state().clients()) {
      std::int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(c.since_heartbeat).count();
      std::string url;  // a link to the node's HTTP server ("" = none registered)
      if (!c.info.http_endpoint.empty()) {
        url = "http://";
        url += c.info.http_endpoint;
        url += '/';
      }
      clients.push_back(bj::object{{"client_id", json_string(c.info.client_id)},
                                   {"rpc_endpoint", json_string(c.info.rpc_endpoint)},
                                   {"transfer_endpoint", json_string(c.info.transfer_endpoint)},
                                   {"http_endpoint", json_string(c.info.http_endpoint)},
                                   {"http_url", json_string(url)},
                                   {"capacity", c.info.capacity},
                                   {"used", c.info.used},
                                   {"health", json_string(mc::master::health_name(c.state))},
                                   {"since_heartbeat_ms", ms},
                                   {"keys", c.keys}});
    }
    co_return json_response(200, bj::object{{"clients", std::move(clients)}});
  });

  // Prometheus HTTP service discovery (http_sd_configs): one target group per
  // healthy node with an HTTP endpoint, and the master's own.
  s.route("/prometheus/targets", [master, self = std::move(self_metrics_endpoint)](request& req) -> task<response> {
    if (req.verb != method::get) co_return method_not_allowed();
    bj::array groups;
    if (!self.empty())
      groups.push_back(bj::object{{"targets", bj::array{json_string(self)}}, {"labels", {{"mc_role", "master"}}}});
    for (auto& c : master->state().clients()) {
      if (c.state != mc::master::health::healthy || c.info.http_endpoint.empty()) continue;
      groups.push_back(
          bj::object{{"targets", bj::array{json_string(c.info.http_endpoint)}},
                     {"labels", bj::object{{"mc_role", "client"}, {"mc_client_id", json_string(c.info.client_id)}}}});
    }
    co_return json_response(200, groups);
  });

  s.route("/keys", [master](request& req) -> task<response> {
    if (req.verb != method::get) co_return method_not_allowed();
    std::string prefix = req.query_param("prefix").value_or("");
    std::size_t limit = default_key_limit;
    if (auto l = req.query_param("limit")) {
      if (!whole_number(*l, limit) || limit == 0)
        co_return error_response(errc::invalid_params, "limit must be a positive integer");
      limit = std::min(limit, max_key_limit);
    }
    std::uint64_t cursor = 0;
    if (auto c = req.query_param("cursor")) {
      if (!whole_number(*c, cursor))
        co_return error_response(errc::invalid_params, "cursor must be a cursor returned by /keys");
    }
    auto page = master->state().scan_keys(prefix, cursor, limit);
    if (!page) co_return error_response(errc::invalid_params, "cursor must be a cursor returned by /keys");
    bj::array items;
    items.reserve(page->keys.size());
    for (auto& [k, info] : page->keys) items.push_back(key_json(k, info));
    // The cursor is a string: it is a 64-bit value, past JSON numbers'
    // exact range in most parsers.
    co_return json_response(200, bj::object{{"total_keys", master->state().key_count()},
                                            {"limit", limit},
                                            {"keys", std::move(items)},
                                            {"cursor", std::to_string(page->cursor)},
                                            {"complete", page->cursor == 0}});
  });

  s.route("/key/", [master](request& req) -> task<response> {
    if (req.verb != method::get) co_return method_not_allowed();
    std::string key = req.path.substr(5);
    if (key.empty()) co_return error_response(errc::invalid_key, "empty key");
    auto info = master->state().lookup(key);
    if (!info) co_return error_response(to_errc(info.error()), "key not found: " + key);
    co_return json_response(200, key_json(key, *info));
  });
}

}  // namespace mc::http
