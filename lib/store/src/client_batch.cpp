// mc::store::client: the batch data path. Gets: local first, then one master
// lookup, keys grouped by owner, one batch RPC per owner (small values inline,
// the rest as one transfer batch on the owner), per-key fallback to the next
// replica. Puts: one write route, one batch RPC. Bytes in flight are capped.
#include "batch_util.hpp"
#include "client_impl.hpp"
#include "mc/rpc/auth.hpp"

#include "mc/runtime/deadline.hpp"
#include "mc/runtime/when_all.hpp"

#include <map>

namespace mc::store {
namespace {
using std::memory_order::relaxed;
/// Keys per master lookup call.
constexpr std::size_t lookup_chunk = 4096;
}  // namespace

using detail::room_of;
using detail::trimmed;
using detail::waves_of;

/// Reads of one key asked again of the same replica at the size it reported
/// (an overwrite changed the value's size since the route was taken).
constexpr int max_size_retries = 3;

struct client::impl::get_item {
  std::string key;
  std::vector<std::span<std::byte>> pieces;
  std::uint64_t room = 0;
  std::optional<mc::master::key_info> route;
  std::size_t replica = 0;  // index of the next replica to try
  bool no_inline = false;   // an owner refused to answer inline: use a descriptor
  bool stale = false;       // a replica did not have the value (or not at this size)
  bool resized = false;     // a replica held it at another size: an overwrite raced this get
  int size_retries = 0;     // reads asked again of the same replica at the size it reported
  bool done = false;
  result<std::size_t> out = fail(errc::object_not_found);
  boost::system::error_code last = make_error_code(errc::object_not_found);

