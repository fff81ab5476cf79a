#include "mc/store/client_service.hpp"

#include "client_service.capnp.h"
#include "mc/master/master_client.hpp"
#include "mc/rpc/capnp.hpp"
#include "mc/runtime/when_all.hpp"
#include "mc/store/data_manager.hpp"
#include "mc/transfer/types.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <mutex>
#include <unordered_map>

namespace mc::store {
namespace {

using clock = std::chrono::steady_clock;

mc::transfer::remote_buffer to_remote(RemoteBuffer::Reader r) {
  return {r.getEndpoint(), r.getAddress(), r.getLength(), r.getToken(), 0};
}

struct item_outcome {
  std::int32_t code = 0;
  std::uint64_t size = 0;
};

item_outcome outcome_of(const result<void>& r, std::uint64_t size) {
  return {r ? 0 : r.error().value(), size};
}

item_outcome refused(errc e) { return {static_cast<std::int32_t>(e), 0}; }

void set_result(ItemResult::Builder b, const item_outcome& o) {
  b.setCode(o.code);
  b.setSize(o.size);
}

/// The port of "host:port" / "[v6]:port", or 0 when there is none.
std::uint16_t port_of(const std::string& endpoint) {
  auto colon = endpoint.rfind(':');
  if (colon == std::string::npos) return 0;
  unsigned v = 0;
  const char* b = endpoint.data() + colon + 1;
  const char* e = endpoint.data() + endpoint.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc{} || p != e || b == e || v == 0 || v > 65535) return 0;
  return static_cast<std::uint16_t>(v);
}

std::string join_host_port(const std::string& host, std::uint16_t port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

/// The master's registrations of requesters, cached briefly (bounded).
/// Thread-safe; shared by every serving thread.
class registration_cache {
 public:
  explicit registration_cache(const client_service_options& o)
      : master_(o.master_address, o.master_timeout), enabled_(!o.master_address.empty()),
        ttl_(o.registration_ttl), max_(std::max<std::size_t>(o.registration_cache_max, 1)) {}

  /// The registration of `id`. Errors: access_denied (unknown id, or no
  /// master configured), the master call's rpc_fail / timeout.
  task<result<mc::master::client_info>> get(std::string id) {
    if (!enabled_) co_return fail(errc::access_denied);
    if (auto hit = find(id)) co_return std::move(*hit);
    auto r = co_await master_.get_client(id);
    if (!r) {
      if (mc::is(r.error(), errc::client_not_found)) co_return fail(errc::access_denied);
      co_return r.error();
    }
    insert(id, *r);
    co_return std::move(*r);
  }

 private:
  struct entry {
    mc::master::client_info info;
    clock::time_point expiry;
  };

  std::optional<mc::master::client_info> find(const std::string& id) {
    std::lock_guard lk(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return std::nullopt;
    if (it->second.expiry <= clock::now()) {
      entries_.erase(it);
      return std::nullopt;
    }
    return it->second.info;
  }

  void insert(const std::string& id, const mc::master::client_info& info) {
    std::lock_guard lk(mu_);
    auto now = clock::now();
    if (entries_.size() >= max_) std::erase_if(entries_, [&](auto& kv) { return kv.second.expiry <= now; });
    if (entries_.size() >= max_) entries_.clear();  // bounded; refilled on demand
    entries_[id] = entry{info, now + ttl_};
  }

  mc::master::master_client master_;
  bool enabled_;
  mc::duration ttl_;
  std::size_t max_;
  std::mutex mu_;
  std::unordered_map<std::string, entry> entries_;
};

struct load {
  std::uint64_t keys = 0;
  std::uint64_t bytes = 0;
};

/// Items and bytes in flight per peer IP (entries live only while non-zero).
class peer_loads {
 public:
  bool try_add(const std::string& ip, std::uint64_t bytes, const service_limits& l) {
    std::lock_guard lk(mu_);
    auto& x = loads_[ip];
    if (x.keys + 1 > l.max_inflight_keys_per_peer || bytes > l.max_inflight_bytes_per_peer - x.bytes ||
        x.bytes > l.max_inflight_bytes_per_peer) {
      if (x.keys == 0) loads_.erase(ip);
      return false;
    }
    ++x.keys;
    x.bytes += bytes;
    return true;
  }
  void remove(const std::string& ip, std::uint64_t bytes) {
    std::lock_guard lk(mu_);
    auto it = loads_.find(ip);
    if (it == loads_.end()) return;
    --it->second.keys;
    it->second.bytes -= bytes;
    if (it->second.keys == 0) loads_.erase(it);
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, load> loads_;
};

/// What every connection's service object shares.
struct shared_state {
  shared_state(data_manager& d, client_service_options o) : dm(d), opts(std::move(o)), registrations(opts) {}
  data_manager& dm;
  client_service_options opts;
  registration_cache registrations;
  peer_loads peers;
  std::shared_ptr<client_service_counters> counters = std::make_shared<client_service_counters>();
};

/// One admitted item (RAII): counted against its connection and its peer IP.
class admission {
 public:
  admission() = default;
  admission(load* conn, shared_state* s, const std::string* ip, std::uint64_t bytes)
      : conn_(conn), shared_(s), ip_(ip), bytes_(bytes) {}
  admission(admission&& o) noexcept
      : conn_(std::exchange(o.conn_, nullptr)), shared_(o.shared_), ip_(o.ip_), bytes_(o.bytes_) {}
  admission& operator=(admission&&) = delete;
  ~admission() {
    if (!conn_) return;
    --conn_->keys;
    conn_->bytes -= bytes_;
    shared_->peers.remove(*ip_, bytes_);
  }
  explicit operator bool() const noexcept { return conn_ != nullptr; }

 private:
  load* conn_ = nullptr;
  shared_state* shared_ = nullptr;
  const std::string* ip_ = nullptr;
  std::uint64_t bytes_ = 0;
};

/// One request item, before it runs.
struct item_request {
  std::string key;
  std::string client_id;
  mc::transfer::remote_buffer buffer;
};

template <class R>
item_request read_item(R r, mc::transfer::remote_buffer b) {
  return {r.getKey(), r.getClientId(), std::move(b)};
}

/// One object per RPC connection (it knows the connection's peer), on that
/// connection's serving thread.
class client_service_impl final : public mc::rpc::service<ClientService> {
 public:
  client_service_impl(mc::executor ex, const mc::rpc::connection_info& conn, std::shared_ptr<shared_state> s)
      : service(std::move(ex)), conn_(conn), s_(std::move(s)) {}

  kj::Promise<void> readRemoteData(ReadRemoteDataContext ctx) override { return serve(ctx, do_read(ctx)); }
  kj::Promise<void> writeRemoteData(WriteRemoteDataContext ctx) override { return serve(ctx, do_write(ctx)); }
  kj::Promise<void> batchReadRemoteData(BatchReadRemoteDataContext ctx) override {
    return serve(ctx, do_batch_read(ctx));
  }
  kj::Promise<void> batchWriteRemoteData(BatchWriteRemoteDataContext ctx) override {
    return serve(ctx, do_batch_write(ctx));
  }
  kj::Promise<void> query(QueryContext ctx) override {
    auto res = ctx.getResults().initResult();
    std::string key = ctx.getParams().getKey();
    if (auto k = check_key(key); !k) {
      res.setCode(k.error().value());
      return kj::READY_NOW;
    }
    auto s = s_->dm.size_of(key);
    res.setCode(s ? 0 : s.error().value());
    res.setSize(s ? *s : 0);
    return kj::READY_NOW;
  }
  kj::Promise<void> remove(RemoveContext ctx) override { return serve(ctx, do_remove(ctx)); }

 private:
  enum class op { read, write };

  mc::duration request_timeout(std::uint32_t ms) const {
    auto cap = s_->opts.limits.max_request_timeout;
    auto asked = std::chrono::milliseconds(ms == 0 ? max_request_timeout_ms : ms);
    return std::min<mc::duration>(asked, cap);
  }

  /// Counts one item against the connection's and the peer's limits.
  admission admit(std::uint64_t bytes) {
    auto& l = s_->opts.limits;
    if (load_.keys + 1 > l.max_inflight_keys_per_connection || load_.bytes > l.max_inflight_bytes_per_connection ||
        bytes > l.max_inflight_bytes_per_connection - load_.bytes)
      return {};
    if (!s_->peers.try_add(conn_.remote_address, bytes, l)) return {};
    ++load_.keys;
    load_.bytes += bytes;
    return admission(&load_, s_.get(), &conn_.remote_address, bytes);
  }

  /// Where the transfer of an item may go (see client_service.hpp).
  task<result<mc::transfer::remote_buffer>> resolve(const std::string& client_id, mc::transfer::remote_buffer b) {
    if (b.endpoint.empty()) co_return fail(errc::invalid_params);
    if (client_id.empty()) {
      auto port = port_of(b.endpoint);
      if (port == 0) co_return fail(errc::invalid_params);
      if (conn_.remote_address.empty()) co_return fail(errc::access_denied);
      b.endpoint = join_host_port(conn_.remote_address, port);
      b.instance = 0;
      co_return b;
    }
    auto reg = co_await s_->registrations.get(client_id);
    if (!reg) co_return reg.error();
    if (reg->transfer_endpoint != b.endpoint) co_return fail(errc::access_denied);
    b.instance = reg->transfer_instance;
    co_return b;
  }

  /// Admits, resolves and runs one item. The admission was taken by the
  /// caller (before any item of a batch ran) and ends with the item.
  task<item_outcome> run_one(op kind, item_request item, admission ticket, clock::time_point deadline) {
    if (!ticket) {
      s_->counters->overloaded.fetch_add(1, std::memory_order_relaxed);
      co_return refused(errc::overloaded);
    }
    auto where = co_await resolve(item.client_id, std::move(item.buffer));
    if (!where) {
      if (mc::is(where.error(), errc::access_denied))
        s_->counters->access_denied.fetch_add(1, std::memory_order_relaxed);
      co_return item_outcome{where.error().value(), 0};
    }
    auto left = std::max<mc::duration>(deadline - clock::now(), mc::duration::zero());
    if (kind == op::read) {
      std::uint64_t size = 0;
      auto r = co_await s_->dm.read_remote(item.key, std::move(*where), left, &size);
      co_return item_outcome{r ? 0 : r.error().value(), size};
    }
    auto size = where->length;
    co_return outcome_of(co_await s_->dm.write_remote(item.key, std::move(*where), left), size);
  }

  /// Checks that need no work, then the admission.
  admission admit_item(op kind, const item_request& item) {
    if (kind == op::write && item.buffer.length > s_->opts.limits.max_remote_write_bytes) return {};
    return admit(item.buffer.length);
  }

  task<item_outcome> single(op kind, item_request item, std::uint32_t timeout_ms) {
    auto deadline = clock::now() + request_timeout(timeout_ms);
    auto ticket = admit_item(kind, item);
    co_return co_await run_one(kind, std::move(item), std::move(ticket), deadline);
  }

  task<result<void>> do_read(ReadRemoteDataContext ctx) {
    auto p = ctx.getParams();
    auto item = p.getItem();
    auto o = co_await single(op::read, read_item(item, to_remote(item.getDest())), p.getTimeoutMs());
    set_result(ctx.getResults().initResult(), o);
    co_return result<void>{};
  }

  task<result<void>> do_write(WriteRemoteDataContext ctx) {
    auto p = ctx.getParams();
    auto item = p.getItem();
    auto o = co_await single(op::write, read_item(item, to_remote(item.getSrc())), p.getTimeoutMs());
    set_result(ctx.getResults().initResult(), o);
    co_return result<void>{};
  }

  // A batch is one RPC with a result per item; every item is admitted (or
  // refused) before any runs, then they run concurrently.
  template <class Context, class Read>
  task<result<void>> do_batch(Context ctx, op kind, Read to_item) {
    auto p = ctx.getParams();
    auto items = p.getItems();
    if (items.size() > max_batch_items) co_return fail(errc::invalid_params);
    auto deadline = clock::now() + request_timeout(p.getTimeoutMs());
    std::vector<std::pair<item_request, admission>> admitted;
    admitted.reserve(items.size());
    for (auto it : items) {
      auto item = to_item(it);
      auto ticket = admit_item(kind, item);
      admitted.emplace_back(std::move(item), std::move(ticket));
    }
    // Items of one batch name one requester: ask the master once (if the
    // first item was admitted), the other items then hit the cache.
    if (admitted.size() > 1 && admitted[0].second && !admitted[0].first.client_id.empty())
      (void)co_await s_->registrations.get(admitted[0].first.client_id);
    std::vector<task<item_outcome>> work;
    work.reserve(admitted.size());
    for (auto& [item, ticket] : admitted) work.push_back(run_one(kind, std::move(item), std::move(ticket), deadline));
    auto out = co_await mc::when_all(std::move(work));
    auto res = ctx.getResults().initResults(static_cast<unsigned>(out.size()));
    for (unsigned i = 0; i < out.size(); ++i) set_result(res[i], out[i]);
    co_return result<void>{};
  }

  task<result<void>> do_batch_read(BatchReadRemoteDataContext ctx) {
    return do_batch(ctx, op::read, [](ReadItem::Reader it) { return read_item(it, to_remote(it.getDest())); });
  }

  task<result<void>> do_batch_write(BatchWriteRemoteDataContext ctx) {
    return do_batch(ctx, op::write, [](WriteItem::Reader it) { return read_item(it, to_remote(it.getSrc())); });
  }

  task<result<void>> do_remove(RemoveContext ctx) {
    std::string key = ctx.getParams().getKey();
    auto r = co_await s_->dm.remove(key);
    ctx.getResults().initResult().setCode(r ? 0 : r.error().value());
    co_return result<void>{};
  }

  mc::rpc::connection_info conn_;
  std::shared_ptr<shared_state> s_;
  load load_;  // this connection's items in flight (serving thread only)
};

}  // namespace

client_service_options service_options_of(const client_options& o) {
  client_service_options s;
  s.master_address = o.master_server_address;
  s.master_timeout = o.rpc_timeout;
  s.limits = o.limits;
  return s;
}

std::shared_ptr<const client_service_counters> add_client_service(mc::rpc::server& server, data_manager& dm,
                                                                  client_service_options opts) {
  auto shared = std::make_shared<shared_state>(dm, std::move(opts));
  server.add_service(client_service_name, mc::rpc::make_connection_service<client_service_impl>(shared));
  return shared->counters;
}

}  // namespace mc::store
