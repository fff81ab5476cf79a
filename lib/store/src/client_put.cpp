// mc::store::client: the batch put path — local puts group-committed at the
// master, remote puts with one write route and one batch RPC per target,
// small values inside the request, the rest through the TransferEngine.
#include "batch_util.hpp"
#include "client_impl.hpp"

#include "mc/runtime/deadline.hpp"
#include "mc/runtime/endpoint.hpp"
#include "mc/runtime/when_all.hpp"

#include <random>

namespace mc::store {
namespace {
using std::memory_order::relaxed;
}  // namespace

using detail::room_of;
using detail::trimmed;
using detail::waves_of;

struct client::impl::put_item {
  std::string key;
  std::vector<std::span<const std::byte>> pieces;
  std::uint64_t size = 0;
  result<void> out = fail(errc::rpc_fail);
  std::uint64_t tag = 0;  ///< replication tag of the copy (0 = a single copy)
  /// The put's version, taken when it started (see peer_write::version): a
  /// write that reaches its owner, or the master, after this put gave up
  /// cannot replace a value of a later put.
  std::uint64_t version = 0;
};

namespace {
/// A put item's own checks (before any work): its key, and a value of at
/// least one byte in at most max_value_pieces pieces.
result<void> check_put(const std::string& key, const std::vector<std::span<const std::byte>>& pieces,
                       std::uint64_t size) {
  if (auto k = check_key(key); !k) return k;
  if (size == 0 || pieces.size() > max_value_pieces) return fail(errc::invalid_params);
  return {};
}

/// A fresh replication group: random, 56 bits, never 0.
std::uint64_t new_group() {
  thread_local std::mt19937_64 gen{std::random_device{}()};
  for (;;)
    if (auto g = gen() >> 8; g != 0) return g;
}
}  // namespace

task<std::vector<result<void>>> client::impl::put_many(std::vector<std::string> keys,
                                                       std::vector<std::vector<std::span<const std::byte>>> values,
                                                       put_options popts) {
  const auto n = keys.size();
  std::vector<result<void>> out;
  if (values.size() != n || n > opts.max_batch_keys) {
    out.assign(n, fail(errc::invalid_params));
    co_return out;
  }
  for (auto& k : keys) forget_route(k);
  if (popts.replicas == 0 || popts.replicas > mc::master::replication::max_copies) {
    out.assign(n, fail(errc::invalid_params));
    co_return out;
  }
  if (popts.replicas > 1) co_return co_await put_replicated(std::move(keys), std::move(values), std::move(popts));
  if (popts.where == placement::local) {
    if (n == 1) {
      out.push_back(co_await dm->put_parts(keys[0], std::move(values[0])));
      co_return out;
    }
    std::vector<task<result<void>>> work;
    for (std::size_t i = 0; i < n; ++i) work.push_back(dm->put_parts(keys[i], std::move(values[i])));
    co_return co_await mc::when_all(std::move(work));
  }
  std::vector<put_item> items(n);
  std::vector<put_item*> valid;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    auto& it = items[i];
    it.key = std::move(keys[i]);
    it.pieces = std::move(values[i]);
    it.size = room_of(it.pieces);
    it.version = backend->issue_version();
    if (auto c = check_put(it.key, it.pieces, it.size); !c)
      it.out = c;
    else {
      valid.push_back(&it);
      total += it.size;
    }
  }
  if (!valid.empty() && !popts.target.empty()) {
    co_await write_waves(popts.target, {}, std::move(valid));
  } else if (!valid.empty()) {
    // A lease saves the master round trip; a put it routed that fails at the
    // owner (gone, full, overloaded) drops it and is retried once on a fresh
    // route, so a lease is never worse than asking the master.
    std::string endpoint, transfer_endpoint;
    bool leased = false;
    if (auto l = take_lease(total)) {
      std::tie(endpoint, transfer_endpoint) = std::move(*l);
      leased = true;
      stats.write_route_lease_hits.fetch_add(valid.size(), relaxed);
    } else if (auto r = co_await fresh_write_route(total); r) {
      endpoint = r->rpc_endpoint;
      transfer_endpoint = r->transfer_endpoint;
    } else {
      for (auto* it : valid) it->out = r.error();
      valid.clear();
    }
    if (!valid.empty()) co_await write_waves(endpoint, transfer_endpoint, valid);
    if (leased) {
      std::vector<put_item*> again;
      std::uint64_t again_bytes = 0;
      for (auto* it : valid)
        if (!it->out && worth_another_owner(it->out.error())) {
          again.push_back(it);
          again_bytes += it->size;
        }
      if (!again.empty()) {
        drop_lease(endpoint);
        stats.write_route_lease_drops.fetch_add(1, relaxed);
        auto r = co_await fresh_write_route(again_bytes);
        if (!r) {
          for (auto* it : again) it->out = r.error();
        } else {
          co_await write_waves(r->rpc_endpoint, r->transfer_endpoint, std::move(again));  // sets every item's out
        }
      }
    }
  }
  out.reserve(n);
  for (auto& it : items) out.push_back(std::move(it.out));
  co_return out;
}

