// The node side of the attach service: gets (zero-copy from the tiers, or
// staged when another node holds the key), puts, exists, remove, size.
#include "attach_core.hpp"

#include "mc/runtime/when_all.hpp"
#include "mc/store/client.hpp"
#include "mc/transfer/engine.hpp"

#include <algorithm>
#include <limits>
#include <memory>

namespace mc::store::detail {

remote_pieces prefix_of(const remote_pieces& pieces, std::uint64_t size) {
  remote_pieces out;
  for (auto& p : pieces) {
    if (size == 0) break;
    auto part = p;
    part.length = std::min(p.length, size);
    size -= part.length;
    out.push_back(std::move(part));
  }
  return out;
}

attach_core::attach_core(client& node, attach_server_options opts)
    : node_(node),
      opts_(std::move(opts)),
      keys_(opts_.max_inflight_keys),
      bytes_(opts_.max_inflight_bytes),
      staging_(opts_.max_staging_bytes) {}

const std::string& attach_core::node_id() const noexcept { return node_.id(); }

task<result<semaphore_units>> attach_core::admit_keys(std::uint64_t keys, time_point deadline) {
  co_return co_await keys_.acquire_for(keys, mc::time_left(deadline));
}

task<std::vector<result<std::uint64_t>>> attach_core::get(std::vector<attach_item> items, time_point deadline) {
  const auto n = items.size();
  get_keys_.fetch_add(n, std::memory_order_relaxed);
  std::vector<result<std::uint64_t>> out(n, fail(errc::object_not_found));
  std::vector<std::size_t> todo, remote;
  for (std::size_t i = 0; i < n; ++i) {
    if (items[i].bad.has_error())
      out[i] = items[i].bad.error();
    else
      todo.push_back(i);
  }
  auto& dm = node_.data();
  // Keys held here: their exact size is known, so the attacher's pieces are
  // trimmed to it and the value goes from the tier straight into them. A
  // value replaced by one of another size in between (invalid_params from
  // read_remote_batch) is tried once more.
  for (int pass = 0; pass < 2 && !todo.empty(); ++pass) {
    std::vector<remote_read_item> batch;
    std::vector<std::size_t> index, again;
    std::uint64_t bytes = 0;
    for (auto i : todo) {
      auto size = dm.size_of(items[i].key);
      if (!size) {
        remote.push_back(i);
        continue;
      }
      if (*size > items[i].room) {
        out[i] = fail(errc::buffer_overflow);
        continue;
      }
      batch.push_back({items[i].key, prefix_of(items[i].pieces, *size), 0});
      index.push_back(i);
      bytes += *size;
    }
    if (batch.empty()) break;
    auto room = co_await bytes_.acquire_for(bytes, mc::time_left(deadline));
    if (!room) {
      for (auto i : index) out[i] = room.error();
      break;
    }
    auto res = co_await dm.read_remote_batch(std::move(batch), mc::time_left(deadline), 0, 0);
    for (std::size_t k = 0; k < res.size(); ++k) {
      auto i = index[k];
      auto& v = res[k].value;
      if (v)
        out[i] = *v;
      else if (mc::is(v.error(), errc::object_not_found))
        remote.push_back(i);  // removed meanwhile
      else if (mc::is(v.error(), errc::invalid_params) && pass == 0)
        again.push_back(i);
      else
        out[i] = v.error();
    }
    todo = std::move(again);
  }
  if (!remote.empty()) co_await get_staged(items, std::move(remote), out, deadline);
  co_return out;
}

task<void> attach_core::get_staged(std::vector<attach_item>& items, std::vector<std::size_t> which,
                                   std::vector<result<std::uint64_t>>& out, time_point deadline) {
  // Each item stages min(its room, the staging bound) bytes (at least 1, so
  // that a value is found even for a caller with no room: it then gets
  // buffer_overflow). Groups stay within the staging bound; groups run one
  // after the other, each with one client batch and one transfer batch.
  const auto cap = std::max<std::uint64_t>(opts_.max_staging_bytes, 1);
  // A large room says little about the value: ask the value's size first
  // (one master lookup per such key, all at once) and stage a little more
  // than that instead (room for a value replaced meanwhile by a larger one).
  constexpr std::uint64_t ask_above = std::uint64_t{4} << 20;
  std::vector<std::uint64_t> want(which.size());
  std::vector<task<result<object_info>>> asks;
  std::vector<std::size_t> asked;
  for (std::size_t k = 0; k < which.size(); ++k) {
    want[k] = items[which[k]].room;
    if (want[k] <= ask_above) continue;
    asks.push_back(node_.query(items[which[k]].key));
    asked.push_back(k);
  }
  auto infos = co_await mc::when_all(std::move(asks));
  for (std::size_t j = 0; j < infos.size(); ++j) {
    auto k = asked[j];
    auto& item = items[which[k]];
    if (!infos[j])
      out[which[k]] = infos[j].error();
    else if (infos[j]->size > item.room)
      out[which[k]] = fail(errc::buffer_overflow);
    else {
      want[k] = std::min(item.room, std::max(infos[j]->size * 2, ask_above));
      continue;
    }
    want[k] = 0;  // decided
  }
  std::vector<std::size_t> group;
  std::vector<std::uint64_t> stage;
  std::uint64_t total = 0;
  for (std::size_t k = 0; k < which.size(); ++k) {
    if (items[which[k]].room > 0 && want[k] == 0) continue;
    auto s = std::clamp<std::uint64_t>(want[k], 1, cap);
    if (total + s > cap && !group.empty()) {
      co_await stage_group(items, std::move(group), std::move(stage), out, deadline);
      group = {};
      stage = {};
      total = 0;
    }
    group.push_back(which[k]);
    stage.push_back(s);
    total += s;
  }
  if (!group.empty()) co_await stage_group(items, std::move(group), std::move(stage), out, deadline);
  // A value replaced by a larger one between the size query and the read
  // overflowed our staging, not the caller's room (too_large above): once
  // more, each such key staged at the caller's whole room (within the bound).
  for (auto i : which) {
    if (out[i] || !mc::is(out[i].error(), errc::too_large) || items[i].room > cap) continue;
    std::vector<std::size_t> one(1, i);
    std::vector<std::uint64_t> whole(1, items[i].room);
    co_await stage_group(items, std::move(one), std::move(whole), out, deadline);
  }
}

task<void> attach_core::stage_group(std::vector<attach_item>& items, std::vector<std::size_t> group,
                                    std::vector<std::uint64_t> stage, std::vector<result<std::uint64_t>>& out,
                                    time_point deadline) {
  std::uint64_t total = 0;
  for (auto s : stage) total += s;
  auto units = co_await staging_.acquire_for(total, mc::time_left(deadline));
  if (!units) {
    for (auto i : group) out[i] = units.error();
    co_return;
  }
  staged_gets_.fetch_add(group.size(), std::memory_order_relaxed);
  std::vector<std::unique_ptr<std::byte[]>> bufs;
  std::vector<std::string> keys;
  std::vector<std::vector<std::span<std::byte>>> pieces;
  for (std::size_t k = 0; k < group.size(); ++k) {
    bufs.push_back(std::make_unique_for_overwrite<std::byte[]>(stage[k]));
    keys.push_back(items[group[k]].key);
    pieces.push_back({std::span<std::byte>(bufs.back().get(), stage[k])});
  }
  auto got = co_await node_.batch_get_parts(std::move(keys), std::move(pieces));
  std::vector<mc::transfer::request> reqs;
  std::vector<std::size_t> owner;
  std::uint64_t bytes = 0;
  for (std::size_t k = 0; k < group.size(); ++k) {
    auto i = group[k];
    auto& item = items[i];
    if (!got[k]) {
      // Our staging was too small, not the caller's buffer: say so.
      bool ours = mc::is(got[k].error(), errc::buffer_overflow) && item.room > stage[k];
      out[i] = ours ? fail(errc::too_large) : got[k].error();
      continue;
    }
    auto size = static_cast<std::uint64_t>(*got[k]);
    if (size > item.room || size > stage[k]) {
      out[i] = fail(errc::buffer_overflow);
      continue;
    }
    std::uint64_t off = 0;
    for (auto& p : prefix_of(item.pieces, size)) {
      reqs.push_back(mc::transfer::request::make_write({bufs[k].get() + off, p.length}, p));
      owner.push_back(i);
      off += p.length;
    }
    bytes += size;
    out[i] = size;
  }
  if (reqs.empty()) co_return;
  auto room = co_await bytes_.acquire_for(bytes, mc::time_left(deadline));
  if (!room) {
    for (auto i : owner) out[i] = room.error();
    co_return;
  }
  auto rs = co_await node_.engine().batch(std::move(reqs), mc::time_left(deadline));
  for (std::size_t k = 0; k < rs.size(); ++k)
    if (!rs[k] && out[owner[k]]) out[owner[k]] = rs[k].error();
}

task<std::vector<result<void>>> attach_core::put(std::vector<attach_item> items, time_point deadline) {
  const auto n = items.size();
  put_keys_.fetch_add(n, std::memory_order_relaxed);
  std::vector<result<void>> out(n);
  constexpr auto max = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t bytes = 0;
  for (auto& it : items)  // saturating: rooms are the attacher's claims
    if (!it.bad.has_error()) bytes = it.room > max - bytes ? max : bytes + it.room;
  auto room = co_await bytes_.acquire_for(bytes, mc::time_left(deadline));
  std::vector<remote_write_item> batch;
  std::vector<std::size_t> index;
  for (std::size_t i = 0; i < n; ++i) {
    if (items[i].bad.has_error())
      out[i] = items[i].bad;
    else if (!room)
      out[i] = room.error();
    else {
      batch.push_back({std::move(items[i].key), std::move(items[i].pieces)});
      index.push_back(i);
    }
  }
  if (batch.empty()) co_return out;
  auto rs = co_await node_.data().write_remote_batch(std::move(batch), mc::time_left(deadline));
  for (std::size_t k = 0; k < rs.size(); ++k) out[index[k]] = std::move(rs[k]);
  co_return out;
}

task<std::vector<result<bool>>> attach_core::exists(std::vector<std::string> keys) {
  co_return co_await node_.batch_exists(std::move(keys));
}

task<result<void>> attach_core::remove(std::string key) { co_return co_await node_.remove(std::move(key)); }

task<result<std::uint64_t>> attach_core::size_of(std::string key) {
  auto q = co_await node_.query(std::move(key));
  if (!q) co_return q.error();
  co_return q->size;
}

attach_server_stats attach_core::stats() const {
  constexpr auto r = std::memory_order_relaxed;
  attach_server_stats s;
  s.connections = connections.load(r);
  s.refused = refused.load(r);
  s.calls = calls.load(r);
  s.calls_in_flight = calls_in_flight.load(r);
  s.inflight_keys = keys_.capacity() - keys_.available();
  s.inflight_bytes = bytes_.capacity() - bytes_.available();
  s.staging_bytes = staging_.capacity() - staging_.available();
  s.put_keys = put_keys_.load(r);
  s.get_keys = get_keys_.load(r);
  s.staged_gets = staged_gets_.load(r);
  return s;
}

}  // namespace mc::store::detail
