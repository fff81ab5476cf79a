#include "mc/master/master_server.hpp"
#include "mc/runtime/blocking.hpp"

#include "mc/master/ha.hpp"
#include "mc/master/master_client.hpp"  // max_drops_per_heartbeat

#include "mc/rpc/protocol.hpp"

#include "mc/master/publish_call.hpp"
#include "mc/rpc/auth.hpp"
#include "mc/transfer/engine.hpp"

#include "client_info_wire.hpp"
#include "ha_members.hpp"
#include "master.capnp.h"
#include "mc/rpc/capnp.hpp"
#include "mc/rpc/server.hpp"
#include "mc/runtime/endpoint.hpp"
#include "mc/runtime/runtime.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <cstdio>
#include <future>
#include <mutex>
#include <set>

namespace mc::master {
namespace {

using detail::str;
using detail::text;

/// Keys one removeMatching page carries at most.
constexpr std::size_t max_remove_page = 4096;

void set_status(Status::Builder b, const result<void>& r) {
  if (r) {
    b.setCode(0);
    return;
  }
  b.setCode(r.error().value());
  b.setMessage(r.error().message());
}

void set_replica(Replica::Builder b, const replica& r) {
  b.setClientId(text(r.client_id));
  b.setRpcEndpoint(text(r.rpc_endpoint));
  b.setTransferEndpoint(text(r.transfer_endpoint));
}

using detail::read_info;
using detail::set_info;

kj::Promise<void> not_leader() {
  auto name = mc::error_name(errc::unavailable_in_current_status);
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                       kj::str("mc:", kj::StringPtr(name.data(), name.size()), ": this master is not the leader"));
}

#define MC_MASTER_GATE() \
  if (!gate_.serving()) return not_leader()

/// The metadata calls are short and synchronous: answered inline on the
/// serving thread, no coroutine needed.
class master_impl final : public Master::Server {
 public:
  master_impl(metadata& md, ha_gate& gate, const std::atomic<std::uint16_t>& publish_port)
      : md_(md), gate_(gate), publish_port_(&publish_port) {}

