// The attach service on the wire: a loopback-only Cap'n Proto listener whose
// calls are checked here and run by detail::attach_core (attach_core.cpp).
#include "mc/store/attach.hpp"

#include "attach.capnp.h"
#include "attach_core.hpp"
#include "mc/rpc/capnp.hpp"
#include "mc/rpc/server.hpp"
#include "mc/runtime/endpoint.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/store/client.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <chrono>
#include <limits>

namespace mc::store {
namespace {

using clock = std::chrono::steady_clock;
using detail::attach_item;

/// Loopback as the kernel reports the peer (IPv4-mapped addresses come as IPv4).
bool is_loopback_ip(const std::string& ip) { return ip.starts_with("127.") || ip == "::1"; }

/// Same host (loopback) and the same uid as this node, or root: the rule of
/// the same-host transport, checked with the kernel's view of the peer's
/// socket. A peer whose uid the kernel cannot tell is refused.
bool allowed_peer(const mc::rpc::connection_info& c, std::uint16_t port) {
  if (!is_loopback_ip(c.remote_address)) return false;
  auto uid = detail::loopback_peer_uid(c.remote_address, c.remote_port, "127.0.0.1", port);
  if (!uid) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      std::fprintf(stderr, "attach: the kernel cannot tell the uid of a loopback peer (sock_diag): refused\n");
    return false;
  }
  return *uid == 0 || *uid == ::geteuid();
}

/// "ip:port" / "[v6]:port"; "" when `ip` or `port` is not valid (mc::endpoint).
std::string endpoint_of(const std::string& ip, std::uint16_t port) {
  auto e = mc::endpoint::make(ip, port);
  return e ? e->str() : std::string();
}

void set_result(AttachResult::Builder b, const result<std::uint64_t>& r) {
  b.setCode(r ? 0 : r.error().value());
  b.setSize(r ? *r : 0);
}

/// A call in flight (RAII gauge).
class call_scope {
 public:
  explicit call_scope(detail::attach_core& c) : c_(c) {
    c_.calls.fetch_add(1, std::memory_order_relaxed);
    c_.calls_in_flight.fetch_add(1, std::memory_order_relaxed);
  }
  ~call_scope() { c_.calls_in_flight.fetch_sub(1, std::memory_order_relaxed); }
  call_scope(const call_scope&) = delete;
  call_scope& operator=(const call_scope&) = delete;

 private:
  detail::attach_core& c_;
};

/// One object per attacher connection, on its serving thread.
class attach_service_impl final : public mc::rpc::service<Attach> {
 public:
  attach_service_impl(mc::executor ex, const mc::rpc::connection_info& conn, std::shared_ptr<detail::attach_core> core)
      : service(std::move(ex)), conn_(conn), core_(std::move(core)), allowed_(allowed_peer(conn, core_->port.load())) {
    core_->connections.fetch_add(1, std::memory_order_relaxed);
  }

  kj::Promise<void> hello(HelloContext ctx) override { return serve(ctx, do_hello(ctx)); }
  kj::Promise<void> batchPut(BatchPutContext ctx) override { return serve(ctx, do_put(ctx)); }
  kj::Promise<void> batchGet(BatchGetContext ctx) override { return serve(ctx, do_get(ctx)); }
  kj::Promise<void> batchExists(BatchExistsContext ctx) override { return serve(ctx, do_exists(ctx)); }
  kj::Promise<void> remove(RemoveContext ctx) override { return serve(ctx, do_remove(ctx)); }
  kj::Promise<void> sizeOf(SizeOfContext ctx) override { return serve(ctx, do_size_of(ctx)); }

 private:
  enum class op { put, get };

  result<void> allowed() {
    if (allowed_) return {};
    core_->refused.fetch_add(1, std::memory_order_relaxed);
    return fail(errc::access_denied);
  }

  clock::time_point deadline_of(std::uint32_t ms) const {
    auto asked = std::chrono::milliseconds(ms == 0 ? core_->options().max_request_timeout.count() : ms);
    return clock::now() + std::min<mc::duration>(asked, core_->options().max_request_timeout);
  }

