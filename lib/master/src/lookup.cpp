// Lookups: one key, or a batch grouped by shard with its memory accesses
// overlapped (a batched lookup is bound by two cache misses per key — the
// table slot, then the key's entry — not by computation).
#include "mc/master/metadata.hpp"
#include "metadata_state.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace mc::master {

result<key_info> metadata::lookup(std::string_view key) const {
  lookup_answer a;
  lookup_batch({&key, 1}, {&a, 1});
  if (a.error) return a.error;
  return std::move(a.info);
}

bool metadata::exists(std::string_view key) const { return lookup(key).has_value(); }

void metadata::lookup_batch(std::span<const std::string_view> keys, std::span<lookup_answer> out) const {
  if (out.size() < keys.size()) return;
  const auto now = clock::now();
  const std::size_t n = keys.size();
  constexpr auto none = std::numeric_limits<std::uint32_t>::max();

  // Where each key lives; invalid keys are answered at once.
  struct place {
    std::uint32_t shard = none;
    std::uint32_t hash = 0;
  };
  place single;
  std::vector<place> places;
  place* at = &single;
  if (n > 1) {
    places.resize(n);
    at = places.data();
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (auto r = check_key(keys[i]); !r) {
      out[i].error = r.error();
      continue;
    }
    auto [s, hash] = shard_index(keys[i]);
    at[i] = {static_cast<std::uint32_t>(s), hash};
  }

  // The answer of one key whose node is `node` (or nullptr); the caller
  // holds the shard's lock and clients_mu_ shared.
  auto answer = [&](std::size_t i, const shard::node* node) {
    auto& a = out[i];
    if (!node) {
      a.error = fail(errc::object_not_found);
      return;
    }
    a.info.size = node->size;
    std::size_t m = 0;
    for (std::size_t j = 0, cnt = node->count(); j < cnt; ++j) {
      const auto& h = node->at(j);
      if (!h.live) continue;
      const auto* c = slots_->slots[h.slot].client;
      if (!c || health_of(*c, now) != health::healthy) continue;
      if (m == a.info.replicas.size()) a.info.replicas.emplace_back();
      auto& r = a.info.replicas[m++];
      r.client_id.assign(c->info.client_id);
      r.rpc_endpoint.assign(c->info.rpc_endpoint);
      r.transfer_endpoint.assign(c->info.transfer_endpoint);
    }
    a.info.replicas.resize(m);
    a.error = m ? boost::system::error_code{} : fail(errc::object_not_found);
  };

  // One shard's keys (indexes into keys): under one hold of its lock, the
  // table slots of every key are prefetched, then the entries they point
  // to, then each key is resolved; both locks in the documented order.
  auto run_group = [&](std::size_t s, const std::uint32_t* idx, std::size_t count) {
    auto& sh = *shards_[s];
    std::lock_guard lk(sh.mu);
    const auto& t = sh.map;
    if (t.capacity() != 0 && count > 1) {
      for (std::size_t k = 0; k < count; ++k) {
        const auto slot = at[idx[k]].hash & t.mask();
        __builtin_prefetch(&t.slots[slot]);
        __builtin_prefetch(&t.tags[slot]);
      }
      for (std::size_t k = 0; k < count; ++k) {
        // The entry and its key bytes (after the 56-byte header).
        if (const auto* node = t.slots[at[idx[k]].hash & t.mask()]) {
          __builtin_prefetch(node);
          __builtin_prefetch(reinterpret_cast<const char*>(node) + 64);
        }
      }
    }
    std::shared_lock clk(clients_mu_);
    for (std::size_t k = 0; k < count; ++k) answer(idx[k], t.find(keys[idx[k]], at[idx[k]].hash));
  };

  if (n == 1) {
    const std::uint32_t zero = 0;
    if (single.shard != none) run_group(single.shard, &zero, 1);
    return;
  }
  // Counting sort of the valid keys by shard.
  std::vector<std::uint32_t> start(shards_.size() + 1, 0), order(n);
  for (std::size_t i = 0; i < n; ++i)
    if (at[i].shard != none) ++start[at[i].shard + 1];
  for (std::size_t s = 0; s < shards_.size(); ++s) start[s + 1] += start[s];
  std::vector<std::uint32_t> fill(start.begin(), start.end() - 1);
  for (std::size_t i = 0; i < n; ++i)
    if (at[i].shard != none) order[fill[at[i].shard]++] = static_cast<std::uint32_t>(i);
  for (std::size_t s = 0; s < shards_.size(); ++s)
    if (start[s + 1] > start[s]) run_group(s, order.data() + start[s], start[s + 1] - start[s]);
}

}  // namespace mc::master