  void finish(result<std::size_t> r) {
    out = std::move(r);
    done = true;
  }
  std::uint64_t size() const { return route ? route->size : 0; }
  /// Asked for inside the reply (no descriptor) at this inline threshold.
  bool inline_read(std::uint64_t threshold) const { return !no_inline && threshold > 0 && size() <= threshold; }
};

task<result<client::impl::wave_units>> client::impl::wave_room(std::size_t keys, std::uint64_t bytes) {
  // Keys first, then bytes (always in this order: no two waves can each hold
  // one and wait for the other). Waiting counts against rpc_timeout.
  auto k = co_await inflight_keys->acquire_for(keys, opts.rpc_timeout);
  if (!k) co_return k.error();
  auto b = co_await inflight->acquire_for(bytes, opts.rpc_timeout);
  if (!b) co_return b.error();
  co_return wave_units{std::move(*k), std::move(*b)};
}

std::uint64_t client::impl::transfer_cap() const noexcept {
  // On RDMA a wave also fits the bounce arena, so that large batches of
  // unregistered memory wait for slots rather than registering.
  if (bounce && rdma()) return std::min<std::uint64_t>(opts.max_inflight_bytes, bounce->capacity());
  return opts.max_inflight_bytes;
}

task<result<detail::bounce_lease>> client::impl::take_slots(const std::vector<std::uint64_t>& sizes,
                                                            std::vector<bool>& wants) {
  if (!bounce) co_return detail::bounce_lease{};
  auto n = detail::plan_slots(*bounce, sizes, wants);
  if (n == 0) co_return detail::bounce_lease{};
  // All of a wave's slots at once; waiting counts against rpc_timeout.
  co_return co_await bounce->acquire_slots(n, opts.rpc_timeout);
}

bool client::impl::needs_bounce(const std::vector<std::span<std::byte>>& pieces, std::uint64_t size,
                                mc::transfer::region_access access) const {
  if (!bounce || !rdma() || size > bounce->capacity()) return false;
  for (auto& p : trimmed(pieces, size))
    if (!engine->find_registration(p.data(), p.size(), access)) return true;
  return false;
}

result<client::impl::exposure> client::impl::expose(const std::vector<std::span<std::byte>>& pieces, std::uint64_t size,
                                                    mc::transfer::region_access access,
                                                    const std::vector<std::span<std::byte>>& slots,
                                                    bool allow_derived) {
  exposure e;
  const auto& use = slots.empty() ? pieces : slots;
  auto cut = trimmed(use, size);
  // Inside a long-lived registration (the caller's, or the bounce arena):
  // a derived token, no registration cost.
  if (allow_derived) {
    // Many pieces inside one registration (a vLLM block's layers): one
    // scatter registration, one token, instead of one per piece.
    if (cut.size() > 1) {
      auto r = engine->register_pieces_within(cut, access);
      if (r) {
        e.regions.push_back(std::move(*r));
        e.pieces = std::move(cut);
        e.derived = true;
        return e;
      }
      if (!mc::is(r.error(), errc::out_of_range)) return r.error();
      // Pieces in several registrations (or none): one by one below.
    }
    for (auto& p : cut) {
      auto r = engine->register_within(p.data(), p.size(), access);
      if (!r) {
        if (!mc::is(r.error(), errc::out_of_range) || !slots.empty()) return r.error();
        break;
      }
      e.regions.push_back(std::move(*r));
    }
    if (e.regions.size() == cut.size()) {
      e.derived = true;
      return e;
    }
    e.regions.clear();
  }
  // Not registered: a registration per piece for this request (TCP and
  // same-host: a registry insert, no system call; RDMA without the bounce
  // arena: ibv_reg_mr).
  for (auto& p : cut) {
    // Not derivable: a concurrent request over the same memory (the same
    // bytes put under two keys, the copies of a replicated put) must not
    // derive from it: this request's end revokes it.
    auto r = engine->register_memory(p.data(), p.size(), access, /*derivable=*/false);
    if (!r) return r.error();
    e.regions.push_back(std::move(*r));
  }
  return e;
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
  std::vector<get_item*> probing;  // keys this node holds: read here
  std::vector<get_item*> remote;
  for (std::size_t i = 0; i < n; ++i) {
    auto& it = items[i];
    it.key = std::move(keys[i]);
    it.pieces = std::move(pieces[i]);
    it.room = room_of(it.pieces);
    if (auto k = check_key(it.key); !k) {
      it.finish(k.error());
    } else if (it.pieces.size() > max_value_pieces) {
      it.finish(fail(errc::invalid_params));
    } else if (probe_local && dm->exists(it.key)) {
      // Only keys held here start a local read (a coroutine each); the
      // others go to their owners without one. A key removed in between
      // reads as not found below and is fetched remotely all the same.
      local.push_back(dm->get_parts(it.key, it.pieces));
      probing.push_back(&it);
    } else {
      remote.push_back(&it);
    }
  }
  std::vector<result<std::size_t>> found;
  if (local.size() == 1)
    found.push_back(co_await std::move(local.front()));
  else if (!local.empty())
    found = co_await mc::when_all(std::move(local));
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
    // A cached size above the caller's room may be stale (the value was
    // replaced by a smaller one on the same owner, which never invalidates
    // the route): ask the master rather than fail with buffer_overflow.
    if (auto c = cached_route(it->key); c && c->size <= it->room) {
      stats.route_cache_hits.fetch_add(1, relaxed);
      it->route = std::move(*c);
      spread(*it->route);
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
        if (mc::is(one.error(), errc::object_not_found))
          stats.misses.fetch_add(1, relaxed);
        else
          stats.master_errors.fetch_add(1, relaxed);
        it->finish(one.error());
        continue;
      }
      cache_route(it->key, *one);
      it->route = std::move(*one);
      spread(*it->route);
    }
  }
}

