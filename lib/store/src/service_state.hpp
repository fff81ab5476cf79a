#pragma once
// What the ClientRpcService's connections share (registrations cache, loads
// per peer, admission), used by the RPC service (client_service.cpp) and by
// the small-value reads and writes that arrive as TransferEngine calls
// (client_service_calls.cpp). Internal to lib/store; thread-safety per class.
#include "mc/master/master_client.hpp"
#include "mc/runtime/async_semaphore.hpp"
#include "mc/store/client_service.hpp"
#include "mc/store/data_manager.hpp"
#include "mc/transfer/engine.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mc::store::detail {

using clock = std::chrono::steady_clock;

/// The master's registrations of requesters, cached briefly (bounded).
/// Thread-safe; shared by every serving thread.
class registration_cache {
 public:
  explicit registration_cache(const client_service_options& o)
      : master_(o.master ? *o.master
                         : mc::master::master_client(o.master_address, o.master_timeout, o.cluster_id,
                                                     mc::master::membership_lease_ttl, o.etcd_security)),
        enabled_(!o.master_address.empty()),
        ttl_(o.registration_ttl),
        max_(std::max<std::size_t>(o.registration_cache_max, 1)) {}

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
  shared_state(data_manager& d, client_service_options o)
      : dm(d), opts(std::move(o)), registrations(opts), serving(opts.limits.max_serving_bytes) {}
  data_manager& dm;
  client_service_options opts;
  registration_cache registrations;
  /// Transfer bytes this node moves for all requesters at once: items past
  /// it wait (within their deadline) instead of failing.
  async_semaphore serving;
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

/// Counts one item of `bytes` against a connection's load and its peer IP's
/// (the limits in service_limits); an empty admission when over either.
inline admission admit_on(shared_state& s, load& conn, const std::string& ip, std::uint64_t bytes) {
  auto& l = s.opts.limits;
  if (conn.keys + 1 > l.max_inflight_keys_per_connection || conn.bytes > l.max_inflight_bytes_per_connection ||
      bytes > l.max_inflight_bytes_per_connection - conn.bytes)
    return {};
  if (!s.peers.try_add(ip, bytes, l)) return {};
  ++conn.keys;
  conn.bytes += bytes;
  return admission(&conn, &s, &ip, bytes);
}

/// A request's timeout (0: the longest), within the service's bound.
inline mc::duration clamp_timeout(const shared_state& s, std::uint32_t ms) {
  auto asked = std::chrono::milliseconds(ms == 0 ? max_request_timeout_ms : ms);
  return std::min<mc::duration>(asked, s.opts.limits.max_request_timeout);
}

/// Serves a read call (small_read_wire.hpp) with `s`'s admission and
/// DataManager; errors: invalid_params (a malformed request, too little reply
/// room). Per-key errors travel inside the reply.
task<result<std::vector<std::byte>>> serve_read_call(std::shared_ptr<shared_state> s, mc::transfer::call_request q);

/// Serves a write call (small_write_wire.hpp) with `s`'s admission and
/// DataManager; errors: invalid_params (a malformed request, too little reply
/// room). Per-value errors travel inside the reply.
task<result<std::vector<std::byte>>> serve_write_call(std::shared_ptr<shared_state> s, mc::transfer::call_request q);

/// The service's call handler: a read or a write call by the request's first
/// byte; errors: invalid_params (an empty request, an unknown kind, and the
/// errors above).
task<result<std::vector<std::byte>>> serve_call(std::shared_ptr<shared_state> s, mc::transfer::call_request q);

}  // namespace mc::store::detail
