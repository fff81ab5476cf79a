// engine / region: option checks, start/stop, batch dispatch (registration:
// engine_register.cpp).
#include "engine_impl.hpp"
#include "mc/runtime/blocking.hpp"

#include "mc/runtime/deadline.hpp"
#include "mc/runtime/endpoint.hpp"
#include "mc/runtime/when_all.hpp"

#include <boost/asio/ip/address.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>

#include <ifaddrs.h>
#include <sys/stat.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <cstdlib>
#include <map>
#include <stdexcept>

namespace mc::transfer {
namespace detail {
namespace {

void check_options(const engine_options& o) {
  if (o.protocol == "rdma" && !rdma_built())
    throw std::invalid_argument(
        "transfer: protocol 'rdma': this build has no verbs support (libibverbs was not found at build time); "
        "use protocol 'tcp'");
  if (o.protocol != "tcp" && o.protocol != "rdma")
    throw std::invalid_argument("transfer: unknown protocol '" + o.protocol + "'");
  if (o.slice_size < 4096 || o.slice_size > (64u << 20))
    throw std::invalid_argument("transfer: slice_size must be within 4 KiB .. 64 MiB");
  if (o.spread_bytes != 0 && o.spread_bytes < (64u << 10))
    throw std::invalid_argument("transfer: spread_bytes must be 0 or at least 64 KiB");
  if (o.connections_per_peer < 1 || o.connections_per_peer > 64)
    throw std::invalid_argument("transfer: connections_per_peer must be within 1 .. 64");
  if (o.call_connections_per_peer > 64)
    throw std::invalid_argument("transfer: call_connections_per_peer must be at most 64");
  if (o.max_peers < 1) throw std::invalid_argument("transfer: max_peers must be >= 1");
  if (o.max_inbound_connections < 1) throw std::invalid_argument("transfer: max_inbound_connections must be >= 1");
  if (o.default_timeout <= std::chrono::steady_clock::duration::zero())
    throw std::invalid_argument("transfer: default_timeout must be positive");
  if (o.force == transport_kind::rdma && o.protocol != "rdma")
    throw std::invalid_argument("transfer: force=rdma needs protocol 'rdma'");
}

bool is_wildcard(const std::string& h) { return h.empty() || h == "0.0.0.0" || h == "::" || h == "[::]"; }

/// First non-loopback IPv4 address of an interface that is up.
std::string first_interface_address() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "127.0.0.1";
  std::string found;
  for (auto* i = list; i && found.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    char buf[INET_ADDRSTRLEN];
    auto* sin = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
    if (::inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf)) found = buf;
  }
  ::freeifaddrs(list);
  return found.empty() ? "127.0.0.1" : found;
}

}  // namespace

std::pair<std::uint64_t, std::uint64_t> own_pid_namespace() noexcept {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return {0, 0};
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
}

task<bool> yield_to_runtime() {
  namespace asio = boost::asio;
  auto ex = co_await asio::this_coro::executor;
  co_await asio::post(ex, asio::as_tuple(asio::use_awaitable));
  auto cs = co_await asio::this_coro::cancellation_state;
  co_return cs.cancelled() == asio::cancellation_type::none;
}

engine_impl::engine_impl(mc::runtime::runtime& rt, engine_options opts)
    : rt_(rt), opts_(std::move(opts)), instance_id_(random_nonzero_u64()), pid_ns_(own_pid_namespace()) {
  check_options(opts_);
  // Test hook: behave as if the kernel refused cross-memory attach (EPERM).
  if (const char* v = std::getenv("MC_TRANSFER_TEST_REFUSE_CMA"); v && *v == '1') refuse_cma_for_tests_ = true;
  if (const char* v = std::getenv("MC_TRANSFER_TEST_LEGACY_GRANTS"); v && *v == '1') legacy_grants_for_tests_ = true;
  // Test hook: short same-host leases (re-grants mid-copy); "0": every lease
  // ends when it is granted (a peer handing out dead leases).
  if (const char* v = std::getenv("MC_TRANSFER_TEST_MAX_LEASE_US")) {
    const auto us = std::strtoull(v, nullptr, 10);
    if ((us >= 100 && us <= 1'000'000) || (us == 0 && v[0] == '0' && v[1] == '\0')) max_lease_ns_ = us * 1000;
  }
  for (std::size_t i = 0; i < rt_.size(); ++i) {
    auto ts = std::make_unique<thread_state>();
    ts->index = i;
    ts->ex = rt_.executor(i);
    threads_.push_back(std::move(ts));
  }
  tcp_ = make_tcp_transport(*this);
  shm_ = make_shm_transport(*this);
  inproc_ = make_inproc_transport(*this);
  if (opts_.protocol == "rdma") {
    rdma_ctx_ = make_rdma_context(opts_);  // throws when no device is usable
    rdma_ = make_rdma_transport(*this);
    registry_->rdma_tokens = true;  // (random << 32) | rkey; derived ones marked
    registry_->on_remove = [w = std::weak_ptr<rdma_context>(rdma_ctx_)](std::uint64_t token) {
      if (auto c = w.lock()) rdma_deregister(*c, token);
    };
  }
}