task<std::vector<result<void>>> client::impl::put_replicated(
    std::vector<std::string> keys, std::vector<std::vector<std::span<const std::byte>>> values, put_options popts) {
  const auto n = keys.size();
  const auto copies = popts.replicas;
  const auto tag = mc::master::replication{new_group(), copies}.tag();
  // Which keys are valid, and their sizes (checked once for every copy).
  std::vector<result<void>> early(n, result<void>{});
  std::vector<std::uint64_t> sizes(n, 0), versions(n, 0);  // every copy of a key: one version
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    versions[i] = backend->issue_version();
    sizes[i] = room_of(values[i]);
    early[i] = check_put(keys[i], values[i], sizes[i]);
    if (early[i]) total += sizes[i];
  }
  // The copies' homes: this node or the target first, then the master's choice.
  const bool local_first = popts.target.empty() && popts.where == placement::local;
  std::vector<mc::master::replica> homes;
  if (!popts.target.empty()) {
    mc::master::replica t;
    t.rpc_endpoint = popts.target;
    homes.push_back(std::move(t));
  }
  const auto first = (local_first || !popts.target.empty()) ? 1u : 0u;
  result<void> route_error;
  if (copies > first && total > 0) {
    const auto want = copies - first + (popts.target.empty() ? 0u : 1u);  // the target may come back: one spare
    std::vector<std::string> exclude;
    exclude.push_back(id);
    auto r = co_await master.write_routes(total, want, std::move(exclude));
    if (!r) {
      route_error = r.error();
    } else {
      for (auto& rep : *r)
        if (rep.rpc_endpoint != popts.target && homes.size() + (local_first ? 1 : 0) < copies)
          homes.push_back(std::move(rep));
    }
  }
  // One set of items per copy, written concurrently.
  const auto remote_copies = homes.size();
  std::vector<std::vector<put_item>> per(remote_copies, std::vector<put_item>(n));
  std::vector<task<result<void>>> work;
  std::vector<task<result<void>>> local;
  for (std::size_t c = 0; c < remote_copies; ++c) {
    std::vector<put_item*> valid;
    for (std::size_t i = 0; i < n; ++i) {
      auto& it = per[c][i];
      it.key = keys[i];
      it.pieces = values[i];
      it.size = sizes[i];
      it.tag = tag;
      it.version = versions[i];
      if (early[i]) valid.push_back(&it);
    }
    if (valid.empty()) continue;
    work.push_back([](impl* self, mc::master::replica home, std::vector<put_item*> items) -> task<result<void>> {
      co_await self->write_waves(home.rpc_endpoint, home.transfer_endpoint, std::move(items));
      co_return result<void>{};
    }(this, homes[c], std::move(valid)));
  }
  std::vector<std::size_t> local_index;
  if (local_first)
    for (std::size_t i = 0; i < n; ++i)
      if (early[i]) {
        local.push_back(dm->put_parts(keys[i], values[i], tag, versions[i]));
        local_index.push_back(i);
      }
  auto local_done = co_await mc::when_all(std::move(local));
  (void)co_await mc::when_all(std::move(work));
  // Per key: every copy committed, some (incomplete: repaired later), or none.
  std::vector<std::uint32_t> committed(n, 0);
  std::vector<result<void>> first_error(n, result<void>{});
  auto count = [&](std::size_t i, const result<void>& r) {
    if (r)
      ++committed[i];
    else if (first_error[i])
      first_error[i] = r;
  };
  for (std::size_t k = 0; k < local_index.size(); ++k) count(local_index[k], local_done[k]);
  for (std::size_t c = 0; c < remote_copies; ++c)
    for (std::size_t i = 0; i < n; ++i)
      if (early[i]) count(i, per[c][i].out);
  std::vector<result<void>> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (!early[i]) {
      out[i] = early[i];
    } else if (committed[i] >= copies) {
      out[i] = result<void>{};
    } else if (committed[i] > 0) {
      stats.replication_incomplete.fetch_add(1, relaxed);
      out[i] = fail(errc::replication_incomplete);
    } else {
      out[i] = !first_error[i] ? first_error[i] : (!route_error ? route_error : fail(errc::no_available_handle));
    }
  }
  co_return out;
}

