// mc::store::client: the batch data path. Gets: local first, then one master
// lookup, keys grouped by owner, one batch RPC per owner (small values inline,
// the rest as one transfer batch on the owner), per-key fallback to the next
// replica. Puts: one write route, one batch RPC. Bytes in flight are capped.
#include "client_impl.hpp"

#include "mc/runtime/deadline.hpp"
#include "mc/runtime/when_all.hpp"

#include <map>

namespace mc::store {
namespace {
constexpr auto relaxed = std::memory_order_relaxed;
/// Keys per master lookup call.
constexpr std::size_t lookup_chunk = 4096;

template <class Span>
std::uint64_t room_of(const std::vector<Span>& pieces) {
  std::uint64_t n = 0;
  for (auto& p : pieces) n += p.size();
  return n;
}

/// Splits `items` into waves that fit one RPC: at most max_batch_items items,
/// at most `inline_budget` inline bytes and `transfer_cap` transferred bytes
/// (a single larger item forms a wave of its own).
template <class Item, class IsInline, class SizeOf>
std::vector<std::vector<Item*>> waves_of(const std::vector<Item*>& items, std::uint64_t inline_budget,
                                         std::uint64_t transfer_cap, IsInline is_inline, SizeOf size_of) {
  std::vector<std::vector<Item*>> out;
  std::uint64_t in_bytes = 0, tx_bytes = 0;
  for (auto* it : items) {
    const auto size = size_of(*it);
    const bool inl = is_inline(*it);
    bool full = out.empty() || out.back().size() >= max_batch_items;
    if (!full && inl && in_bytes + size > inline_budget) full = true;
    if (!full && !inl && tx_bytes > 0 && tx_bytes + size > transfer_cap) full = true;
    if (full) {
      out.emplace_back();
      in_bytes = tx_bytes = 0;
    }
    out.back().push_back(it);
    (inl ? in_bytes : tx_bytes) += size;
  }
  return out;
}

}  // namespace

struct client::impl::get_item {
  std::string key;
  std::vector<std::span<std::byte>> pieces;
  std::uint64_t room = 0;
  std::optional<mc::master::key_info> route;
  std::size_t replica = 0;  // index of the next replica to try
  bool no_inline = false;   // an owner refused to answer inline: use a descriptor
  bool stale = false;       // a replica did not have the value (or not at this size)
  bool done = false;
  result<std::size_t> out = fail(errc::object_not_found);
  boost::system::error_code last = make_error_code(errc::object_not_found);