  kj::Promise<void> registerClient(RegisterClientContext ctx) override {
    MC_MASTER_GATE();
    auto info = read_info(ctx.getParams().getInfo());
    auto r = md_.register_client(info);
    // A client that keeps its own etcd record needs none from the leader.
    if (r && gate_.on_register) gate_.on_register(info.client_id, info.own_membership);
    set_status(ctx.getResults().initStatus(), r);
    ctx.getResults().setTerm(gate_.term());
    ctx.getResults().setPublishPort(publish_port_->load());
    return kj::READY_NOW;
  }
  kj::Promise<void> heartbeat(HeartbeatContext ctx) override {
    MC_MASTER_GATE();
    auto p = ctx.getParams();
    std::string id = str(p.getClientId());
    auto res = ctx.getResults();
    auto hb = md_.heartbeat(id, p.getUsed(), p.getCapacity());
    set_status(res.initStatus(), hb);
    res.setTerm(gate_.term());
    if (!hb) return kj::READY_NOW;
    auto notices = md_.take_notices(id, max_drops_per_heartbeat, max_repairs_per_heartbeat,
                                    notice_ack{p.getAckEpoch(), p.getAckId()});
    res.setResync(notices.resync);
    res.setNoticeEpoch(notices.notice_epoch);
    res.setNoticeId(notices.notice_id);
    auto drops = res.initDrops(static_cast<unsigned>(notices.drops.size()));
    for (unsigned i = 0; i < notices.drops.size(); ++i) {
      drops[i].setKey(text(notices.drops[i].key));
      drops[i].setVersion(notices.drops[i].version);
    }
    auto repairs = res.initRepairs(static_cast<unsigned>(notices.repairs.size()));
    for (unsigned i = 0; i < notices.repairs.size(); ++i) {
      auto& t = notices.repairs[i];
      repairs[i].setKey(text(t.key));
      repairs[i].setVersion(t.version);
      repairs[i].setReplication(t.replication);
      set_replica(repairs[i].initTarget(), t.target);
    }
    return kj::READY_NOW;
  }
  kj::Promise<void> unregisterClient(UnregisterClientContext ctx) override {
    MC_MASTER_GATE();
    std::string id = str(ctx.getParams().getClientId());
    auto r = md_.unregister_client(id);
    if (r && gate_.on_unregister) gate_.on_unregister(id);
    set_status(ctx.getResults().initStatus(), r);
    return kj::READY_NOW;
  }
  kj::Promise<void> addReplicas(AddReplicasContext ctx) override {
    MC_MASTER_GATE();
    auto p = ctx.getParams();
    std::string id = str(p.getClientId());
    auto items = p.getItems();
    auto kind = p.getRepublish() ? publish_kind::republish : publish_kind::put;
    auto out = ctx.getResults().initResults(items.size());
    for (unsigned i = 0; i < items.size(); ++i)
      set_status(out[i], md_.add_replica(str(items[i].getKey()), id, items[i].getSize(), items[i].getVersion(), kind,
                                         p.getEpoch(), items[i].getReplication()));
    return kj::READY_NOW;
  }
  kj::Promise<void> removeReplicas(RemoveReplicasContext ctx) override {
    MC_MASTER_GATE();
    auto p = ctx.getParams();
    std::string id = str(p.getClientId());
    auto items = p.getItems();
    auto out = ctx.getResults().initResults(items.size());
    for (unsigned i = 0; i < items.size(); ++i)
      set_status(out[i], md_.remove_replica(str(items[i].getKey()), id, items[i].getVersion()));
    return kj::READY_NOW;
  }
  kj::Promise<void> finishRepublish(FinishRepublishContext ctx) override {
    MC_MASTER_GATE();
    auto p = ctx.getParams();
    std::string id = str(p.getClientId());
    auto r = md_.finish_republish(id, p.getEpoch());
    if (r && gate_.on_republished) gate_.on_republished(id);
    auto res = ctx.getResults();
    if (!r) {
      set_status(res.initStatus(), r.error());
      return kj::READY_NOW;
    }
    set_status(res.initStatus(), result<void>{});
    res.setRemoved(*r);
    return kj::READY_NOW;
  }
  kj::Promise<void> getReplicaList(GetReplicaListContext ctx) override {
    MC_MASTER_GATE();
    auto keys = ctx.getParams().getKeys();
    const std::size_t n = keys.size();
    // The keys as views into the request and the answers, kept per RPC
    // thread and reused (no allocation per key once warm); a batch larger
    // than any usual one gets its own, released after the call.
    constexpr std::size_t kept_max = 65536;
    thread_local std::vector<std::string_view> kept_views;
    thread_local std::vector<metadata::lookup_answer> kept_answers;
    std::vector<std::string_view> own_views;
    std::vector<metadata::lookup_answer> own_answers;
    auto& views = n <= kept_max ? kept_views : own_views;
    auto& answers = n <= kept_max ? kept_answers : own_answers;
    views.clear();
    for (auto k : keys) views.emplace_back(k.begin(), k.size());
    if (answers.size() < n) answers.resize(n);
    md_.lookup_batch(views, answers);
    const bool rebuilding = gate_.rebuilding.load();
    // The reply sized to fit in one segment (see master_client's request).
    auto text_words = [](std::size_t bytes) -> std::uint64_t { return (bytes + 8) / 8; };
    std::uint64_t words = 8 + 5 * std::uint64_t(n);  // list element + status per key
    for (std::size_t i = 0; i < n; ++i) {
      if (answers[i].error) {
        words += 16;  // the error's message
        continue;
      }
      words += 1;
      for (const auto& r : answers[i].info.replicas)
        words += 3 + text_words(r.client_id.size()) + text_words(r.rpc_endpoint.size()) +
                 text_words(r.transfer_endpoint.size());
    }
    auto out = ctx.initResults(capnp::MessageSize{words, 0}).initResults(static_cast<unsigned>(n));
    for (unsigned i = 0; i < n; ++i) {
      const auto& a = answers[i];
      if (a.error) {
        if (rebuilding && mc::is(a.error, errc::object_not_found)) {
          set_status(out[i].initStatus(), fail(errc::unavailable_in_current_status));  // not known yet
          continue;
        }
        set_status(out[i].initStatus(), a.error);
        continue;
      }
      set_status(out[i].initStatus(), result<void>{});
      out[i].setSize(a.info.size);
      auto reps = out[i].initReplicas(static_cast<unsigned>(a.info.replicas.size()));
      for (unsigned j = 0; j < a.info.replicas.size(); ++j) set_replica(reps[j], a.info.replicas[j]);
    }
    return kj::READY_NOW;
  }
  kj::Promise<void> writeRoute(WriteRouteContext ctx) override {
    MC_MASTER_GATE();
    auto p = ctx.getParams();
    auto r = md_.write_route(p.getSize(), str(p.getExclude()));
    auto res = ctx.getResults();
    if (!r) {
      // A new leader that has not heard from its clients yet knows no space:
      // retriable, not "no space anywhere".
      if (mc::is(r.error(), errc::no_available_handle) && gate_.rebuilding.load()) {
        set_status(res.initStatus(), fail(errc::unavailable_in_current_status));
        return kj::READY_NOW;
      }
      set_status(res.initStatus(), r.error());
      return kj::READY_NOW;
    }
    set_status(res.initStatus(), result<void>{});
    set_replica(res.initReplica(), *r);
    return kj::READY_NOW;
  }
  kj::Promise<void> writeRoutes(WriteRoutesContext ctx) override {
    MC_MASTER_GATE();
    auto p = ctx.getParams();
    auto res = ctx.getResults();
    auto ex = p.getExclude();
    if (p.getCount() == 0 || p.getCount() > replication::max_copies || ex.size() > max_route_excludes) {
      set_status(res.initStatus(), fail(errc::invalid_params));
      return kj::READY_NOW;
    }
    std::vector<std::string> exclude;
    for (auto e : ex) exclude.push_back(str(e));
    auto r = md_.write_routes(p.getSize(), p.getCount(), exclude);
    if (!r) {
      const bool rebuilding = mc::is(r.error(), errc::no_available_handle) && gate_.rebuilding.load();
      set_status(res.initStatus(), rebuilding ? fail(errc::unavailable_in_current_status) : r.error());
      return kj::READY_NOW;
    }
    set_status(res.initStatus(), result<void>{});
    auto reps = res.initReplicas(static_cast<unsigned>(r->size()));
    for (unsigned j = 0; j < r->size(); ++j) set_replica(reps[j], (*r)[j]);
    return kj::READY_NOW;
  }
  kj::Promise<void> removeKey(RemoveKeyContext ctx) override {
    MC_MASTER_GATE();
    auto r = md_.remove_key(str(ctx.getParams().getKey()));
    auto res = ctx.getResults();
    if (!r) {
      set_status(res.initStatus(), r.error());
      return kj::READY_NOW;
    }
    set_status(res.initStatus(), result<void>{});
    auto reps = res.initReplicas(static_cast<unsigned>(r->size()));
    for (unsigned j = 0; j < r->size(); ++j) set_replica(reps[j], (*r)[j]);
    return kj::READY_NOW;
  }
  kj::Promise<void> removeMatching(RemoveMatchingContext ctx) override {
    MC_MASTER_GATE();
    auto p = ctx.getParams();
    // A page is bounded whatever the caller asks (each entry carries holders).
    std::size_t limit = std::min<std::size_t>(p.getLimit(), max_remove_page);
    auto res = ctx.getResults();
    if (limit == 0) {
      set_status(res.initStatus(), fail(errc::invalid_params));
      return kj::READY_NOW;
    }
    auto r = md_.remove_matching(str(p.getPattern()), p.getAll(), limit, p.getFromShard());
    if (!r) {
      set_status(res.initStatus(), r.error());
      return kj::READY_NOW;
    }
    set_status(res.initStatus(), result<void>{});
    auto& keys = r->removed;
    auto out = res.initRemoved(static_cast<unsigned>(keys.size()));
    for (unsigned i = 0; i < keys.size(); ++i) {
      out[i].setKey(text(keys[i].key));
      auto reps = out[i].initReplicas(static_cast<unsigned>(keys[i].holders.size()));
      for (unsigned j = 0; j < keys[i].holders.size(); ++j) set_replica(reps[j], keys[i].holders[j]);
    }
    res.setMore(r->next_shard < md_.shard_count());
    res.setNextShard(static_cast<std::uint32_t>(r->next_shard));
    return kj::READY_NOW;
  }
  kj::Promise<void> listClients(ListClientsContext ctx) override {
    MC_MASTER_GATE();
    auto cl = md_.clients();
    auto out = ctx.getResults().initClients(static_cast<unsigned>(cl.size()));
    for (unsigned i = 0; i < cl.size(); ++i) {
      set_info(out[i].initInfo(), cl[i].info);
      out[i].setHealth(std::string(health_name(cl[i].state)));
      out[i].setSinceHeartbeatMs(static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(cl[i].since_heartbeat).count()));
      out[i].setKeys(cl[i].keys);
    }
    return kj::READY_NOW;
  }
  kj::Promise<void> getClient(GetClientContext ctx) override {
    MC_MASTER_GATE();
    auto r = md_.find_client(str(ctx.getParams().getClientId()));
    auto res = ctx.getResults();
    set_status(res.initStatus(), r ? result<void>{} : result<void>{r.error()});
    if (r) set_info(res.initInfo(), *r);
    return kj::READY_NOW;
  }