void client::impl::start_repairs(std::vector<mc::master::repair_task> tasks) {
  if (stopped || repairing.exchange(true)) return;  // one batch at a time
  auto h = background.try_enter();
  if (!h) {
    repairing = false;
    return;
  }
  boost::asio::co_spawn(
      rt.executor(0),
      [](impl* self, std::vector<mc::master::repair_task> ts, gate_holder g) -> task<void> {
        co_await self->run_repairs(std::move(ts));
        self->repairing = false;
        g.leave();
      }(this, std::move(tasks), std::move(h)),
      boost::asio::detached);
}

task<void> client::impl::run_repairs(std::vector<mc::master::repair_task> tasks) {
  for (auto& t : tasks) {
    if (stopped) co_return;
    auto r = co_await repair_one(t);
    (r ? stats.repairs_done : stats.repairs_failed).fetch_add(1, relaxed);
  }
}

task<result<void>> client::impl::repair_one(const mc::master::repair_task& t) {
  // Only the copy the master planned with: a value replaced since (another
  // version or group) is not a copy of that put.
  auto stamp = backend->stamp_of(t.key);
  if (!stamp) co_return stamp.error();
  if (stamp->version != t.version || stamp->tag != t.replication || t.replication == 0)
    co_return fail(errc::invalid_version);
  if (!mc::endpoint::parse(t.target.rpc_endpoint)) co_return fail(errc::invalid_params);  // from the master: checked
  // The value's bytes in our memory for the target to read (an SSD value is
  // read out first; the repair runs one value at a time).
  std::vector<std::byte> copy;
  {
    auto h = backend->get(t.key);
    if (!h) co_return h.error();
    copy.resize(h->size());
    if (auto r = co_await h->read_into(copy); !r) co_return r.error();
  }
  put_item item;
  item.key = t.key;
  item.pieces.emplace_back(copy.data(), copy.size());
  item.size = copy.size();
  item.tag = t.replication;
  item.version = t.version;  // the copy of that put: its version
  std::vector<put_item*> one{&item};
  co_await write_waves(t.target.rpc_endpoint, t.target.transfer_endpoint, std::move(one));
  co_return std::move(item.out);
}