  /// The wire checks of one item (its failure stays with the item).
  attach_item item_of(AttachItem::Reader r, const std::string& endpoint, std::uint64_t instance, op kind) {
    attach_item it;
    it.key = r.getKey();
    if (auto k = check_key(it.key); !k) {
      it.bad = k;
      return it;
    }
    auto list = r.getPieces();
    if (list.size() > max_value_pieces || (kind == op::put && list.size() == 0)) {
      it.bad = fail(errc::invalid_params);
      return it;
    }
    it.pieces.reserve(list.size());
    for (auto p : list) {
      auto addr = p.getAddress(), len = p.getLength();
      if (len == 0 || addr == 0 || len > std::numeric_limits<std::uint64_t>::max() - addr) {
        it.bad = fail(errc::invalid_params);
        it.pieces.clear();
        return it;
      }
      it.pieces.push_back({endpoint, addr, len, p.getToken(), instance});
    }
    auto total = total_length(it.pieces);
    if (!total) {
      it.bad = fail(errc::invalid_params);
      it.pieces.clear();
      return it;
    }
    it.room = *total;
    return it;
  }

  /// The whole call's checks, then its items. Errors: access_denied,
  /// invalid_params (too many keys or pieces, no transfer port).
  template <class Params>
  result<std::vector<attach_item>> items_of(Params p, op kind) {
    if (auto a = allowed(); !a) return a.error();
    auto list = p.getItems();
    if (list.size() > core_->options().max_keys_per_call) return fail(errc::invalid_params);
    std::uint64_t pieces = 0;
    for (auto it : list) pieces += it.getPieces().size();
    if (pieces > max_attach_pieces_per_call) return fail(errc::invalid_params);
    auto peer = p.getPeer();
    if (peer.getPort() == 0) return fail(errc::invalid_params);
    // Bytes go to the attacher's engine on this connection's own IP.
    const auto endpoint = endpoint_of(conn_.remote_address, peer.getPort());
    if (endpoint.empty()) return fail(errc::invalid_params);
    std::vector<attach_item> items;
    items.reserve(list.size());
    for (auto it : list) items.push_back(item_of(it, endpoint, peer.getInstance(), kind));
    return items;
  }

  task<result<void>> do_hello(HelloContext ctx) {
    if (auto a = allowed(); !a) co_return a;
    call_scope scope(*core_);
    if (ctx.getParams().getVersion() != attach_protocol_version) co_return fail(errc::unsupported);
    auto res = ctx.getResults();
    res.setVersion(attach_protocol_version);
    res.setNodeId(core_->node_id());
    res.setMaxKeys(core_->options().max_keys_per_call);
    res.setMaxPieces(max_attach_pieces_per_call);
    co_return result<void>{};
  }

  task<result<void>> do_put(BatchPutContext ctx) {
    auto p = ctx.getParams();
    auto items = items_of(p, op::put);
    if (!items) co_return items.error();
    call_scope scope(*core_);
    const auto deadline = deadline_of(p.getTimeoutMs());
    auto keys = co_await core_->admit_keys(items->size(), deadline);
    if (!keys) co_return keys.error();
    auto out = co_await core_->put(std::move(*items), deadline);
    auto res = ctx.getResults().initResults(static_cast<unsigned>(out.size()));
    for (unsigned i = 0; i < out.size(); ++i) res[i].setCode(out[i] ? 0 : out[i].error().value());
    co_return result<void>{};
  }

  task<result<void>> do_get(BatchGetContext ctx) {
    auto p = ctx.getParams();
    auto items = items_of(p, op::get);
    if (!items) co_return items.error();
    call_scope scope(*core_);
    const auto deadline = deadline_of(p.getTimeoutMs());
    auto keys = co_await core_->admit_keys(items->size(), deadline);
    if (!keys) co_return keys.error();
    auto out = co_await core_->get(std::move(*items), deadline);
    auto res = ctx.getResults().initResults(static_cast<unsigned>(out.size()));
    for (unsigned i = 0; i < out.size(); ++i) set_result(res[i], out[i]);
    co_return result<void>{};
  }

  task<result<void>> do_exists(BatchExistsContext ctx) {
    if (auto a = allowed(); !a) co_return a;
    auto p = ctx.getParams();
    auto list = p.getKeys();
    if (list.size() > core_->options().max_keys_per_call) co_return fail(errc::invalid_params);
    call_scope scope(*core_);
    std::vector<std::string> keys;
    keys.reserve(list.size());
    for (auto k : list) keys.emplace_back(k.cStr(), k.size());
    auto units = co_await core_->admit_keys(keys.size(), deadline_of(p.getTimeoutMs()));
    if (!units) co_return units.error();
    auto out = co_await core_->exists(std::move(keys));
    auto res = ctx.getResults().initResults(static_cast<unsigned>(out.size()));
    for (unsigned i = 0; i < out.size(); ++i) {
      res[i].setCode(out[i] ? 0 : out[i].error().value());
      res[i].setSize(out[i] && *out[i] ? 1 : 0);
    }
    co_return result<void>{};
  }