  void finish(result<std::size_t> r) {
    out = std::move(r);
    done = true;
  }
  std::uint64_t size() const { return route ? route->size : 0; }
};

struct client::impl::put_item {
  std::string key;
  std::vector<std::span<const std::byte>> pieces;
  std::uint64_t size = 0;
  result<void> out = fail(errc::rpc_fail);
};

result<std::vector<mc::transfer::region>> client::impl::register_for(const std::vector<std::span<std::byte>>& pieces,
                                                                     std::uint64_t size,
                                                                     mc::transfer::region_access access) {
  std::vector<mc::transfer::region> regions;
  for (auto& p : pieces) {
    if (size == 0) break;
    auto n = static_cast<std::size_t>(std::min<std::uint64_t>(p.size(), size));
    if (n == 0) continue;
    auto r = engine->register_memory(p.data(), n, access);
    if (!r) return r.error();
    regions.push_back(std::move(*r));
    size -= n;
  }
  return regions;
}

task<std::vector<result<std::size_t>>> client::impl::get_many(std::vector<std::string> keys,
                                                              std::vector<std::vector<std::span<std::byte>>> pieces,
                                                              bool probe_local) {
  std::vector<result<std::size_t>> out;
  const auto n = keys.size();
  if (pieces.size() != n || n > opts.max_batch_keys) {
    out.assign(n, fail(errc::invalid_params));
    co_return out;
  }
  std::vector<get_item> items(n);
  std::vector<task<result<std::size_t>>> local;
  std::vector<get_item*> probing;
  for (std::size_t i = 0; i < n; ++i) {
    auto& it = items[i];
    it.key = std::move(keys[i]);
    it.pieces = std::move(pieces[i]);
    it.room = room_of(it.pieces);
    if (auto k = check_key(it.key); !k) it.finish(k.error());
    else if (it.pieces.size() > max_value_pieces) it.finish(fail(errc::invalid_params));
    else {
      if (probe_local) local.push_back(dm->get_parts(it.key, it.pieces));
      probing.push_back(&it);
    }
  }
  std::vector<result<std::size_t>> found;
  if (!probe_local) found.assign(probing.size(), fail(errc::object_not_found));
  else if (local.size() == 1) found.push_back(co_await std::move(local.front()));
  else found = co_await mc::when_all(std::move(local));
  std::vector<get_item*> remote;
  for (std::size_t k = 0; k < probing.size(); ++k) {
    auto& r = found[k];
    if (r || !mc::is(r.error(), errc::object_not_found)) {
      if (r) stats.local_hits.fetch_add(1, relaxed);
      probing[k]->finish(std::move(r));
    } else {
      remote.push_back(probing[k]);
    }
  }
  if (!remote.empty()) co_await get_remote_many(std::move(remote));
  out.reserve(n);
  for (auto& it : items) out.push_back(std::move(it.out));
  co_return out;
}

task<void> client::impl::fetch_routes(std::vector<get_item*>& items) {
  std::vector<get_item*> ask;
  for (auto* it : items) {
    if (it->route) continue;
    if (auto c = cached_route(it->key)) {
      stats.route_cache_hits.fetch_add(1, relaxed);
      it->route = std::move(*c);
    } else {
      ask.push_back(it);
    }
  }
  for (std::size_t at = 0; at < ask.size(); at += lookup_chunk) {
    auto end = std::min(ask.size(), at + lookup_chunk);
    std::vector<std::string> keys;
    for (auto k = at; k < end; ++k) keys.push_back(ask[k]->key);
    auto r = co_await master.lookup(std::move(keys));
    if (!r) stats.master_errors.fetch_add(1, relaxed);
    for (auto k = at; k < end; ++k) {
      auto* it = ask[k];
      if (!r) {
        it->finish(r.error());
        continue;
      }
      auto& one = (*r)[k - at];
      if (!one) {
        if (mc::is(one.error(), errc::object_not_found)) stats.misses.fetch_add(1, relaxed);
        else stats.master_errors.fetch_add(1, relaxed);
        it->finish(one.error());
        continue;
      }
      cache_route(it->key, *one);
      it->route = std::move(*one);
    }
  }
}

task<void> client::impl::get_remote_many(std::vector<get_item*> items) {
  for (int round = 0; round < 2 && !items.empty(); ++round) {
    co_await fetch_routes(items);
    for (auto* it : items)
      if (!it->done && it->size() > it->room) it->finish(fail(errc::buffer_overflow));
    // Attempts: every pending key goes to its next replica, grouped by owner.
    for (;;) {
      std::map<std::string, std::vector<get_item*>> by_owner;
      for (auto* it : items) {
        if (it->done) continue;
        auto& reps = it->route->replicas;
        while (it->replica < reps.size() && reps[it->replica].client_id == id) ++it->replica;  // ours: stale
        if (it->replica < reps.size()) by_owner[reps[it->replica].rpc_endpoint].push_back(it);
      }
      if (by_owner.empty()) break;
      std::vector<task<result<void>>> work;
      for (auto& [endpoint, group] : by_owner)
        work.push_back([](impl* self, std::string ep, std::vector<get_item*> g) -> task<result<void>> {
          co_await self->read_from_owner(std::move(ep), std::move(g));
          co_return result<void>{};
        }(this, endpoint, std::move(group)));
      (void)co_await mc::when_all(std::move(work));
    }
    // Every replica failed: refresh a stale route once, else report.
    std::vector<get_item*> again;
    for (auto* it : items) {
      if (it->done) continue;
      forget_route(it->key);
      if (round == 0 && it->stale) {
        it->route.reset();
        it->replica = 0;
        it->stale = false;
        again.push_back(it);
      } else {
        it->finish(it->last);
      }
    }
    items = std::move(again);
  }
  for (auto* it : items)
    if (!it->done) it->finish(it->last);
}

task<void> client::impl::read_from_owner(std::string endpoint, std::vector<get_item*> items) {
  const auto threshold = opts.inline_threshold;
  auto waves = waves_of(
      items, opts.limits.max_inline_reply_bytes, opts.max_inflight_bytes,
      [threshold](const get_item& it) { return !it.no_inline && it.size() <= threshold; },
      [](const get_item& it) { return it.size(); });
  if (waves.size() == 1) {
    co_await read_wave(std::move(endpoint), std::move(waves.front()));
    co_return;
  }
  std::vector<task<result<void>>> work;
  for (auto& w : waves)
    work.push_back([](impl* self, std::string ep, std::vector<get_item*> g) -> task<result<void>> {
      co_await self->read_wave(std::move(ep), std::move(g));
      co_return result<void>{};
    }(this, endpoint, std::move(w)));
  (void)co_await mc::when_all(std::move(work));
}

task<void> client::impl::read_wave(std::string endpoint, std::vector<get_item*> items) {
  const auto threshold = opts.inline_threshold;
  auto failed = [&](get_item* it, const boost::system::error_code& ec) {
    if (!worth_another_replica(ec)) {
      it->finish(ec);
      return;
    }
    it->last = ec;
    ++it->replica;
    stats.fallbacks.fetch_add(1, relaxed);
    if (mc::is(ec, errc::object_not_found) || mc::is(ec, errc::invalid_params)) it->stale = true;
    if (mc::is(ec, errc::invalid_params)) it->no_inline = true;
  };
  std::uint64_t transfer_bytes = 0;
  std::vector<peer_read> reads;
  std::vector<get_item*> sent;
  // Registrations live until the RPC has returned (or failed): afterwards
  // their tokens are gone and no late transfer can land in caller memory.
  std::vector<std::vector<mc::transfer::region>> regions;
  for (auto* it : items) {
    peer_read r;
    r.key = it->key;
    const auto size = it->size();
    if (!it->no_inline && threshold > 0 && size <= threshold) {
      r.inline_max = std::min(it->room, threshold);
      r.local = it->pieces;
    } else {
      auto regs = register_for(it->pieces, size, mc::transfer::region_access::remote_write);
      if (!regs) {
        it->finish(regs.error());
        continue;
      }
      for (auto& g : *regs) r.dest.push_back(g.describe());
      regions.push_back(std::move(*regs));
      transfer_bytes += size;
    }
    reads.push_back(std::move(r));
    sent.push_back(it);
  }
  if (sent.empty()) co_return;
  // Waiting for room counts against the call's deadline (rpc_timeout).
  auto room = co_await mc::with_deadline(inflight->acquire(transfer_bytes), opts.rpc_timeout);
  if (!room) {
    for (auto* it : sent) it->finish(room.error());
    co_return;
  }
  stats.batch_rpcs.fetch_add(1, relaxed);
  auto r = co_await peers.read_batch(std::move(endpoint), std::move(reads));
  regions.clear();
  if (!r) {
    for (auto* it : sent) failed(it, r.error());
    co_return;
  }
  for (std::size_t k = 0; k < sent.size(); ++k) {
    auto& one = (*r)[k];
    if (!one.value) {
      failed(sent[k], one.value.error());
      continue;
    }
    stats.remote_hits.fetch_add(1, relaxed);
    stats.remote_read_bytes.fetch_add(*one.value, relaxed);
    if (one.inlined) stats.inline_reads.fetch_add(1, relaxed);
    sent[k]->finish(static_cast<std::size_t>(*one.value));
  }
}

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
    if (auto k = check_key(it.key); !k) it.out = k;
    else if (it.size == 0 || it.pieces.size() > max_value_pieces) it.out = fail(errc::invalid_params);
    else {
      valid.push_back(&it);
      total += it.size;
    }
  }
  std::string endpoint = popts.target;
  if (!valid.empty() && endpoint.empty()) {
    auto r = co_await master.write_route(total, id);  // one route for the whole batch
    if (!r) {
      for (auto* it : valid) it->out = r.error();
      valid.clear();
    } else {
      endpoint = r->rpc_endpoint;
    }
  }
  if (!valid.empty()) {
    const auto threshold = opts.inline_threshold;
    auto waves = waves_of(
        valid, opts.limits.max_inline_reply_bytes, opts.max_inflight_bytes,
        [threshold](const put_item& it) { return it.size <= threshold; }, [](const put_item& it) { return it.size; });
    std::vector<task<result<void>>> work;
    for (auto& w : waves)
      work.push_back([](impl* self, std::string ep, std::vector<put_item*> g) -> task<result<void>> {
        co_await self->write_wave(std::move(ep), std::move(g));
        co_return result<void>{};
      }(this, endpoint, std::move(w)));
    (void)co_await mc::when_all(std::move(work));
  }
  out.reserve(n);
  for (auto& it : items) out.push_back(std::move(it.out));
  co_return out;
}

