// Client endpoints: /metrics, /health, /stats, GET/PUT/DELETE /kv/<key>.
#include "mc/http/node_endpoints.hpp"
#include "mc/http/prometheus.hpp"
#include "mc/store/client.hpp"
#include "mc/store/data_manager.hpp"
#include "mc/tiered/tiered_backend.hpp"
#include "text.hpp"

#include <algorithm>
#include <new>
#include <optional>

namespace mc::http {

namespace {

using detail::json_response;
using detail::json_string;
using detail::method_not_allowed;
using mc::store::client;
namespace bj = boost::json;

response unavailable(std::string_view why) {
  return json_response(503, {{"error", "UNAVAILABLE"}, {"message", json_string(why)}});
}

void transfer_metrics(exposition& e, const mc::transfer::engine_stats& t) {
  using mc::transfer::transport_kind;
  constexpr transport_kind kinds[] = {transport_kind::tcp, transport_kind::same_host, transport_kind::in_process,
                                      transport_kind::rdma};
  e.family("mc_transfer_bytes_total", "counter", "Bytes moved by transfers this node initiated.");
  for (auto k : kinds) {
    auto& c = t.initiated[static_cast<std::size_t>(k)];
    e.sample("mc_transfer_bytes_total", {{"transport", to_string(k)}, {"op", "read"}}, c.read_bytes);
    e.sample("mc_transfer_bytes_total", {{"transport", to_string(k)}, {"op", "write"}}, c.write_bytes);
  }
  e.family("mc_transfer_operations_total", "counter", "Transfer requests this node initiated.");
  for (auto k : kinds) {
    auto& c = t.initiated[static_cast<std::size_t>(k)];
    e.sample("mc_transfer_operations_total", {{"transport", to_string(k)}, {"op", "read"}}, c.read_ops);
    e.sample("mc_transfer_operations_total", {{"transport", to_string(k)}, {"op", "write"}}, c.write_ops);
  }
  e.family("mc_transfer_errors_total", "counter", "Initiated transfer requests that failed.");
  for (auto k : kinds)
    e.sample("mc_transfer_errors_total", {{"transport", to_string(k)}},
             t.initiated[static_cast<std::size_t>(k)].errors);
  if (!t.rdma_devices.empty()) {
    e.family("mc_transfer_rdma_device_bytes_total", "counter",
             "Bytes of initiated RDMA work requests that completed, per device (multi-rail).");
    for (auto& d : t.rdma_devices) e.sample("mc_transfer_rdma_device_bytes_total", {{"device", d.name}}, d.bytes);
    e.family("mc_transfer_rdma_device_operations_total", "counter",
             "Initiated RDMA work requests (slices) that completed, per device.");
    for (auto& d : t.rdma_devices) e.sample("mc_transfer_rdma_device_operations_total", {{"device", d.name}}, d.ops);
  }
  e.family("mc_transfer_served_bytes_total", "counter", "Bytes moved for requests of peers (served side).");
  e.sample("mc_transfer_served_bytes_total", {{"op", "read"}}, t.served_read_bytes);
  e.sample("mc_transfer_served_bytes_total", {{"op", "write"}}, t.served_write_bytes);
  e.family("mc_transfer_served_operations_total", "counter", "Requests of peers served.");
  e.sample("mc_transfer_served_operations_total", {{"op", "read"}}, t.served_read_ops);
  e.sample("mc_transfer_served_operations_total", {{"op", "write"}}, t.served_write_ops);
  e.single("mc_transfer_served_rejects_total", "counter", "Peer requests refused (token, range, revoked).",
           static_cast<double>(t.served_rejects));
  e.family("mc_transfer_calls_total", "counter",
           "TransferEngine calls (small messages: the store's small-value reads), by side and outcome.");
  e.sample("mc_transfer_calls_total", {{"side", "served"}, {"outcome", "ok"}}, t.served_calls);
  e.sample("mc_transfer_calls_total", {{"side", "served"}, {"outcome", "error"}}, t.served_call_errors);
  e.sample("mc_transfer_calls_total", {{"side", "initiated"}, {"outcome", "ok"}}, t.initiated_calls);
  e.sample("mc_transfer_calls_total", {{"side", "initiated"}, {"outcome", "error"}}, t.initiated_call_errors);
  e.family("mc_transfer_connections", "gauge", "Open transfer connections.");
  e.sample("mc_transfer_connections", {{"direction", "outbound"}}, t.outbound_connections);
  e.sample("mc_transfer_connections", {{"direction", "inbound"}}, t.inbound_connections);
  e.single("mc_transfer_registered_regions", "gauge", "Registered memory regions.",
           static_cast<double>(t.registered_regions));
  e.single("mc_transfer_same_host_fallbacks_total", "counter",
           "Same-host transfers that fell back to TCP: the peer is not same host after all (kernel refused "
           "process_vm_*, or its uid / pid namespace / engine instance did not check out).",
           static_cast<double>(t.same_host_fallbacks));
  e.single("mc_transfer_revoked_with_grants_total", "counter",
           "Unregistrations while a same-host peer still held a grant on the region (it may copy until the "
           "grant's lease ends).",
           static_cast<double>(t.revoked_with_grants));
  e.single("mc_transfer_same_host_grants_held", "gauge", "Same-host grants peers hold on our regions now.",
           static_cast<double>(t.same_host_grants_held));
  e.single("mc_transfer_same_host_range_grants_total", "counter",
           "Same-host grants given for a run of ranges under one token at once.",
           static_cast<double>(t.same_host_range_grants));
  e.single("mc_transfer_same_host_releases_deferred_total", "counter",
           "Same-host releases sent in front of the next request on their connection (spread batches).",
           static_cast<double>(t.same_host_releases_deferred));
}

/// The client's ordering of publishes and removals at the master.
void ordering_metrics(exposition& e, const mc::store::client_stats& cs) {
  e.single("mc_client_removal_notices_total", "counter",
           "Removal notices (evicted or superseded copies) sent to the master.", static_cast<double>(cs.notices_sent));
  e.single("mc_client_notice_batches_total", "counter", "removeReplicas calls that carried removal notices.",
           static_cast<double>(cs.notice_batches));
  e.single("mc_client_notice_overflows_total", "counter",
           "Times the bounded removal-notice queue overflowed (a full resync followed).",
           static_cast<double>(cs.notice_overflows));
  e.single("mc_client_resyncs_total", "counter", "Full re-publishes of the key set (registration, overflow).",
           static_cast<double>(cs.resyncs));
  e.single("mc_client_superseded_drops_total", "counter",
           "Local copies dropped because a newer write elsewhere superseded them.",
           static_cast<double>(cs.superseded_drops));
  e.single("mc_client_stale_publishes_total", "counter",
           "Publishes the master refused as older than the version it had.", static_cast<double>(cs.stale_publishes));
  e.single("mc_client_failed_publishes_total", "counter",
           "Puts whose publish to the master failed; their copy was dropped (never re-published later).",
           static_cast<double>(cs.failed_publishes));
  e.single("mc_client_publish_batches_total", "counter",
           "addReplicas calls publishes went out in (concurrent puts are group-committed).",
           static_cast<double>(cs.publish_batches));
  e.single("mc_client_publishes_total", "counter", "Keys published to the master.", static_cast<double>(cs.publishes));
  e.single("mc_client_publish_calls_total", "counter",
           "Publish batches the master took as TransferEngine calls (no RPC).", static_cast<double>(cs.publish_calls));
}

/// The batch data path: calls, keys, per-owner fan-out, inline values.
void batch_metrics(exposition& e, const mc::store::client_stats& cs) {
  e.single("mc_client_batch_calls_total", "counter", "Batch calls (batch_get / batch_put / _parts / batch_exists).",
           static_cast<double>(cs.batch_calls));
  e.single("mc_client_batch_keys_total", "counter", "Keys those batch calls carried.",
           static_cast<double>(cs.batch_keys));
  e.single("mc_client_batch_rpcs_total", "counter",
           "Peer batch RPCs sent (one per owner per batch, more when split to fit the limits).",
           static_cast<double>(cs.batch_rpcs));
  e.single("mc_client_inline_reads_total", "counter", "Remote reads answered inside the RPC reply (or a call's).",
           static_cast<double>(cs.inline_reads));
  e.single("mc_client_read_calls_total", "counter",
           "Batches of small-value reads sent as TransferEngine calls (one TCP round trip, no RPC).",
           static_cast<double>(cs.read_calls));
  e.single("mc_client_inline_writes_total", "counter",
           "Remote writes that carried the value inside the RPC (or a call).", static_cast<double>(cs.inline_writes));
  e.single("mc_client_write_calls_total", "counter",
           "Batches of small-value writes sent as TransferEngine calls (no RPC).", static_cast<double>(cs.write_calls));
  e.single("mc_client_remote_read_bytes_total", "counter", "Value bytes remote reads brought in.",
           static_cast<double>(cs.remote_read_bytes));
}

void tier_metrics(exposition& e, const std::vector<mc::tiered::tier_usage>& tiers) {
  struct fam {
    const char* name;
    const char* type;
    const char* help;
    std::uint64_t mc::tiered::tier_usage::*field;
  };
  static const fam fams[] = {
      {"mc_tier_capacity_bytes", "gauge", "Capacity of a tier.", &mc::tiered::tier_usage::capacity},
      {"mc_tier_used_bytes", "gauge", "Bytes reserved in a tier.", &mc::tiered::tier_usage::used},
      {"mc_tier_values", "gauge", "Values held in a tier.", &mc::tiered::tier_usage::values},
      {"mc_tier_evictions_total", "counter", "Values dropped from a tier to make room.",
       &mc::tiered::tier_usage::evictions},
      {"mc_tier_demotions_total", "counter", "Values moved from a tier to a lower one.",
       &mc::tiered::tier_usage::demotions},
      {"mc_tier_allocation_failures_total", "counter", "Allocations a tier could not satisfy.",
       &mc::tiered::tier_usage::allocation_failures},
  };
  for (auto& f : fams) {
    e.family(f.name, f.type, f.help);
    for (std::size_t i = 0; i < tiers.size(); ++i) {
      auto idx = std::to_string(i);
      e.sample(f.name, {{"tier", idx}, {"type", mc::tiered::tier_type_name(tiers[i].type)}}, tiers[i].*f.field);
    }
  }
}

response metrics(const server& s, client& c) {
  exposition e;
  append_common_metrics(e, s);
  auto cs = c.stats();
  e.single("mc_client_registered", "gauge", "1 when registered with the master.", cs.registered ? 1.0 : 0.0);
  e.family("mc_client_gets_total", "counter", "get() outcomes: local hit, remote hit, miss.");
  e.sample("mc_client_gets_total", {{"result", "local_hit"}}, cs.local_hits);
  e.sample("mc_client_gets_total", {{"result", "remote_hit"}}, cs.remote_hits);
  e.sample("mc_client_gets_total", {{"result", "miss"}}, cs.misses);
  e.single("mc_client_replica_fallbacks_total", "counter", "Replica reads that failed over to another replica.",
           static_cast<double>(cs.fallbacks));
  e.single("mc_client_route_cache_hits_total", "counter", "Lookups answered from the route cache.",
           static_cast<double>(cs.route_cache_hits));
  e.single("mc_client_master_errors_total", "counter", "Failed calls to the master.",
           static_cast<double>(cs.master_errors));
  e.single("mc_client_write_routes_total", "counter", "Write routes asked of the master (remote puts).",
           static_cast<double>(cs.write_routes));
  e.single("mc_client_write_route_lease_hits_total", "counter",
           "Remote puts routed by a write-route lease (no master round trip).",
           static_cast<double>(cs.write_route_lease_hits));
  e.single("mc_client_write_route_lease_drops_total", "counter",
           "Write-route leases dropped after a put through them failed at the owner.",
           static_cast<double>(cs.write_route_lease_drops));
  e.single("mc_client_replication_incomplete_total", "counter",
           "Replicated puts of a key that committed some but not all copies (the master repairs the rest).",
           static_cast<double>(cs.replication_incomplete));
  e.family("mc_client_repairs_total", "counter", "Copies this node made (or failed to make) for the master's repairs.");
  e.sample("mc_client_repairs_total", {{"outcome", "done"}}, static_cast<double>(cs.repairs_done));
  e.sample("mc_client_repairs_total", {{"outcome", "failed"}}, static_cast<double>(cs.repairs_failed));
  batch_metrics(e, cs);
  ordering_metrics(e, cs);

  auto d = c.data().stats();
  e.single("mc_store_remote_reads_total", "counter", "Remote reads served (spec: peer reads our value).",
           static_cast<double>(d.remote_reads));
  e.single("mc_store_remote_read_bytes_total", "counter", "Bytes of remote reads served.",
           static_cast<double>(d.remote_read_bytes));
  e.single("mc_store_remote_writes_total", "counter", "Remote writes served.", static_cast<double>(d.remote_writes));
  e.single("mc_store_remote_write_bytes_total", "counter", "Bytes of remote writes served.",
           static_cast<double>(d.remote_write_bytes));
  e.single("mc_store_remote_errors_total", "counter", "Remote reads/writes served that failed.",
           static_cast<double>(d.remote_errors));
  e.family("mc_store_refused_total", "counter",
           "Peer request items this node refused: reason=overloaded (over max_remote_write_bytes or an in-flight "
           "limit), reason=access_denied (unknown requester or a foreign transfer endpoint).");
  e.sample("mc_store_refused_total", {{"reason", "overloaded"}}, cs.service_overloaded);
  e.sample("mc_store_refused_total", {{"reason", "access_denied"}}, cs.service_access_denied);
  e.single("mc_key_lock_waits_total", "counter", "Key lock acquisitions that had to wait.",
           static_cast<double>(d.lock_waits));
  e.single("mc_key_lock_wait_seconds_total", "counter", "Total time spent waiting for key locks.",
           static_cast<double>(d.lock_wait_ns) * 1e-9);
  e.family("mc_store_batches_served_total", "counter",
           "Peer batches served: op=read (batch gets from peers), op=write (batch puts from peers).");
  e.sample("mc_store_batches_served_total", {{"op", "read"}}, d.read_batches);
  e.sample("mc_store_batches_served_total", {{"op", "write"}}, d.write_batches);
  e.family("mc_store_batch_stage_seconds_total", "counter",
           "Time the served peer batches spent per stage, summed: prepare (pin values / allocate space, check "
           "descriptors), transfer (move the bytes), commit (writes: commit and publish to the master).");
  e.sample("mc_store_batch_stage_seconds_total", {{"op", "read"}, {"stage", "prepare"}},
           static_cast<double>(d.read_batch_prepare_ns) * 1e-9);
  e.sample("mc_store_batch_stage_seconds_total", {{"op", "read"}, {"stage", "transfer"}},
           static_cast<double>(d.read_batch_transfer_ns) * 1e-9);
  e.sample("mc_store_batch_stage_seconds_total", {{"op", "write"}, {"stage", "prepare"}},
           static_cast<double>(d.write_batch_prepare_ns) * 1e-9);
  e.sample("mc_store_batch_stage_seconds_total", {{"op", "write"}, {"stage", "transfer"}},
           static_cast<double>(d.write_batch_transfer_ns) * 1e-9);
  e.sample("mc_store_batch_stage_seconds_total", {{"op", "write"}, {"stage", "commit"}},
           static_cast<double>(d.write_batch_commit_ns) * 1e-9);

  tier_metrics(e, c.backend().usage());
  transfer_metrics(e, c.engine().stats());
  return response::make(200, e.take(), std::string(prometheus_content_type));
}

bj::object stats_json(client& c) {
  auto cs = c.stats();
  auto d = c.data().stats();
  auto t = c.engine().stats();
  bj::array tiers;
  for (auto& x : c.backend().usage())
    tiers.push_back(bj::object{{"type", json_string(mc::tiered::tier_type_name(x.type))},
                               {"priority", x.priority},
                               {"capacity", x.capacity},
                               {"used", x.used},
                               {"values", x.values},
                               {"evictions", x.evictions},
                               {"demotions", x.demotions}});
  bj::object transfer;
  using mc::transfer::transport_kind;
  for (auto k : {transport_kind::tcp, transport_kind::same_host, transport_kind::in_process, transport_kind::rdma}) {
    auto& x = t.initiated[static_cast<std::size_t>(k)];
    transfer[to_string(k)] = bj::object{{"read_ops", x.read_ops},
                                        {"read_bytes", x.read_bytes},
                                        {"write_ops", x.write_ops},
                                        {"write_bytes", x.write_bytes},
                                        {"errors", x.errors}};
  }
  return bj::object{{"client_id", json_string(c.id())},
                    {"rpc_endpoint", json_string(c.rpc_endpoint())},
                    {"transfer_endpoint", json_string(c.transfer_endpoint())},
                    {"registered", cs.registered},
                    {"client",
                     {{"local_hits", cs.local_hits},
                      {"remote_hits", cs.remote_hits},
                      {"misses", cs.misses},
                      {"fallbacks", cs.fallbacks},
                      {"route_cache_hits", cs.route_cache_hits},
                      {"write_routes", cs.write_routes},
                      {"write_route_lease_hits", cs.write_route_lease_hits},
                      {"write_route_lease_drops", cs.write_route_lease_drops},
                      {"replication_incomplete", cs.replication_incomplete},
                      {"repairs_done", cs.repairs_done},
                      {"repairs_failed", cs.repairs_failed},
                      {"master_errors", cs.master_errors}}},
                    {"data_manager",
                     {{"remote_reads", d.remote_reads},
                      {"remote_read_bytes", d.remote_read_bytes},
                      {"remote_writes", d.remote_writes},
                      {"remote_write_bytes", d.remote_write_bytes},
                      {"remote_errors", d.remote_errors},
                      {"lock_waits", d.lock_waits},
                      {"lock_wait_ns", d.lock_wait_ns},
                      {"read_batches", d.read_batches},
                      {"read_batch_prepare_ns", d.read_batch_prepare_ns},
                      {"read_batch_transfer_ns", d.read_batch_transfer_ns},
                      {"write_batches", d.write_batches},
                      {"write_batch_prepare_ns", d.write_batch_prepare_ns},
                      {"write_batch_transfer_ns", d.write_batch_transfer_ns},
                      {"write_batch_commit_ns", d.write_batch_commit_ns}}},
                    {"tiers", std::move(tiers)},
                    {"transfer", std::move(transfer)}};
}

/// A first read into a buffer of this size asks nobody for the size: most
/// values served over HTTP are small, and the client's route cache finds a
/// remote owner without a master query.
constexpr std::size_t kv_first_read = 64 << 10;

/// One read of `key` into a new response body of `cap` bytes: the response
/// (the value, or an error response), or nullopt when the value is larger
/// than `cap`.
task<std::optional<response>> read_value(client& c, const std::string& key, std::size_t cap, bool local) {
  response r;
  r.content_type = "application/octet-stream";
  r.blob.reset(new (std::nothrow) std::byte[cap]);
  if (!r.blob) co_return error_response(errc::no_space, "cannot allocate the response buffer");
  auto n = co_await c.get(key, std::span<std::byte>(r.blob.get(), cap));
  if (!n) {
    if (mc::is(n.error(), errc::buffer_overflow)) co_return std::nullopt;
    co_return error_response(to_errc(n.error()), "key " + key);
  }
  if (*n > cap) co_return error_response(errc::rpc_fail, "key " + key + ": a peer reported a size beyond the buffer");
  r.blob_capacity = cap;
  r.blob_size = *n;
  r.headers.emplace_back("X-Mc-Local", local ? "true" : "false");
  co_return std::move(r);
}

task<response> kv_get(client& c, std::string key, std::size_t max_value) {
  const bool local = c.backend().exists(key);  // for X-Mc-Local (a hint: the tiers may change)
  if (auto r = co_await read_value(c, key, std::max<std::size_t>(1, std::min(kv_first_read, max_value)), local))
    co_return std::move(*r);
  // Larger: the size first, then the read; a value replaced by a larger one
  // in between is retried once. A value held here gives its size without
  // the master (which may be unreachable: local hits keep being served).
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::uint64_t size = 0;
    bool here = false;
    if (auto held = c.data().size_of(key); held) {
      size = *held;
      here = true;
    } else {
      auto info = co_await c.query(key);
      if (!info) co_return error_response(to_errc(info.error()), "key " + key);
      size = info->size;
      here = info->local;
    }
    if (size > max_value)
      co_return error_response(errc::too_large,
                               "value of " + std::to_string(size) + " bytes exceeds http_max_value_bytes");
    if (auto r = co_await read_value(c, key, size ? size : 1, here)) co_return std::move(*r);
  }
  co_return error_response(errc::buffer_overflow, "key " + key + ": value changed size while reading");
}

}  // namespace