engine_impl::~engine_impl() = default;

bool engine_impl::on_own_thread() const noexcept {
  return mc::runtime::runtime::current() == &rt_ && mc::runtime::runtime::current_index() >= 0;
}

thread_state& engine_impl::this_thread_state() {
  return *threads_.at(static_cast<std::size_t>(mc::runtime::runtime::current_index()));
}

mc::result<void> engine_impl::start() {
  if (started_.exchange(true) || stopping_) return fail(errc::unavailable_in_current_status);
  std::string host = opts_.advertise_host;
  if (host.empty()) host = is_wildcard(opts_.bind_host) ? first_interface_address() : opts_.bind_host;
  auto advertised = mc::endpoint::make(host, 1);  // the host checked before anything listens; port below
  if (!advertised) return advertised.error();
  tcp_server_ = std::make_unique<tcp_server>(*this);
  auto port = tcp_server_->listen(opts_.bind_host, opts_.port);
  if (!port) return port.error();
  endpoint_ = advertised->with_port(*port)->str();  // listen() never returns port 0
  shm_name_ = "mooncake-p2p.transfer/" + endpoint_;
  if (opts_.enable_same_host) {
    shm_server_ = std::make_unique<shm_server>(*this);
    if (!shm_server_->listen(shm_name_)) {
      // Another process advertises the same endpoint in this network
      // namespace (or abstract sockets are unavailable): serve TCP only.
      std::fprintf(stderr, "transfer: same-host control socket unavailable for %s; TCP only\n", endpoint_.c_str());
      shm_server_.reset();
    }
  }
  tcp_server_->start_accepting();
  inproc_publish(endpoint_, registry_);
  return {};
}

task<void> engine_impl::close_thread(std::size_t i) {
  auto& ts = *threads_[i];
  ts.stopping = true;
  if (i == 0 && tcp_server_) tcp_server_->close();
  std::vector<closable*> all(ts.live.begin(), ts.live.end());
  for (auto* c : all) c->close_now();
  ts.tcp_pools.drop_idle();
  ts.shm_pools.drop_idle();
  ts.tcp_pools.wake_all();
  ts.shm_pools.wake_all();
  rdma_close_thread(ts);
  co_return;
}

task<void> engine_impl::shutdown() {
  if (stopping_.exchange(true)) {
    (void)co_await drain_within(
        std::max<std::chrono::steady_clock::duration>(std::chrono::seconds(2),
                                                      opts_.default_timeout));  // a second caller waits for the first
    co_return;
  }
  if (!endpoint_.empty()) inproc_withdraw(endpoint_);
  for (std::size_t i = 0; i < threads_.size(); ++i) co_await mc::run_on(rt_.executor(i), close_thread(i));
  if (!co_await drain_within(
          std::max<std::chrono::steady_clock::duration>(std::chrono::seconds(2), opts_.default_timeout))) {
    // Every connection was interrupted, yet some coroutine did not unwind
    // (a completion the I/O backend lost). stop() must not wait forever:
    // the stragglers are destroyed with the runtime, and these internals,
    // which they still point to, stay alive until the process exits.
    std::fprintf(stderr, "transfer: stop: %zu operation(s) did not unwind in time; leaving them to the runtime\n",
                 gate_.in_flight());
    new std::shared_ptr<engine_impl>(shared_from_this());  // deliberate leak, see above
    if (shm_server_) shm_server_->stop();                  // its own thread: bounded by itself
    co_return;
  }
  if (shm_server_) shm_server_->stop();
  // Pools must be destroyed on their threads (timers, sockets).
  for (std::size_t i = 0; i < threads_.size(); ++i)
    co_await mc::run_on(rt_.executor(i), [](thread_state* ts) -> task<void> {
      ts->tcp_pools = {};
      ts->shm_pools = {};
      ts->mappings.clear();
      ts->deadlines.reset();
      rdma_release_thread(*ts);
      co_return;
    }(threads_[i].get()));
}