std::optional<std::pair<std::string, std::string>> client::impl::take_lease(std::uint64_t bytes) {
  if (opts.write_route_lease.count() <= 0) return std::nullopt;
  auto leader = master.current_master();
  std::lock_guard lk(lease_mu);
  if (!lease) return std::nullopt;
  if (lease->master != leader || std::chrono::steady_clock::now() >= lease->expires) {
    lease.reset();
    return std::nullopt;
  }
  if (lease->bytes_left < bytes) return std::nullopt;
  lease->bytes_left -= bytes;
  return std::pair{lease->endpoint, lease->transfer_endpoint};
}

void client::impl::drop_lease(const std::string& endpoint) {
  std::lock_guard lk(lease_mu);
  if (lease && lease->endpoint == endpoint) lease.reset();
}

task<result<mc::master::replica>> client::impl::fresh_write_route(std::uint64_t bytes) {
  const auto want = opts.write_route_lease_bytes;
  stats.write_routes.fetch_add(1, relaxed);
  if (opts.write_route_lease.count() <= 0 || want <= bytes) co_return co_await master.write_route(bytes, id);
  const auto granted_at = std::chrono::steady_clock::now();
  auto leader = master.current_master();
  auto r = co_await master.write_route(want, id);
  if (!r) {
    // No node has room for a whole lease: route this batch alone.
    if (!mc::is(r.error(), errc::no_available_handle)) co_return r;
    stats.write_routes.fetch_add(1, relaxed);
    co_return co_await master.write_route(bytes, id);
  }
  if (leader == master.current_master()) {
    std::lock_guard lk(lease_mu);
    lease = route_lease{std::move(leader), r->rpc_endpoint, r->transfer_endpoint, want - bytes,
                        granted_at + opts.write_route_lease};
  }
  co_return r;
}

task<void> client::impl::write_waves(const std::string& endpoint, const std::string& transfer_endpoint,
                                     std::vector<put_item*> valid) {
  const auto threshold = opts.inline_threshold;
  auto waves = waves_of(
      valid, wave_keys(), opts.limits.max_inline_reply_bytes, transfer_cap(),
      [threshold](const put_item& it) { return it.size <= threshold; }, [](const put_item& it) { return it.size; });
  std::vector<task<result<void>>> work;
  for (auto& w : waves)
    work.push_back([](impl* self, std::string ep, std::string tx, std::vector<put_item*> g) -> task<result<void>> {
      co_await self->write_wave(std::move(ep), std::move(tx), std::move(g));
      co_return result<void>{};
    }(this, endpoint, transfer_endpoint, std::move(w)));
  (void)co_await mc::when_all(std::move(work));
}