task<void> client::impl::write_wave(std::string endpoint, std::vector<put_item*> items) {
  const auto threshold = opts.inline_threshold;
  std::uint64_t transfer_bytes = 0;
  std::vector<peer_write> writes;
  std::vector<put_item*> sent;
  std::vector<std::vector<mc::transfer::region>> regions;  // until the RPC returned
  for (auto* it : items) {
    peer_write w;
    w.key = it->key;
    if (it->size <= threshold) {
      w.data = it->pieces;
    } else {
      // The owner READs the value out of our memory: registered for this call only.
      std::vector<std::span<std::byte>> mutable_pieces;
      for (auto& p : it->pieces) mutable_pieces.emplace_back(const_cast<std::byte*>(p.data()), p.size());
      auto regs = register_for(mutable_pieces, it->size, mc::transfer::region_access::remote_read);
      if (!regs) {
        it->out = regs.error();
        continue;
      }
      for (auto& g : *regs) w.src.push_back(g.describe());
      regions.push_back(std::move(*regs));
      transfer_bytes += it->size;
    }
    writes.push_back(std::move(w));
    sent.push_back(it);
  }
  if (sent.empty()) co_return;
  auto room = co_await mc::with_deadline(inflight->acquire(transfer_bytes), opts.rpc_timeout);
  if (!room) {
    for (auto* it : sent) it->out = room.error();
    co_return;
  }
  stats.batch_rpcs.fetch_add(1, relaxed);
  auto r = co_await peers.write_batch(std::move(endpoint), std::move(writes));
  regions.clear();
  for (std::size_t k = 0; k < sent.size(); ++k) {
    if (!r) {
      sent[k]->out = r.error();
      continue;
    }
    sent[k]->out = std::move((*r)[k]);
    if (sent[k]->out && sent[k]->size <= threshold) stats.inline_writes.fetch_add(1, relaxed);
  }
}