task<bool> engine_impl::drain_within(std::chrono::steady_clock::duration limit) {
  auto ex = co_await boost::asio::this_coro::executor;
  auto drained = std::make_shared<boost::asio::steady_timer>(ex, std::chrono::steady_clock::time_point::max());
  auto done = std::make_shared<bool>(false);
  // gate::close() cannot be cancelled: it runs on its own and signals.
  boost::asio::co_spawn(
      ex,
      [](mc::gate* g, std::shared_ptr<boost::asio::steady_timer> t, std::shared_ptr<bool> d) -> task<void> {
        co_await g->close();
        *d = true;
        t->cancel();
      }(&gate_, drained, done),
      boost::asio::detached);
  drained->expires_after(limit);
  (void)co_await drained->async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
  co_return *done;
}

void engine_impl::stop_unstarted() noexcept {
  stopping_ = true;
  if (!endpoint_.empty()) inproc_withdraw(endpoint_);
  if (shm_server_) shm_server_->stop();
  if (tcp_server_) tcp_server_->close();
}

task<void> engine_impl::run_group(thread_state& ts, const std::string& endpoint, std::vector<transfer_item*> items) {
  using tk = transport_kind;
  std::span<transfer_item*> all(items);
  auto finish_all = [&](errc e) {
    for (auto* it : items) it->finish(make_error_code(e));
  };
  if (opts_.force) {
    transport* t = *opts_.force == tk::tcp          ? tcp_.get()
                   : *opts_.force == tk::same_host  ? shm_.get()
                   : *opts_.force == tk::in_process ? inproc_.get()
                   : *opts_.force == tk::rdma       ? rdma_.get()
                                                    : nullptr;
    if (!t) co_return finish_all(errc::unsupported);
    for (auto* it : items) it->via = t->kind();
    co_await t->execute(ts, endpoint, all);
    if (t == shm_.get()) {
      // The peer is not "same host" after all (identity mismatch, or the
      // kernel refused cross-memory attach for it): TCP is the honest fallback.
      const bool refused =
          ts.not_same_host.get(endpoint, std::chrono::steady_clock::now()) == same_host_verdict::refused;
      std::vector<transfer_item*> redo;
      for (auto* it : items)
        if (it->done && mc::is(it->ec, errc::unsupported) && refused) {
          it->done = false;
          it->ec = make_error_code(errc::cancelled);
          redo.push_back(it);
        }
      for (auto* it : redo) it->via = tk::tcp;
      if (!redo.empty()) co_await tcp_->execute(ts, endpoint, std::span<transfer_item*>(redo));
    }
    co_return;
  }
  std::vector<transfer_item*> rest = items;
  for (transport* t : {opts_.enable_in_process ? inproc_.get() : nullptr, opts_.enable_same_host ? shm_.get() : nullptr,
                       rdma_.get()}) {
    if (!t || rest.empty()) continue;
    for (auto* it : rest) it->via = t->kind();
    co_await t->execute(ts, endpoint, std::span<transfer_item*>(rest));
    std::vector<transfer_item*> next;
    for (auto* it : rest)
      if (it->done && mc::is(it->ec, errc::unsupported)) {
        it->done = false;
        it->ec = make_error_code(errc::cancelled);
        next.push_back(it);
      }
    rest = std::move(next);
  }
  for (auto* it : rest) it->via = tk::tcp;
  if (!rest.empty()) co_await tcp_->execute(ts, endpoint, std::span<transfer_item*>(rest));
}

