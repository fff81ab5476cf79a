#include "mc/master/master_server.hpp"
#include "mc/runtime/blocking.hpp"

#include "mc/master/master_client.hpp"  // max_drops_per_heartbeat

#include "mc/rpc/protocol.hpp"

#include "client_info_wire.hpp"
#include "master.capnp.h"
#include "mc/rpc/capnp.hpp"
#include "mc/rpc/server.hpp"
#include "mc/runtime/runtime.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>

#include <cstdio>
#include <future>

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

/// The metadata calls are short and synchronous: answered inline on the
/// serving thread, no coroutine needed.
class master_impl final : public Master::Server {
 public:
  explicit master_impl(metadata& md) : md_(md) {}

  kj::Promise<void> registerClient(RegisterClientContext ctx) override {
    set_status(ctx.getResults().initStatus(), md_.register_client(read_info(ctx.getParams().getInfo())));
    return kj::READY_NOW;
  }
  kj::Promise<void> heartbeat(HeartbeatContext ctx) override {
    auto p = ctx.getParams();
    std::string id = str(p.getClientId());
    auto res = ctx.getResults();
    auto hb = md_.heartbeat(id, p.getUsed(), p.getCapacity());
    set_status(res.initStatus(), hb);
    if (!hb) return kj::READY_NOW;
    auto notices = md_.take_notices(id, max_drops_per_heartbeat);
    res.setResync(notices.resync);
    auto drops = res.initDrops(static_cast<unsigned>(notices.drops.size()));
    for (unsigned i = 0; i < notices.drops.size(); ++i) {
      drops[i].setKey(text(notices.drops[i].key));
      drops[i].setVersion(notices.drops[i].version);
    }
    return kj::READY_NOW;
  }
  kj::Promise<void> unregisterClient(UnregisterClientContext ctx) override {
    set_status(ctx.getResults().initStatus(), md_.unregister_client(str(ctx.getParams().getClientId())));
    return kj::READY_NOW;
  }
  kj::Promise<void> addReplicas(AddReplicasContext ctx) override {
    auto p = ctx.getParams();
    std::string id = str(p.getClientId());
    auto items = p.getItems();
    auto kind = p.getRepublish() ? publish_kind::republish : publish_kind::put;
    auto out = ctx.getResults().initResults(items.size());
    for (unsigned i = 0; i < items.size(); ++i)
      set_status(out[i], md_.add_replica(str(items[i].getKey()), id, items[i].getSize(), items[i].getVersion(), kind,
                                         p.getEpoch()));
    return kj::READY_NOW;
  }
  kj::Promise<void> removeReplicas(RemoveReplicasContext ctx) override {
    auto p = ctx.getParams();
    std::string id = str(p.getClientId());
    auto items = p.getItems();
    auto out = ctx.getResults().initResults(items.size());
    for (unsigned i = 0; i < items.size(); ++i)
      set_status(out[i], md_.remove_replica(str(items[i].getKey()), id, items[i].getVersion()));
    return kj::READY_NOW;
  }
  kj::Promise<void> finishRepublish(FinishRepublishContext ctx) override {
    auto p = ctx.getParams();
    auto r = md_.finish_republish(str(p.getClientId()), p.getEpoch());
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
    auto keys = ctx.getParams().getKeys();
    auto out = ctx.getResults().initResults(keys.size());
    for (unsigned i = 0; i < keys.size(); ++i) {
      auto r = md_.lookup(str(keys[i]));
      if (!r) {
        set_status(out[i].initStatus(), r.error());
        continue;
      }
      set_status(out[i].initStatus(), result<void>{});
      out[i].setSize(r->size);
      auto reps = out[i].initReplicas(static_cast<unsigned>(r->replicas.size()));
      for (unsigned j = 0; j < r->replicas.size(); ++j) set_replica(reps[j], r->replicas[j]);
    }
    return kj::READY_NOW;
  }
  kj::Promise<void> writeRoute(WriteRouteContext ctx) override {
    auto p = ctx.getParams();
    auto r = md_.write_route(p.getSize(), str(p.getExclude()));
    auto res = ctx.getResults();
    if (!r) {
      set_status(res.initStatus(), r.error());
      return kj::READY_NOW;
    }
    set_status(res.initStatus(), result<void>{});
    set_replica(res.initReplica(), *r);
    return kj::READY_NOW;
  }
  kj::Promise<void> removeKey(RemoveKeyContext ctx) override {
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
    auto r = md_.find_client(str(ctx.getParams().getClientId()));
    auto res = ctx.getResults();
    set_status(res.initStatus(), r ? result<void>{} : result<void>{r.error()});
    if (r) set_info(res.initInfo(), *r);
    return kj::READY_NOW;
  }

 private:
  metadata& md_;
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
};

master_server::master_server(mc::runtime::runtime& rt, const master_options& opts)
    : impl_(std::make_unique<impl>(rt, opts)) {
  impl_->server.add_service("master", mc::rpc::service_factory([md = &impl_->md](mc::executor) {
                              return capnp::Capability::Client(kj::heap<master_impl>(*md));
                            }));
}

master_server::~master_server() { stop(); }

namespace {
mc::task<void> sweep_loop(std::shared_ptr<boost::asio::steady_timer> t, metadata* md, mc::duration every) {
  for (;;) {
    t->expires_after(every);
    auto [ec] = co_await t->async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    if (ec) co_return;
    for (auto& id : md->sweep()) std::fprintf(stderr, "mooncake_master: dropped silent client %s\n", id.c_str());
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
  impl_->started = true;
  impl_->sweeper = std::make_shared<boost::asio::steady_timer>(impl_->rt.executor(0));
  auto every = std::max<mc::duration>(std::chrono::milliseconds(20), impl_->opts.client_ttl / 4);
  boost::asio::co_spawn(impl_->rt.executor(0), sweep_loop(impl_->sweeper, &impl_->md, every), boost::asio::detached);
  return {};
}

void master_server::stop() {
  if (!impl_->started) return;
  impl_->started = false;
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