 private:
  metadata& md_;
  ha_gate& gate_;
  const std::atomic<std::uint16_t>* publish_port_;  ///< 0 = no publish calls
};

metadata_options to_metadata_options(const master_options& o) {
  metadata_options m;
  m.route_ttl = o.client_ttl;
  m.drop_ttl = o.client_drop_ttl;
  m.max_key_bytes = o.max_key_bytes;
  return m;
}

}  // namespace

struct master_server::impl {
  impl(mc::runtime::runtime& r, const master_options& o)
      : rt(r),
        opts(o),
        md(to_metadata_options(o)),
        server(r, mc::rpc::server_options{.host = o.rpc_address, .port = o.rpc_port, .threads = o.rpc_thread_num}) {}

  mc::runtime::runtime& rt;
  master_options opts;
  metadata md;
  mc::rpc::server server;
  std::string message;
  std::shared_ptr<boost::asio::steady_timer> sweeper;
  bool started = false;
  ha_gate gate;
  std::shared_ptr<struct ha_members> members;  ///< HA only
  std::unique_ptr<leader_elector> elector;     ///< HA only
  /// Publish calls (master_options::publish_calls): their engine and port.
  std::unique_ptr<mc::transfer::engine> calls;
  std::atomic<std::uint16_t> publish_port{0};
};