task<std::vector<mc::result<void>>> engine_impl::run_batch(std::vector<request> reqs,
                                                           std::chrono::steady_clock::duration timeout) {
  std::vector<mc::result<void>> out(reqs.size());
  auto holder = gate_.try_enter();
  if (!holder || stopping_) {
    for (auto& r : out) r = fail(errc::shutting_down);
    co_return out;
  }
  auto& ts = this_thread_state();
  std::vector<transfer_item> items(reqs.size());
  std::map<std::string_view, std::vector<transfer_item*>> groups;
  std::vector<transfer_item*>* group = nullptr;  // the last item's (a batch's items mostly share one peer)
  std::string_view group_of;
  const auto now = std::chrono::steady_clock::now();
  const auto deadline = timeout < std::chrono::steady_clock::time_point::max() - now
                            ? now + timeout
                            : std::chrono::steady_clock::time_point::max();
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    auto& q = reqs[i];
    auto& it = items[i];
    it.op = q.op;
    it.local = q.local;
    it.length = q.length;
    it.address = q.remote.address;
    it.token = q.remote.token;
    it.instance = q.remote.instance;
    it.deadline = deadline;
    if (q.length == 0) {
      it.finish({});
    } else if (q.local == nullptr || q.length > q.remote.length || q.remote.endpoint.empty() ||
               q.remote.address + q.length < q.remote.address) {
      it.finish(make_error_code(errc::invalid_params));
    } else {
      if (group == nullptr || q.remote.endpoint != group_of) {
        group = &groups[q.remote.endpoint];
        group_of = q.remote.endpoint;
      }
      group->push_back(&it);
    }
  }
  if (!groups.empty()) {
    auto body = [](engine_impl* self, thread_state* ts,
                   std::map<std::string_view, std::vector<transfer_item*>>* groups) -> task<mc::result<void>> {
      if (groups->size() == 1) {
        auto& [ep, v] = *groups->begin();
        co_await self->run_group_spread(*ts, std::string(ep), std::move(v));
      } else {
        std::vector<task<int>> tasks;
        for (auto& [ep, v] : *groups)
          tasks.push_back(
              [](engine_impl* s, thread_state* t, std::string e, std::vector<transfer_item*> its) -> task<int> {
                co_await s->run_group_spread(*t, std::move(e), std::move(its));
                co_return 0;
              }(self, ts, std::string(ep), std::move(v)));
        co_await mc::when_all(std::move(tasks));
      }
      co_return mc::result<void>{};
    };
    auto r = co_await mc::with_deadline(body(this, &ts, &groups), timeout);
    const errc unfinished = stopping_                                  ? errc::shutting_down
                            : (!r && mc::is(r.error(), errc::timeout)) ? errc::timeout
                                                                       : errc::cancelled;
    for (auto& it : items)
      if (!it.done || mc::is(it.ec, errc::cancelled)) {
        it.ec = make_error_code(unfinished);
        it.done = true;
      }
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto& it = items[i];
    auto& c = counters_.initiated[static_cast<std::size_t>(it.via)];
    if (it.ec) {
      out[i] = it.ec;
      bump(c.errors);
    } else {
      out[i] = {};
      if (it.length == 0) continue;
      bump(it.op == op_kind::read ? c.read_ops : c.write_ops);
      bump(it.op == op_kind::read ? c.read_bytes : c.write_bytes, it.length);
    }
  }
  co_return out;
}

task<mc::result<void>> engine_impl::fence_rdma(std::string peer) {
  auto holder = gate_.try_enter();
  if (!holder || stopping_) co_return fail(errc::shutting_down);
  // Served QPs: any thread may move them to the error state (under the
  // context's lock, which their destruction also takes).
  std::size_t n = rdma_fence_served(*rdma_ctx_, peer);
  // Ours to the peer live on their runtime threads: visit each.
  for (std::size_t i = 0; i < threads_.size(); ++i)
    n += co_await mc::run_on(rt_.executor(i), [](thread_state* ts, const std::string* p) -> task<std::size_t> {
      co_return rdma_fence_thread(*ts, *p);
    }(threads_[i].get(), &peer));
  bump(counters_.fenced_qps, n);
  co_return mc::result<void>{};
}

}  // namespace detail

// ---- engine ----------------------------------------------------------------

engine::engine(mc::runtime::runtime& rt, engine_options opts)
    : impl_(std::make_shared<detail::engine_impl>(rt, std::move(opts))) {}

engine::~engine() {
  try {
    stop();
  } catch (...) {
    // stop() on a runtime thread: the owner broke the documented contract;
    // close what can be closed without waiting.
    impl_->stop_unstarted();
  }
}

mc::result<void> engine::start() { return impl_->start(); }

void engine::stop() {
  if (!impl_->started_) {
    impl_->stop_unstarted();
    return;
  }
  mc::runtime::assert_may_block("mc::transfer::engine::stop");
  if (impl_->on_own_thread())
    throw std::logic_error("transfer: engine::stop() on a runtime thread; use co_await shutdown()");
  if (!impl_->rt_.running()) {
    impl_->stop_unstarted();
    return;
  }
  impl_->rt_.block_on(impl_->shutdown());
}

mc::task<void> engine::shutdown() {
  auto impl = impl_;
  if (!impl->started_) {
    impl->stop_unstarted();
    co_return;
  }
  co_await impl->shutdown();
}