task<void> client::impl::write_wave(std::string endpoint, std::string transfer_endpoint, std::vector<put_item*> items) {
  const auto threshold = opts.inline_threshold;
  const auto access = mc::transfer::region_access::remote_read;
  // On RDMA, derived tokens (and bounce slots) need a fence when we give up:
  // only with the target's transfer endpoint known; else a registration per call.
  const bool may_derive = !rdma() || !transfer_endpoint.empty();
  auto mutable_of = [](const std::vector<std::span<const std::byte>>& ps) {
    std::vector<std::span<std::byte>> out;
    for (auto& p : ps) out.emplace_back(const_cast<std::byte*>(p.data()), p.size());
    return out;
  };
  std::vector<bool> bounced(items.size());
  std::vector<std::uint64_t> sizes(items.size());
  for (std::size_t k = 0; k < items.size(); ++k) {
    auto* it = items[k];
    sizes[k] = it->size;
    bounced[k] = may_derive && it->size > threshold && needs_bounce(mutable_of(it->pieces), it->size, access);
  }
  auto lease = co_await take_slots(sizes, bounced);  // released last: after any fence
  if (!lease) {
    for (std::size_t k = 0; k < items.size(); ++k)
      if (bounced[k]) items[k]->out = lease.error();
  }
  std::uint64_t transfer_bytes = 0;
  bool derived = false;
  std::vector<peer_write> writes;
  std::vector<put_item*> sent;
  std::vector<exposure> exposed;  // until the RPC returned
  std::size_t next_slot = 0;
  for (std::size_t k = 0; k < items.size(); ++k) {
    auto* it = items[k];
    if (bounced[k] && !lease) continue;  // no slots: failed above
    peer_write w;
    w.key = it->key;
    w.replication = it->tag;
    w.version = it->version;
    if (it->size <= threshold) {
      w.data = it->pieces;
    } else {
      // The owner READs the value out of our memory (or bounce slots holding a copy).
      std::vector<std::span<std::byte>> slots;
      if (bounced[k]) {
        slots = detail::carve_slots(*bounce, *lease, next_slot, it->size);
        co_await detail::copy_pieces_chunked(it->pieces, slots);
      }
      auto e = expose(mutable_of(it->pieces), it->size, access, slots, may_derive);
      if (!e) {
        it->out = e.error();
        continue;
      }
      derived = derived || e->derived;
      e->describe(w.src);
      exposed.push_back(std::move(*e));
      transfer_bytes += it->size;
    }
    writes.push_back(std::move(w));
    sent.push_back(it);
  }
  if (sent.empty()) co_return;
  auto room = co_await wave_room(sent.size(), transfer_bytes);
  if (!room) {
    for (auto* it : sent) it->out = room.error();
    co_return;
  }
  stats.batch_rpcs.fetch_add(1, relaxed);
  // Inline values only: TransferEngine calls (a TCP round trip, no Cap'n
  // Proto) where the owner serves them; the RPC when it does not or its
  // transfer port cannot be reached (as for reads, see read_wave). A call
  // that failed whole may have stored some values: the RPC sends them again
  // with the same versions, which the owner and the master take as the same
  // copy (idempotent).
  result<std::vector<result<void>>> r = fail(errc::unsupported);
  if (transfer_bytes == 0 && peer_client::write_call_eligible(writes) && calls_to(transfer_endpoint)) {
    r = co_await peers.write_batch_call(*engine, transfer_endpoint, writes);
    settle_call(r, stats.write_calls, transfer_endpoint);
  }
  if (!r && mc::is(r.error(), errc::unsupported))
    r = co_await peers.write_batch(std::move(endpoint), std::move(writes));
  exposed.clear();
  if (!r && derived && rdma() && !transfer_endpoint.empty()) (void)co_await engine->fence(transfer_endpoint);
  for (std::size_t k = 0; k < sent.size(); ++k) {
    if (!r) {
      sent[k]->out = r.error();
      continue;
    }
    sent[k]->out = std::move((*r)[k]);
    if (sent[k]->out && sent[k]->size <= threshold) stats.inline_writes.fetch_add(1, relaxed);
  }
}

task<std::vector<result<void>>> client::batch_put_parts(std::vector<std::string> keys,
                                                        std::vector<std::vector<std::span<const std::byte>>> values,
                                                        put_options opts) {
  impl_->stats.batch_calls.fetch_add(1, relaxed);
  impl_->stats.batch_keys.fetch_add(keys.size(), relaxed);
  co_return co_await impl_->put_many(std::move(keys), std::move(values), std::move(opts));
}

task<std::vector<result<void>>> client::batch_put(std::vector<std::string> keys,
                                                  std::vector<std::span<const std::byte>> values, put_options opts) {
  std::vector<std::vector<std::span<const std::byte>>> pieces;
  pieces.reserve(values.size());
  for (auto& v : values) pieces.emplace_back(1, v);
  co_return co_await batch_put_parts(std::move(keys), std::move(pieces), std::move(opts));
}

task<result<void>> client::put_parts(std::string key, std::vector<std::span<const std::byte>> pieces,
                                     put_options opts) {
  std::vector<std::string> keys;
  keys.push_back(std::move(key));
  std::vector<std::vector<std::span<const std::byte>>> all;
  all.push_back(std::move(pieces));
  auto r = co_await impl_->put_many(std::move(keys), std::move(all), std::move(opts));
  co_return std::move(r.front());
}

}  // namespace mc::store