master_server::master_server(mc::runtime::runtime& rt, const master_options& opts)
    : impl_(std::make_unique<impl>(rt, opts)) {
  impl_->server.add_service("master", mc::rpc::service_factory([md = &impl_->md, g = &impl_->gate,
                                                                port = &impl_->publish_port](mc::executor) {
                              return capnp::Capability::Client(kj::heap<master_impl>(*md, *g, *port));
                            }));
}

bool master_server::ha_enabled() const noexcept { return impl_->opts.ha_backend == "etcd"; }
std::uint64_t master_server::elections() const noexcept { return impl_->elector ? impl_->elector->elections() : 0; }
std::uint64_t master_server::leader_watch_failures() const noexcept {
  return impl_->elector ? impl_->elector->watch_failures() : 0;
}
bool master_server::leading() const noexcept { return impl_->gate.serving(); }
bool master_server::rebuilding() const noexcept { return impl_->gate.rebuilding.load(); }
std::uint64_t master_server::term() const noexcept { return impl_->elector ? impl_->elector->term() : 0; }
std::string master_server::leader() const { return impl_->elector ? impl_->elector->leader() : std::string{}; }

master_server::~master_server() { stop(); }

namespace {
/// One publish call: the same checks and outcomes as addReplicas.
mc::task<result<std::vector<std::byte>>> serve_publish(metadata* md, const ha_gate* gate,
                                                       mc::transfer::call_request q) {
  if (!gate->serving()) co_return fail(errc::unavailable_in_current_status);
  auto c = decode_publish_call(q.payload);
  if (!c) co_return c.error();
  std::vector<result<void>> out;
  out.reserve(c->items.size());
  for (const auto& it : c->items)
    out.push_back(md->add_replica(it.key, c->client_id, it.size, it.version, c->kind, c->epoch, it.replication));
  co_return encode_publish_answer(out);
}

mc::task<void> sweep_loop(std::shared_ptr<boost::asio::steady_timer> t, metadata* md, const ha_gate* gate,
                          mc::duration every) {
  // Keys a reset() set aside are freed a chunk per short tick (bounded time
  // on this runtime thread); the sweep itself runs every `every`.
  constexpr std::size_t reclaim_chunk = 65536;
  std::size_t retired = 0;
  auto next_sweep = std::chrono::steady_clock::now() + every;
  for (;;) {
    t->expires_after(retired ? std::chrono::milliseconds(1) : every);
    auto [ec] = co_await t->async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    if (ec) co_return;
    retired = md->table().retired_keys ? md->reclaim(reclaim_chunk) : 0;
    if (std::chrono::steady_clock::now() < next_sweep) continue;
    next_sweep = std::chrono::steady_clock::now() + every;
    for (auto& id : md->sweep()) {
      std::fprintf(stderr, "mooncake_master: dropped silent client %s\n", id.c_str());
      // HA: its etcd record goes too (only while surely leading: a deposed
      // leader must not delete what the next one recorded).
      if (gate->on_unregister && gate->serving()) gate->on_unregister(id);
    }
    // Repairs only from a leader whose table is complete: while rebuilding,
    // copies not re-published yet would look missing.
    if (gate->serving() && !gate->rebuilding.load()) (void)md->schedule_repairs();
  }
}
}  // namespace