std::string engine::endpoint() const { return impl_->endpoint_; }
const engine_options& engine::options() const noexcept { return impl_->opts_; }

mc::task<mc::result<void>> engine::fence(std::string peer_endpoint) {
  auto impl = impl_;  // keeps the internals alive while this runs
  if (peer_endpoint.empty()) co_return fail(errc::invalid_params);
  if (impl->stopping_) co_return fail(errc::shutting_down);
  detail::bump(impl->counters_.fences);
  if (!impl->rdma_ctx_ || !impl->started_) co_return mc::result<void>{};  // nothing to fence: tokens are checked
  co_return co_await impl->fence_rdma(std::move(peer_endpoint));
}

std::uint64_t engine::instance_id() const noexcept { return impl_->instance_id_; }

mc::task<mc::result<void>> engine::read(std::span<std::byte> local, remote_buffer src,
                                        std::chrono::steady_clock::duration timeout) {
  std::vector<request> v;
  v.push_back(request::make_read(local, std::move(src)));
  auto r = co_await batch(std::move(v), timeout);
  co_return r.front();
}

mc::task<mc::result<void>> engine::read(std::span<std::byte> local, remote_buffer src) {
  return read(local, std::move(src), impl_->opts_.default_timeout);
}

mc::task<mc::result<void>> engine::write(std::span<const std::byte> local, remote_buffer dst,
                                         std::chrono::steady_clock::duration timeout) {
  std::vector<request> v;
  v.push_back(request::make_write(local, std::move(dst)));
  auto r = co_await batch(std::move(v), timeout);
  co_return r.front();
}

mc::task<mc::result<void>> engine::write(std::span<const std::byte> local, remote_buffer dst) {
  return write(local, std::move(dst), impl_->opts_.default_timeout);
}

mc::task<std::vector<mc::result<void>>> engine::batch(std::vector<request> requests,
                                                      std::chrono::steady_clock::duration timeout) {
  auto impl = impl_;  // keeps the internals alive while this runs
  if (!impl->started_) {
    std::vector<mc::result<void>> out(requests.size(), mc::result<void>(fail(errc::unavailable_in_current_status)));
    co_return out;
  }
  if (impl->on_own_thread()) co_return co_await impl->run_batch(std::move(requests), timeout);
  co_return co_await mc::run_on(impl->rt_.executor(0), impl->run_batch(std::move(requests), timeout));
}

mc::task<std::vector<mc::result<void>>> engine::batch(std::vector<request> requests) {
  return batch(std::move(requests), impl_->opts_.default_timeout);
}

engine_stats engine::stats() const {
  auto& c = impl_->counters_;
  auto ld = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  engine_stats s;
  for (std::size_t k = 0; k < transport_kind_count; ++k) {
    auto& a = c.initiated[k];
    s.initiated[k] = {ld(a.read_ops), ld(a.read_bytes), ld(a.write_ops), ld(a.write_bytes), ld(a.errors)};
  }
  s.served_read_ops = ld(c.served_read_ops);
  s.served_read_bytes = ld(c.served_read_bytes);
  s.served_write_ops = ld(c.served_write_ops);
  s.served_write_bytes = ld(c.served_write_bytes);
  s.served_rejects = ld(c.served_rejects);
  s.outbound_connections = ld(c.outbound);
  s.inbound_connections = ld(c.inbound);
  s.same_host_fallbacks = ld(c.same_host_fallbacks);
  s.revoked_with_grants = impl_->registry_->revoked_with_grants();
  s.same_host_grants_held = ld(c.grants_held);
  s.same_host_range_grants = ld(c.range_grants_served);
  s.same_host_releases_deferred = ld(c.releases_deferred);
  s.registered_regions = impl_->registry_->size();
  s.derived_registrations = ld(c.derived);
  s.rdma_memory_registrations = ld(c.rdma_regs);
  s.shared_mappings = ld(c.shared_mappings);
  s.shared_maps_served = ld(c.shared_maps_served);
  s.shared_copies = ld(c.shared_copies);
  s.served_calls = ld(c.served_calls);
  s.served_call_errors = ld(c.served_call_errors);
  s.initiated_calls = ld(c.initiated_calls);
  s.initiated_call_errors = ld(c.initiated_call_errors);
  s.fences = ld(c.fences);
  s.fenced_queue_pairs = ld(c.fenced_qps);
  if (impl_->rdma_ctx_) detail::rdma_device_stats_of(*impl_->rdma_ctx_, s.rdma_devices);
  return s;
}

}  // namespace mc::transfer
