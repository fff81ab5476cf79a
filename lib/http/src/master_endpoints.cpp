// Master endpoints: /metrics, /health, /clients, /keys, /key/<key>, /prometheus/targets.
#include "mc/http/node_endpoints.hpp"
#include "mc/http/prometheus.hpp"
#include "mc/master/master_server.hpp"

#include <array>
#include <charconv>

namespace mc::http {

namespace {

constexpr std::size_t default_key_limit = 100;
constexpr std::size_t max_key_limit = 10000;

std::string replicas_json(const std::vector<mc::master::replica>& rs) {
  std::string out = "[";
  for (std::size_t i = 0; i < rs.size(); ++i) {
    if (i) out += ',';
    out += "{\"client_id\":" + json_quote(rs[i].client_id) + ",\"rpc_endpoint\":" + json_quote(rs[i].rpc_endpoint) +
           ",\"transfer_endpoint\":" + json_quote(rs[i].transfer_endpoint) + "}";
  }
  return out + "]";
}

response method_not_allowed() {
  auto r = response::json(405, "{\"error\":\"METHOD_NOT_ALLOWED\"}\n");
  r.headers.emplace_back("Allow", "GET");
  return r;
}

}  // namespace

void add_master_endpoints(server& s, mc::master::master_server& m, node_status& status,
                          std::string self_metrics_endpoint) {
  auto* srv = &s;
  auto* master = &m;
  auto* st = &status;

  s.route("/health", [st](request& req) -> task<response> {
    if (req.verb != method::get) co_return method_not_allowed();
    auto state = st->state.load(std::memory_order_relaxed);
    if (state == node_state::serving) co_return response::json(200, "{\"status\":\"serving\"}\n");
    co_return response::json(
        503, state == node_state::starting ? "{\"status\":\"starting\"}\n" : "{\"status\":\"draining\"}\n");
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
    std::uint64_t cap = 0, used = 0;
    for (auto& c : clients) {
      cap += c.info.capacity;
      used += c.info.used;
    }
    e.single("mc_master_cluster_capacity_bytes", "gauge", "Sum of the clients' reported capacity.",
             static_cast<double>(cap));
    e.single("mc_master_cluster_used_bytes", "gauge", "Sum of the clients' reported usage.", static_cast<double>(used));
    co_return response::make(200, e.take(), std::string(prometheus_content_type));
  });

  s.route("/clients", [master](request& req) -> task<response> {
    if (req.verb != method::get) co_return method_not_allowed();
    std::string out = "{\"clients\":[";
    bool first = true;
    for (auto& c : master->state().clients()) {
      if (!first) out += ',';
      first = false;
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(c.since_heartbeat).count();
      out += "{\"client_id\":" + json_quote(c.info.client_id) + ",\"rpc_endpoint\":" + json_quote(c.info.rpc_endpoint) +
             ",\"transfer_endpoint\":" + json_quote(c.info.transfer_endpoint) +
             ",\"http_endpoint\":" + json_quote(c.info.http_endpoint) +
             ",\"capacity\":" + std::to_string(c.info.capacity) + ",\"used\":" + std::to_string(c.info.used) +
             ",\"health\":" + json_quote(mc::master::health_name(c.state)) +
             ",\"since_heartbeat_ms\":" + std::to_string(ms) + ",\"keys\":" + std::to_string(c.keys) + "}";
    }
    out += "]}\n";
    co_return response::json(200, std::move(out));
  });

  // Prometheus HTTP service discovery (http_sd_configs): one target group per
  // healthy node with an HTTP endpoint, and the master's own.
  s.route("/prometheus/targets", [master, self = std::move(self_metrics_endpoint)](request& req) -> task<response> {
    if (req.verb != method::get) co_return method_not_allowed();
    std::string out = "[";
    if (!self.empty())
      out += "{\"targets\":[" + json_quote(self) + "],\"labels\":{\"mc_role\":\"master\"}}";
    for (auto& c : master->state().clients()) {
      if (c.state != mc::master::health::healthy || c.info.http_endpoint.empty()) continue;
      if (out.size() > 1) out += ',';
      out += "{\"targets\":[" + json_quote(c.info.http_endpoint) +
             "],\"labels\":{\"mc_role\":\"client\",\"mc_client_id\":" + json_quote(c.info.client_id) + "}}";
    }
    out += "]\n";
    co_return response::json(200, std::move(out));
  });

  s.route("/keys", [master](request& req) -> task<response> {
    if (req.verb != method::get) co_return method_not_allowed();
    std::string prefix = req.query_param("prefix").value_or("");
    std::size_t limit = default_key_limit;
    if (auto l = req.query_param("limit")) {
      auto [p, ec] = std::from_chars(l->data(), l->data() + l->size(), limit);
      if (ec != std::errc{} || p != l->data() + l->size() || limit == 0)
        co_return error_response(errc::invalid_params, "limit must be a positive integer");
      limit = std::min(limit, max_key_limit);
    }
    auto keys = master->state().keys(prefix, limit);
    std::string out = "{\"total_keys\":" + std::to_string(master->state().key_count()) +
                      ",\"limit\":" + std::to_string(limit) + ",\"keys\":[";
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (i) out += ',';
      out += "{\"key\":" + json_quote(keys[i].first) + ",\"size\":" + std::to_string(keys[i].second.size) +
             ",\"replicas\":" + replicas_json(keys[i].second.replicas) + "}";
    }
    out += "]}\n";
    co_return response::json(200, std::move(out));
  });

  s.route("/key/", [master](request& req) -> task<response> {
    if (req.verb != method::get) co_return method_not_allowed();
    std::string key = req.path.substr(5);
    if (key.empty()) co_return error_response(errc::invalid_key, "empty key");
    auto info = master->state().lookup(key);
    if (!info) co_return error_response(to_errc(info.error()), "key not found: " + key);
    co_return response::json(200, "{\"key\":" + json_quote(key) + ",\"size\":" + std::to_string(info->size) +
                                      ",\"replicas\":" + replicas_json(info->replicas) + "}\n");
  });
}

}  // namespace mc::http