  task<result<void>> do_remove(RemoveContext ctx) {
    if (auto a = allowed(); !a) co_return a;
    call_scope scope(*core_);
    auto p = ctx.getParams();
    auto units = co_await core_->admit_keys(1, deadline_of(p.getTimeoutMs()));
    if (!units) co_return units.error();
    auto r = co_await core_->remove(p.getKey());
    ctx.getResults().initResult().setCode(r ? 0 : r.error().value());
    co_return result<void>{};
  }

  task<result<void>> do_size_of(SizeOfContext ctx) {
    if (auto a = allowed(); !a) co_return a;
    call_scope scope(*core_);
    auto p = ctx.getParams();
    auto units = co_await core_->admit_keys(1, deadline_of(p.getTimeoutMs()));
    if (!units) co_return units.error();
    set_result(ctx.getResults().initResult(), co_await core_->size_of(p.getKey()));
    co_return result<void>{};
  }

  mc::rpc::connection_info conn_;
  std::shared_ptr<detail::attach_core> core_;
  bool allowed_;  // same host and uid (checked once per connection)
};

}  // namespace

result<std::uint16_t> server_port_of(std::string_view server_address) {
  auto e = mc::endpoint::parse(server_address);
  if (!e) return e.error();
  return e->port();
}

struct attach_server::impl {
  std::shared_ptr<detail::attach_core> core;
  std::unique_ptr<mc::rpc::server> server;
  std::uint16_t port = 0;
};

result<std::unique_ptr<attach_server>> attach_server::start(mc::runtime::runtime& rt, client& node,
                                                            attach_server_options opts, std::string* why) {
  auto refuse = [&](errc e, std::string text) -> result<std::unique_ptr<attach_server>> {
    if (why) *why = std::move(text);
    return fail(e);
  };
  if (opts.threads == 0 || opts.threads > rt.size()) return refuse(errc::invalid_params, "attach: bad thread count");
  if (opts.max_keys_per_call == 0 || opts.max_connections == 0 || opts.max_inflight_keys == 0 ||
      opts.max_inflight_bytes == 0 || opts.max_staging_bytes == 0 || opts.max_request_timeout.count() <= 0)
    return refuse(errc::invalid_params, "attach: every bound must be positive");
  std::uint16_t port = opts.ephemeral ? 0 : (opts.port != 0 ? opts.port : derived_attach_port(node.rpc_port()));
  if (port == 0 && !opts.ephemeral) return refuse(errc::invalid_params, "attach: no port (node RPC port unknown)");
  auto p = std::make_unique<impl>();
  p->core = std::make_shared<detail::attach_core>(node, opts);
  mc::rpc::server_options so;
  so.host = "127.0.0.1";
  so.port = port;
  so.threads = opts.threads;
  so.max_connections = opts.max_connections;
  so.accept_rdma = false;     // same host: TCP loopback is the control plane
  p->core->port.store(port);  // ephemeral: set below, once known
  p->server = std::make_unique<mc::rpc::server>(rt, so);
  p->server->add_service(attach_service_name, mc::rpc::make_connection_service<attach_service_impl>(p->core));
  if (auto r = p->server->start(); !r) {
    std::string text = "attach: cannot listen on 127.0.0.1:";
    text += std::to_string(port);
    text += ": ";
    text += p->server->message();
    return refuse(to_errc(r.error()), std::move(text));
  }
  p->port = p->server->port();
  p->core->port.store(p->port);
  return std::unique_ptr<attach_server>(new attach_server(std::move(p)));
}

attach_server::attach_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

attach_server::~attach_server() { stop(); }

void attach_server::stop() {
  if (impl_ && impl_->server) impl_->server->stop();
}

std::uint16_t attach_server::port() const noexcept { return impl_->port; }

std::string attach_server::endpoint() const { return endpoint_of("127.0.0.1", impl_->port); }

attach_server_stats attach_server::stats() const { return impl_->core->stats(); }

}  // namespace mc::store
