// mc::store::client: lifecycle, master registration, heartbeats.
#include "client_impl.hpp"
#include "mc/runtime/blocking.hpp"

#include "mc/rpc/client.hpp"
#include "mc/rpc/protocol.hpp"
#include "mc/runtime/endpoint.hpp"
#include "mc/store/client_service.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>

#include <cstdio>
#include <future>

namespace mc::store {
client::impl::impl(mc::runtime::runtime& r, client_options o)
    : rt(r),
      opts(std::move(o)),
      master(opts.master_server_address, opts.rpc_timeout, opts.cluster_id,
             std::chrono::duration_cast<std::chrono::seconds>(opts.ha_membership_ttl), opts.etcd_security),
      peers(opts.rpc_timeout) {}

client::client(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
client::~client() { stop(); }

result<std::unique_ptr<client>> client::start(mc::runtime::runtime& rt, client_options opts, std::string* why) {
  auto say = [&](std::string m) {
    if (why) *why = std::move(m);
  };
  if (rt.size() < opts.rpc_thread_num) {
    say("the runtime has fewer threads than rpc_thread_num");
    return fail(errc::invalid_params);
  }
  // The control plane (MC_RPC_PROTOCOL): decided once per process.
  if (auto err = mc::rpc::use_protocol_from_env(opts.device_list); !err.empty()) {
    say(err);
    return fail(errc::invalid_params);
  }
  auto p = std::make_unique<impl>(rt, opts);
  auto backend = tiered::tiered_backend::create(rt, p->opts.tiers);
  if (!backend) {
    say("tiered backend: " + backend.error().message);
    return make_error_code(backend.error().code);
  }
  p->backend = std::move(*backend);

  mc::transfer::engine_options eo;
  eo.bind_host = p->opts.host;
  eo.port = p->opts.port;
  eo.advertise_host = p->opts.local_hostname;
  eo.force = forced_transport(p->opts);
  eo.default_timeout = p->opts.rpc_timeout;
  eo.spread_bytes = static_cast<std::size_t>(p->opts.transfer_spread_bytes);
  eo.protocol = p->opts.protocol;
  eo.device_names = p->opts.device_list;
  try {
    p->engine = std::make_unique<mc::transfer::engine>(rt, eo);
  } catch (const std::exception& e) {
    say(std::string("transfer engine: ") + e.what());
    return fail(errc::invalid_params);
  }
  if (auto r = p->engine->start(); !r) {
    say("transfer engine: cannot listen on " + p->opts.host + ":" + std::to_string(p->opts.port) + ": " +
        r.error().message());
    return r.error();
  }
  p->transfer_endpoint = p->engine->endpoint();
  // The RPC endpoint advertises the transfer endpoint's host (with the RPC server's port, below).
  auto advertised = mc::endpoint::parse(p->transfer_endpoint);
  if (!advertised) {
    say("transfer engine: unusable endpoint " + p->transfer_endpoint);
    p->engine->stop();
    return advertised.error();
  }
  for (auto span : p->backend->dram_regions())
    if (auto reg = p->engine->register_memory(span.data(), span.size(), mc::transfer::region_access::local_only))
      p->arena_regions.push_back(std::move(*reg));

  p->dm = std::make_unique<data_manager>(*p->backend, *p->engine, p->opts.lock_shard_count);
  p->inflight = std::make_unique<async_semaphore>(p->opts.max_inflight_bytes);
  p->inflight_keys = std::make_unique<async_semaphore>(p->wave_keys());
  if (p->rdma() && p->opts.rdma_bounce_bytes > 0) {
    auto arena = detail::bounce_arena::create(*p->engine, static_cast<std::size_t>(p->opts.rdma_bounce_bytes), 1 << 20);
    if (!arena) {
      say("rdma bounce arena: " + arena.error().message());
      p->engine->stop();
      return arena.error();
    }
    p->bounce = std::move(*arena);
  }
  auto* raw = p.get();
  // Before the observer can fire (a remote write may evict as soon as the RPC server runs).
  p->notice_timer = std::make_shared<boost::asio::steady_timer>(rt.executor(0));
  p->dm->set_commit_hook([raw](const std::string& key, std::uint64_t size, std::uint64_t version,
                               tiered::value_tag tag) { return raw->publish(key, size, version, tag); });
  p->dm->set_commit_batch_hook([raw](std::vector<data_manager::committed_value> values) {
    std::vector<mc::master::publish_item> items;
    items.reserve(values.size());
    for (auto& v : values) items.push_back({std::move(v.key), v.size, v.version, v.tag});
    return raw->publish_many(std::move(items));
  });
  p->backend->set_observer([raw](const std::string& key, std::uint64_t version, tiered::removal_reason why_removed) {
    raw->on_removed(key, version, why_removed);
  });

  mc::rpc::server_options so;
  so.host = p->opts.host;
  so.port = p->opts.client_rpc_port;
  so.threads = p->opts.rpc_thread_num;
  p->server = std::make_unique<mc::rpc::server>(rt, so);
  auto service_opts = service_options_of(p->opts);
  service_opts.master = p->master;  // one master connection (and etcd login) per node
  p->service_counters = add_client_service(*p->server, *p->dm, std::move(service_opts), p->engine.get());
  if (auto r = p->server->start(); !r) {
    say("RPC server: cannot listen on " + p->opts.host + ":" + std::to_string(p->opts.client_rpc_port) + ": " +
        p->server->message());
    p->engine->stop();
    return r.error();
  }
  p->rpc_endpoint = advertised->with_port(p->server->port())->str();  // a started server's port is not 0
  p->id = p->opts.client_id.empty() ? p->rpc_endpoint : p->opts.client_id;
  p->peers.set_requester_id(p->id);  // owners transfer only to our registered transfer endpoint

  auto reg = rt.block_on(p->register_with_master(true));
  if (!reg) {
    say("cannot register with the master at " + p->opts.master_server_address + ": " + reg.error().message() +
        " (will keep retrying in the background)");
    std::fprintf(stderr, "mooncake_client: %s\n", why ? why->c_str() : "master registration failed");
  }
  p->heartbeat_timer = std::make_shared<boost::asio::steady_timer>(rt.executor(0));
  if (auto h = p->background.try_enter())
    boost::asio::co_spawn(
        rt.executor(0),
        [](impl* self, gate_holder h) -> task<void> {
          // stop() cancels it: awaits then return errors, never throw.
          co_await boost::asio::this_coro::throw_if_cancelled(false);
          co_await self->heartbeat_loop();
          h.leave();
        }(raw, std::move(h)),
        boost::asio::bind_cancellation_slot(p->heartbeat_cancel.slot(), boost::asio::detached));
  if (p->master.uses_etcd()) {
    if (auto h = p->background.try_enter())
      boost::asio::co_spawn(
          rt.executor(0),
          [](impl* self, gate_holder h) -> task<void> {
            // A new leader wakes the heartbeat loop, which registers with it
            // (and re-publishes) now rather than at its next period.
            co_await self->master.follow_leader([self] {
              self->leader_moved = true;
              self->heartbeat_timer->cancel();
            });
            h.leave();
          }(raw, std::move(h)),
          boost::asio::bind_cancellation_slot(p->follow_cancel.slot(), boost::asio::detached));
  }
  if (auto h = p->background.try_enter())
    boost::asio::co_spawn(
        rt.executor(0),
        [](impl* self, gate_holder h) -> task<void> {
          co_await self->notice_loop();
          h.leave();
        }(raw, std::move(h)),
        boost::asio::detached);
  return std::unique_ptr<client>(new client(std::move(p)));
}

void client::stop() {
  auto& p = *impl_;
  if (p.stopped) return;
  mc::runtime::assert_may_block("mc::store::client::stop");
  p.stopped = true;
  // Bounded by max(2 s, rpc_timeout) whatever the master and the peers do:
  // the heartbeat loop is cancelled (it may be waiting for a frozen master),
  // unregistering has its own short deadline, fire-and-forget master updates
  // have the RPC deadline, and the RPC server and the engine interrupt their
  // connections instead of waiting for peers.
  p.rt.block_on([](impl* self) -> task<void> {
    self->heartbeat_timer->cancel();
    self->notice_timer->cancel();
    self->heartbeat_cancel.emit(boost::asio::cancellation_type::terminal);  // thread 0: the loop's thread
    self->follow_cancel.emit(boost::asio::cancellation_type::terminal);
    if (self->registered.load())
      (void)co_await mc::with_deadline(self->master.unregister_client(self->id),
                                       std::min<mc::duration>(std::chrono::seconds(2), self->opts.rpc_timeout));
    co_await self->background.close();
  }(&p));
  p.server->stop();
  p.engine->set_call_handler({});  // small-value reads over calls end with the RPC service
  p.rt.block_on(p.dm->close());    // commits + publishes still in flight
  p.engine->stop();
}

task<result<void>> client::impl::register_with_master(bool republish) {
  mc::master::client_info info;
  info.client_id = id;
  info.rpc_endpoint = rpc_endpoint;
  info.transfer_endpoint = transfer_endpoint;
  info.transfer_instance = engine->instance_id();
  if (opts.http_registered_port != 0)
    info.http_endpoint = mc::master::http_endpoint_of(rpc_endpoint, opts.http_host, opts.http_registered_port);
  for (auto& u : backend->usage()) {
    info.capacity += u.capacity;
    info.used += u.used;
  }
  auto r = co_await master.register_client(info);
  if (!r) co_return r;
  if (republish) {
    if (auto a = co_await republish_all(); !a) co_return a;
  }
  registered = true;
  co_return result<void>{};
}

task<void> client::impl::heartbeat_loop() {
  for (;;) {
    if (auto cs = co_await boost::asio::this_coro::cancellation_state;
        cs.cancelled() != boost::asio::cancellation_type::none)
      co_return;  // stop()
    if (!leader_moved) {
      heartbeat_timer->expires_after(opts.heartbeat_interval);
      auto [ec] = co_await heartbeat_timer->async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
      if (stopped || (ec && !leader_moved)) co_return;  // stop() (a new leader cancels the wait too)
    }
    // An exception escaping one round must not end the loop silently (it is
    // spawned detached): the node would keep serving while it drops out of
    // the master's membership for good. Log it and go on next period.
    try {
      co_await heartbeat_once();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mooncake_client %s: heartbeat round failed: %s\n", id.c_str(), e.what());
    } catch (...) {  // e.g. a kj::Exception, which is not a std::exception
      std::fprintf(stderr, "mooncake_client %s: heartbeat round failed: unknown exception\n", id.c_str());
    }
  }
}

task<void> client::impl::heartbeat_once() {
  std::uint64_t used = 0, cap = 0;
  for (auto& u : backend->usage()) {
    cap += u.capacity;
    used += u.used;
  }
  if (leader_moved) {
    // HA: the leader watch (master_client::follow_leader) saw a new leader:
    // register with it (and re-publish) now, not after a heartbeat to the
    // old one fails.
    leader_moved = false;
    registered = false;
  }
  if (registered) {
    // HA: a frozen or partitioned leader is noticed within two periods,
    // not after a whole rpc_timeout (one master: wait it out; a slow
    // master must not cause a full re-publish).
    mc::duration hb_deadline = opts.rpc_timeout;
    if (master.uses_etcd())
      hb_deadline = std::min<mc::duration>(
          hb_deadline, std::max<mc::duration>(std::chrono::seconds(1), 2 * opts.heartbeat_interval));
    auto r = co_await mc::with_deadline(master.heartbeat(id, used, cap, acked_notices), hb_deadline);
    if (r) {
      apply_drops(r->drops);
      if (!r->repairs.empty()) start_repairs(std::move(r->repairs));
      if (r->resync) resync_needed = true;
      // Applied (a resync is remembered in resync_needed until it succeeds):
      // the next heartbeat tells the master, which re-sends them until then.
      if (r->notice_id != 0) acked_notices = {r->notice_epoch, r->notice_id};
      if (!resync_needed) co_return;
      // The notice queue overflowed (here or at the master): replace the
      // master's view of this holder with the full key set.
      if (auto a = co_await republish_all(); a)
        std::fprintf(stderr, "mooncake_client %s: resynced %zu keys with the master\n", id.c_str(), backend->count());
      co_return;
    }
    stats.master_errors.fetch_add(1, std::memory_order_relaxed);
    registered = false;
    std::fprintf(stderr, "mooncake_client %s: heartbeat to the master %s failed (%s)\n", id.c_str(),
                 master.current_master().c_str(), r.error().message().c_str());
    if (!mc::is(r.error(), errc::client_not_found)) co_return;  // unreachable: retry next period
  }
  // Unknown to the master (it restarted, or dropped us): register and re-publish.
  // A failure is retried next period and logged (the first, then every 10th)
  // so that a node stuck outside the master's membership shows in its log.
  if (auto r = co_await register_with_master(true); r) {
    std::fprintf(stderr, "mooncake_client %s: (re)registered with the master, %zu keys published\n", id.c_str(),
                 backend->count());
    failed_registrations = 0;
  } else if (failed_registrations++ % 10 == 0) {
    std::fprintf(stderr, "mooncake_client %s: registering with the master %s failed (%s), attempt %llu\n", id.c_str(),
                 master.current_master().c_str(), r.error().message().c_str(),
                 static_cast<unsigned long long>(failed_registrations));
  }
}

const std::string& client::id() const noexcept { return impl_->id; }
const std::string& client::rpc_endpoint() const noexcept { return impl_->rpc_endpoint; }
const std::string& client::transfer_endpoint() const noexcept { return impl_->transfer_endpoint; }
std::uint16_t client::rpc_port() const noexcept { return impl_->server->port(); }
const client_options& client::options() const noexcept { return impl_->opts; }
tiered::tiered_backend& client::backend() noexcept { return *impl_->backend; }
data_manager& client::data() noexcept { return *impl_->dm; }
mc::transfer::engine& client::engine() noexcept { return *impl_->engine; }

client_stats client::stats() const {
  auto& s = impl_->stats;
  constexpr auto r = std::memory_order_relaxed;
  client_stats out{s.local_hits.load(r),       s.remote_hits.load(r),      s.misses.load(r),
                   s.fallbacks.load(r),        s.route_cache_hits.load(r), s.master_errors.load(r),
                   impl_->registered.load(),   s.notices_sent.load(r),     s.notice_batches.load(r),
                   s.notice_overflows.load(r), s.resyncs.load(r),          s.superseded_drops.load(r),
                   s.stale_publishes.load(r)};
  out.batch_calls = s.batch_calls.load(r);
  out.batch_keys = s.batch_keys.load(r);
  out.batch_rpcs = s.batch_rpcs.load(r);
  out.inline_reads = s.inline_reads.load(r);
  out.read_calls = s.read_calls.load(r);
  out.write_calls = s.write_calls.load(r);
  out.inline_writes = s.inline_writes.load(r);
  out.remote_read_bytes = s.remote_read_bytes.load(r);
  out.publish_batches = s.publish_batches.load(r);
  out.publish_calls = s.publish_calls.load(r);
  out.publishes = s.publishes.load(r);
  out.failed_publishes = s.failed_publishes.load(r);
  out.write_routes = s.write_routes.load(r);
  out.write_route_lease_hits = s.write_route_lease_hits.load(r);
  out.replication_incomplete = s.replication_incomplete.load(r);
  out.repairs_done = s.repairs_done.load(r);
  out.repairs_failed = s.repairs_failed.load(r);
  out.write_route_lease_drops = s.write_route_lease_drops.load(r);
  if (auto& sc = impl_->service_counters) {
    auto refused = sc->snapshot();
    out.service_overloaded = refused.overloaded;
    out.service_access_denied = refused.access_denied;
  }
  return out;
}

result<mc::transfer::region> client::register_buffer(std::span<std::byte> buf) {
  return impl_->engine->register_memory(buf.data(), buf.size());
}

result<mc::transfer::region> client::allocate_buffer(std::size_t size) { return impl_->engine->allocate_shared(size); }

}  // namespace mc::store