void add_client_endpoints(server& s, client_slot& slot, node_status& status, std::size_t max_value_bytes) {
  auto* srv = &s;
  auto* sl = &slot;
  auto* st = &status;

  s.route("/health", [sl, st](request& req) -> task<response> {
    if (req.verb != method::get) co_return method_not_allowed("GET");
    auto state = st->state.load(std::memory_order_relaxed);
    client* c = sl->client.load(std::memory_order_acquire);
    if (state == node_state::draining) co_return json_response(503, {{"status", "draining"}});
    if (state == node_state::starting || !c) co_return json_response(503, {{"status", "starting"}});
    if (!c->stats().registered) co_return json_response(503, {{"status", "not_registered"}});
    co_return json_response(200, {{"status", "serving"}});
  });

  s.route("/metrics", [srv, sl](request& req) -> task<response> {
    if (req.verb != method::get) co_return method_not_allowed("GET");
    client* c = sl->client.load(std::memory_order_acquire);
    if (!c) {
      exposition e;
      append_common_metrics(e, *srv);
      co_return response::make(200, e.take(), std::string(prometheus_content_type));
    }
    co_return metrics(*srv, *c);
  });

  s.route("/stats", [sl](request& req) -> task<response> {
    if (req.verb != method::get) co_return method_not_allowed("GET");
    client* c = sl->client.load(std::memory_order_acquire);
    if (!c) co_return unavailable("starting");
    co_return json_response(200, stats_json(*c));
  });

  s.route(
      "/kv/",
      [sl, max_value_bytes](request& req) -> task<response> {
        client* c = sl->client.load(std::memory_order_acquire);
        if (!c) co_return unavailable("starting");
        std::string key = req.path.substr(4);
        if (key.empty()) co_return error_response(errc::invalid_key, "empty key");
        switch (req.verb) {
          case method::get:
            co_return co_await kv_get(*c, std::move(key), max_value_bytes);
          case method::put: {
            if (req.body.empty()) co_return error_response(errc::invalid_params, "empty value");
            auto bytes = std::as_bytes(std::span<const char>(req.body.data(), req.body.size()));
            auto r = co_await c->put(key, bytes);
            if (!r) co_return error_response(to_errc(r.error()), "key " + key);
            co_return json_response(200, {{"key", json_string(key)}, {"size", req.body.size()}});
          }
          case method::del: {
            auto r = co_await c->remove(key);
            if (!r) co_return error_response(to_errc(r.error()), "key " + key);
            co_return json_response(200, {{"key", json_string(key)}, {"removed", true}});
          }
          default:
            co_return method_not_allowed("GET, PUT, DELETE");
        }
      },
      max_value_bytes);
}

}  // namespace mc::http