task<void> client::impl::get_remote_many(std::vector<get_item*> items) {
  // Round 0 reads along the (maybe cached) route; a key no replica had is
  // asked of the master once more. A key whose owner held it at another
  // size is being overwritten (the descriptor must match the value's size
  // exactly): it is asked again up to max_rounds - 1 times, so that a get
  // racing a writer that keeps changing the value's size rarely loses.
  constexpr int max_rounds = 4;
  for (int round = 0; round < max_rounds && !items.empty(); ++round) {
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
      if (by_owner.size() == 1) {  // one owner: no fan-out machinery
        auto& [endpoint, group] = *by_owner.begin();
        co_await read_from_owner(endpoint, std::move(group));
        continue;
      }
      std::vector<task<result<void>>> work;
      for (auto& [endpoint, group] : by_owner)
        work.push_back([](impl* self, std::string ep, std::vector<get_item*> g) -> task<result<void>> {
          co_await self->read_from_owner(std::move(ep), std::move(g));
          co_return result<void>{};
        }(this, endpoint, std::move(group)));
      (void)co_await mc::when_all(std::move(work));
    }
    // Every replica failed: refresh a stale route, else report.
    std::vector<get_item*> again;
    for (auto* it : items) {
      if (it->done) continue;
      forget_route(it->key);
      if (it->stale && (round == 0 || it->resized) && round + 1 < max_rounds) {
        it->route.reset();
        it->replica = 0;
        it->stale = false;
        it->resized = false;
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

bool client::impl::calls_to(const std::string& transfer_endpoint) {
  if (transfer_endpoint.empty() || mc::rpc::auth_enabled()) return false;
  std::lock_guard lk(no_calls_mu);
  auto it = no_calls.find(transfer_endpoint);
  if (it == no_calls.end()) return true;
  if (std::chrono::steady_clock::now() < it->second) return false;
  no_calls.erase(it);
  return true;
}

void client::impl::no_calls_to(const std::string& transfer_endpoint) {
  std::lock_guard lk(no_calls_mu);
  if (no_calls.size() >= max_no_calls) no_calls.clear();  // bounded; refilled on demand
  no_calls[transfer_endpoint] = std::chrono::steady_clock::now() + std::chrono::seconds(60);
}

task<void> client::impl::read_from_owner(std::string endpoint, std::vector<get_item*> items) {
  const auto threshold = opts.inline_threshold;
  auto waves = waves_of(
      items, wave_keys(), opts.limits.max_inline_reply_bytes, transfer_cap(),
      [threshold](const get_item& it) { return it.inline_read(threshold); },
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
  const auto access = mc::transfer::region_access::remote_write;
  auto failed = [&](get_item* it, const boost::system::error_code& ec) {
    if (!worth_another_replica(ec)) {
      it->finish(ec);
      return;
    }
    it->last = ec;
    ++it->replica;
    stats.fallbacks.fetch_add(1, relaxed);
    if (mc::is(ec, errc::object_not_found) || mc::is(ec, errc::invalid_params)) it->stale = true;
    if (mc::is(ec, errc::invalid_params)) it->no_inline = it->resized = true;
  };
  const std::string owner_transfer = items.front()->route->replicas[items.front()->replica].transfer_endpoint;
  // Which items are inline, which need bounce slots (RDMA, unregistered memory).
  std::vector<bool> inl(items.size()), bounced(items.size());
  std::vector<std::uint64_t> sizes(items.size());
  for (std::size_t k = 0; k < items.size(); ++k) {
    auto* it = items[k];
    sizes[k] = it->size();
    inl[k] = it->inline_read(threshold);
    bounced[k] = !inl[k] && needs_bounce(it->pieces, it->size(), access);
  }
  auto lease = co_await take_slots(sizes, bounced);  // released last: after any fence
  if (!lease) {
    for (std::size_t k = 0; k < items.size(); ++k)
      if (bounced[k]) items[k]->finish(lease.error());
  }
  std::uint64_t transfer_bytes = 0;
  bool derived = false;
  std::vector<peer_read> reads;
  std::vector<get_item*> sent;
  std::vector<std::vector<std::span<std::byte>>> slots_of;  // per sent item (empty: no bounce)
  // Registrations live until the RPC has returned (or failed): afterwards
  // their tokens are gone and no late transfer can land in caller memory.
  std::vector<exposure> exposed;
  std::size_t next_slot = 0;
  for (std::size_t k = 0; k < items.size(); ++k) {
    auto* it = items[k];
    if (it->done) continue;
    peer_read r;
    r.key = it->key;
    const auto size = it->size();
    std::vector<std::span<std::byte>> slots;
    if (inl[k]) {
      r.inline_max = std::min(it->room, threshold);
      r.local = it->pieces;
    } else {
      if (bounced[k]) slots = detail::carve_slots(*bounce, *lease, next_slot, size);
      auto e = expose(it->pieces, size, access, slots);
      if (!e) {
        it->finish(e.error());
        continue;
      }
      derived = derived || e->derived;
      e->describe(r.dest);
      exposed.push_back(std::move(*e));
      transfer_bytes += size;
    }
    reads.push_back(std::move(r));
    sent.push_back(it);
    slots_of.push_back(std::move(slots));
  }
  if (sent.empty()) co_return;
  auto room = co_await wave_room(sent.size(), transfer_bytes);
  if (!room) {
    for (auto* it : sent) it->finish(room.error());
    co_return;
  }
  stats.batch_rpcs.fetch_add(1, relaxed);
  // Inline answers only: one TransferEngine call (a TCP round trip, no Cap'n
  // Proto) where the owner serves them. The RPC when it does not (an older
  // node, authentication on) or its transfer port cannot be reached (the
  // call is never worse than the RPC; that owner's reads stay on the RPC
  // for a while).
  result<std::vector<peer_read_result>> r = fail(errc::unsupported);
  if (transfer_bytes == 0 && peer_client::call_eligible(reads) && calls_to(owner_transfer)) {
    r = co_await peers.read_batch_call(*engine, owner_transfer, reads);
    settle_call(r, stats.read_calls, owner_transfer);
  }
  if (!r && mc::is(r.error(), errc::unsupported)) r = co_await peers.read_batch(std::move(endpoint), std::move(reads));
  exposed.clear();  // every token of this request is revoked here
  if (!r) {
    // We give up while the owner may still be transferring: on RDMA a token
    // derived from a long-lived MR is not enough, fence the owner's queue
    // pairs before the memory (caller's or bounce slots) is reused.
    if (derived && rdma() && !owner_transfer.empty()) (void)co_await engine->fence(owner_transfer);
    for (auto* it : sent) failed(it, r.error());
    co_return;
  }
  for (std::size_t k = 0; k < sent.size(); ++k) {
    auto& one = (*r)[k];
    if (!one.value) {
      // The owner holds the value at another size (an overwrite raced this
      // get) that fits the caller's room: ask it again at that size (the
      // next attempt round), a few times, before asking the master.
      auto* it = sent[k];
      if (mc::is(one.value.error(), errc::invalid_params) && one.size_hint > 0 && one.size_hint != it->size() &&
          one.size_hint <= it->room && it->size_retries < max_size_retries) {
        ++it->size_retries;
        it->route->size = one.size_hint;
        it->no_inline = false;
        continue;
      }
      failed(it, one.value.error());
      continue;
    }
    if (!slots_of[k].empty()) {  // bounce slots -> the caller's pieces
      std::vector<std::span<const std::byte>> from;
      for (auto& s : trimmed(slots_of[k], *one.value)) from.emplace_back(s.data(), s.size());
      co_await detail::copy_pieces_chunked(std::move(from), sent[k]->pieces);
    }
    stats.remote_hits.fetch_add(1, relaxed);
    stats.remote_read_bytes.fetch_add(*one.value, relaxed);
    if (one.inlined) stats.inline_reads.fetch_add(1, relaxed);
    sent[k]->finish(static_cast<std::size_t>(*one.value));
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

task<result<std::size_t>> client::get_parts(std::string key, std::vector<std::span<std::byte>> pieces) {
  std::vector<std::string> keys;
  keys.push_back(std::move(key));
  std::vector<std::vector<std::span<std::byte>>> all;
  all.push_back(std::move(pieces));
  auto r = co_await impl_->get_many(std::move(keys), std::move(all));
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
    if (auto k = check_key(keys[i]); !k)
      out[i] = error(k.error());
    else if (p.dm->exists(keys[i]))
      out[i] = true;
    else
      ask.push_back(i);
  }
  for (std::size_t at = 0; at < ask.size(); at += lookup_chunk) {
    auto end = std::min(ask.size(), at + lookup_chunk);
    std::vector<std::string> batch;
    for (auto k = at; k < end; ++k) batch.push_back(keys[ask[k]]);
    auto r = co_await p.master.lookup(std::move(batch));
    for (auto k = at; k < end; ++k) {
      auto& slot = out[ask[k]];
      if (!r)
        slot = error(r.error());
      else if (auto& one = (*r)[k - at]; one)
        slot = true;
      else if (mc::is(one.error(), errc::object_not_found))
        slot = false;
      else
        slot = error(one.error());
    }
  }
  co_return out;
}

}  // namespace mc::store