result<void> master_server::start() {
  // The control plane (MC_RPC_PROTOCOL): decided once per process.
  if (auto err = mc::rpc::use_protocol_from_env({}); !err.empty()) {
    impl_->message = err;
    return fail(errc::invalid_params);
  }
  if (auto r = impl_->server.start(); !r) {
    impl_->message = impl_->server.message();
    return r;
  }
  if (auto r = start_publish_calls(); !r) {
    impl_->server.stop();
    return r;
  }
  if (impl_->opts.ha_backend == "etcd") {
    bool tls = false;
    std::string why;
    auto eps = parse_etcd_endpoints(impl_->opts.etcd_endpoints, &why, &tls);
    auto sec = eps ? etcd_security::load(impl_->opts.etcd_security, tls, &why) : result<etcd_security>(eps.error());
    if (!sec) {
      impl_->publish_port.store(0);
      if (impl_->calls) impl_->calls->stop();
      impl_->server.stop();
      impl_->message = why.empty() ? "etcd_endpoints are invalid" : why;
      return fail(errc::invalid_params);
    }
    impl_->started = true;
    start_ha(std::move(*eps), std::move(*sec));
  } else {
    impl_->started = true;
  }
  impl_->sweeper = std::make_shared<boost::asio::steady_timer>(impl_->rt.executor(0));
  auto every = std::max<mc::duration>(std::chrono::milliseconds(20), impl_->opts.client_ttl / 4);
  boost::asio::co_spawn(impl_->rt.executor(0), sweep_loop(impl_->sweeper, &impl_->md, &impl_->gate, every),
                        boost::asio::detached);
  return {};
}

result<void> master_server::start_publish_calls() {
  auto& p = *impl_;
  // Calls carry no credentials: with RPC authentication on, publishes stay
  // on the (authenticated) RPC.
  if (!p.opts.publish_calls || mc::rpc::auth_enabled()) return {};
  mc::transfer::engine_options eo;
  eo.bind_host = p.opts.rpc_address;
  eo.port = p.opts.publish_call_port;
  eo.enable_same_host = false;
  eo.enable_in_process = false;
  try {
    p.calls = std::make_unique<mc::transfer::engine>(p.rt, eo);
  } catch (const std::exception& e) {
    p.message = std::string("publish calls: ") + e.what();
    return fail(errc::invalid_params);
  }
  p.calls->set_call_handler(
      [md = &p.md, g = &p.gate](mc::transfer::call_request q) { return serve_publish(md, g, std::move(q)); });
  if (auto r = p.calls->start(); !r) {
    p.calls.reset();
    // A port asked for must be had (like the RPC port); any free port that
    // cannot be bound only costs the speed-up.
    if (p.opts.publish_call_port != 0) {
      p.message = "publish calls: cannot listen on port " + std::to_string(p.opts.publish_call_port);
      return r;
    }
    std::fprintf(stderr, "mooncake_master: publish calls off (no port: %s); publishes use the RPC\n",
                 r.error().message().c_str());
    return {};
  }
  const auto ep = mc::endpoint::parse(p.calls->endpoint());
  p.publish_port.store(ep ? ep->port() : 0);
  return {};
}