// ---- the public batch forms ----------------------------------------------------

task<std::vector<result<std::size_t>>> client::batch_get_parts(std::vector<std::string> keys,
                                                               std::vector<std::vector<std::span<std::byte>>> pieces) {
  impl_->stats.batch_calls.fetch_add(1, relaxed);
  impl_->stats.batch_keys.fetch_add(keys.size(), relaxed);
  co_return co_await impl_->get_many(std::move(keys), std::move(pieces));
}

task<std::vector<result<std::size_t>>> client::batch_get(std::vector<std::string> keys,
                                                         std::vector<std::span<std::byte>> bufs) {
  std::vector<std::vector<std::span<std::byte>>> pieces;
  pieces.reserve(bufs.size());
  for (auto& b : bufs) pieces.emplace_back(1, b);
  co_return co_await batch_get_parts(std::move(keys), std::move(pieces));
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

task<result<std::size_t>> client::get_parts(std::string key, std::vector<std::span<std::byte>> pieces) {
  std::vector<std::string> keys;
  keys.push_back(std::move(key));
  std::vector<std::vector<std::span<std::byte>>> all;
  all.push_back(std::move(pieces));
  auto r = co_await impl_->get_many(std::move(keys), std::move(all));
  co_return std::move(r.front());
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

task<std::vector<result<bool>>> client::batch_exists(std::vector<std::string> keys) {
  auto error = [](boost::system::error_code ec) { return result<bool>(boost::system::in_place_error, ec); };
  auto& p = *impl_;
  p.stats.batch_calls.fetch_add(1, relaxed);
  p.stats.batch_keys.fetch_add(keys.size(), relaxed);
  std::vector<result<bool>> out(keys.size(), result<bool>(false));
  if (keys.size() > p.opts.max_batch_keys) {
    out.assign(keys.size(), error(make_error_code(errc::invalid_params)));
    co_return out;
  }
  std::vector<std::size_t> ask;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (auto k = check_key(keys[i]); !k) out[i] = error(k.error());
    else if (p.dm->exists(keys[i])) out[i] = true;
    else ask.push_back(i);
  }
  for (std::size_t at = 0; at < ask.size(); at += lookup_chunk) {
    auto end = std::min(ask.size(), at + lookup_chunk);
    std::vector<std::string> batch;
    for (auto k = at; k < end; ++k) batch.push_back(keys[ask[k]]);
    auto r = co_await p.master.lookup(std::move(batch));
    for (auto k = at; k < end; ++k) {
      auto& slot = out[ask[k]];
      if (!r) slot = error(r.error());
      else if (auto& one = (*r)[k - at]; one) slot = true;
      else if (mc::is(one.error(), errc::object_not_found)) slot = false;
      else slot = error(one.error());
    }
  }
  co_return out;
}

}  // namespace mc::store