std::uint16_t master_server::publish_call_port() const noexcept { return impl_->publish_port.load(); }

void master_server::start_ha(std::vector<std::string> endpoints, etcd_security security) {
  auto& p = *impl_;
  ha_options ho;
  ho.security = std::move(security);
  ho.etcd_endpoints = std::move(endpoints);
  ho.cluster_id = p.opts.cluster_id;
  ho.advertise = ha_advertise(p.opts);
  ho.lease_ttl = p.opts.ha_lease_ttl;
  ho.etcd_timeout = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(1000), p.opts.ha_lease_ttl / 2);
  auto ttl = std::max<std::int64_t>(std::chrono::ceil<std::chrono::seconds>(p.opts.client_ttl).count(),
                                    3 * std::chrono::ceil<std::chrono::seconds>(p.opts.ha_lease_ttl).count());
  p.members = std::make_shared<ha_members>(p.rt, etcd_client(ho.etcd_endpoints, ho.etcd_timeout, ho.security),
                                           ha_clients_prefix(p.opts.cluster_id), ha_members_prefix(p.opts.cluster_id),
                                           ttl, p.md, p.gate);
  auto h = p.members;
  auto poll = std::chrono::duration_cast<mc::duration>(ho.poll);
  p.gate.on_register = [h](const std::string& id, bool own) {
    auto term = h->term.load();
    if (term == 0) return;
    if (own)  // one written when it could not write its own (etcd was slow for it) goes
      boost::asio::co_spawn(h->rt.executor(0), forget_leader_record(h, id), boost::asio::detached);
    else {
      std::fprintf(stderr, "mooncake_master: term %llu: recording client %s in etcd for it\n",
                   static_cast<unsigned long long>(term), id.c_str());
      boost::asio::co_spawn(h->rt.executor(0), record_member(h, id, term), boost::asio::detached);
    }
  };
  p.gate.on_unregister = [h](const std::string& id) {
    boost::asio::co_spawn(h->rt.executor(0), forget_member(h, id), boost::asio::detached);
  };
  p.gate.on_republished = [h](const std::string& id) {
    std::lock_guard lk(h->m);
    if (h->republished.size() < 1'000'000) h->republished.insert(id);
  };
  p.elector = std::make_unique<leader_elector>(
      p.rt, ho,
      [h, poll](std::uint64_t term) {
        {
          std::lock_guard lk(h->m);
          h->republished.clear();
        }
        h->lease.store(0);
        h->gate.rebuilding.store(true);
        h->term.store(term);
        boost::asio::co_spawn(h->rt.executor(0), lead_term(h, term, poll), boost::asio::detached);
      },
      [h] {
        // Not the leader any more: forget every client and key (they
        // re-register with the next leader, which may be us again). O(shards
        // + clients) here; the sweep timer frees the old keys in chunks.
        h->term.store(0);
        h->lease.store(0);
        h->gate.rebuilding.store(false);
        h->md.reset();
      });
  p.gate.elector = p.elector.get();
  p.elector->start();
}

void master_server::stop() {
  if (!impl_->started) return;
  impl_->started = false;
  if (impl_->elector) {
    impl_->members->stopping.store(true);
    impl_->elector->stop();  // resigns: a standby takes over now
  }
  impl_->publish_port.store(0);
  if (impl_->calls) impl_->calls->stop();
  impl_->server.stop();
  std::promise<void> done;
  boost::asio::post(impl_->rt.executor(0), [&] {
    impl_->sweeper->cancel();
    done.set_value();
  });
  mc::runtime::assert_may_block("mc::master::master_server::stop");
  done.get_future().wait();
}

std::uint16_t master_server::port() const { return impl_->server.port(); }
const std::string& master_server::message() const { return impl_->message; }
metadata& master_server::state() noexcept { return impl_->md; }

}  // namespace mc::master
