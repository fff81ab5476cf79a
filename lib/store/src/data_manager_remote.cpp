// mc::store::data_manager: the remote side of the data path — the spec's
// ReadRemoteData / WriteRemoteData, batched, scatter-gather, inline.
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/when_all.hpp"
#include "mc/store/data_manager.hpp"
#include "mc/transfer/engine.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <limits>

namespace mc::store {
namespace {

using clock = std::chrono::steady_clock;

/// The sub-descriptors covering bytes [off, off + len) of a value laid over
/// `pieces` (the caller checked that the pieces cover the value).
remote_pieces slice(const remote_pieces& pieces, std::uint64_t off, std::uint64_t len) {
  remote_pieces out;
  std::uint64_t at = 0;
  for (auto& p : pieces) {
    if (len == 0) break;
    if (off >= at + p.length) {
      at += p.length;
      continue;
    }
    auto within = off - at;
    auto n = std::min(p.length - within, len);
    auto part = p;
    part.address += within;
    part.length = n;
    out.push_back(std::move(part));
    off += n;
    len -= n;
    at += p.length;
  }
  return out;
}

/// Moves `local` (the value's bytes [off, off + local.size())) to / from
/// the matching part of `pieces` as one engine call.
task<result<void>> move_range(mc::transfer::engine& engine, mc::transfer::op_kind op, std::span<std::byte> local,
                              const remote_pieces& pieces, std::uint64_t off, clock::time_point deadline) {
  auto parts = slice(pieces, off, local.size());
  if (parts.size() == 1) {
    if (op == mc::transfer::op_kind::write)
      co_return co_await engine.write(local, std::move(parts[0]), mc::time_left(deadline));
    co_return co_await engine.read(local, std::move(parts[0]), mc::time_left(deadline));
  }
  std::vector<mc::transfer::request> reqs;
  reqs.reserve(parts.size());
  std::size_t at = 0;
  for (auto& p : parts) {
    auto n = static_cast<std::size_t>(p.length);
    reqs.push_back({op, local.data() + at, n, std::move(p)});
    at += n;
  }
  auto rs = co_await engine.batch(std::move(reqs), mc::time_left(deadline));
  for (auto& r : rs)
    if (!r) co_return r;
  co_return result<void>{};
}

/// Pulls every request of a remote write batch in ONE engine batch; a
/// failed request fails its item (out[owner[k]]).
task<result<void>> pull_batch(mc::transfer::engine& e, std::vector<mc::transfer::request> reqs,
                              const std::vector<std::size_t>& owner, std::vector<result<void>>& out,
                              clock::time_point deadline) {
  auto rs = co_await e.batch(std::move(reqs), mc::time_left(deadline));
  for (std::size_t k = 0; k < rs.size(); ++k)
    if (!rs[k] && out[owner[k]]) out[owner[k]] = rs[k];
  co_return result<void>{};
}

/// Room for every piece of a batch in its one engine batch (a vLLM batch
/// has thousands: growing the vectors piece by piece cost ~1 ms per batch).
template <class Item>
void reserve_pieces(const std::vector<Item>& items, remote_pieces Item::*pieces,
                    std::vector<mc::transfer::request>& reqs, std::vector<std::size_t>& owner) {
  std::size_t n = 0;
  for (auto& it : items) n += std::min((it.*pieces).size(), max_value_pieces);
  reqs.reserve(n);
  owner.reserve(n);
}

bool valid_destination(const remote_pieces& pieces, std::uint64_t size) {
  if (pieces.empty() || pieces.size() > max_value_pieces) return false;
  for (auto& p : pieces)
    if (p.endpoint.empty()) return false;
  auto total = total_length(pieces);
  return total && *total == size;
}

}  // namespace

std::optional<std::uint64_t> total_length(const remote_pieces& pieces) noexcept {
  std::uint64_t total = 0;
  for (auto& p : pieces) {
    if (p.length == 0 || p.length > std::numeric_limits<std::uint64_t>::max() - total) return std::nullopt;
    total += p.length;
  }
  return total;
}

task<result<std::uint64_t>> data_manager::read_remote(const std::string& key, mc::transfer::remote_buffer dest,
                                                      mc::duration timeout, std::uint64_t* actual_size) {
  std::vector<remote_read_item> one(1);
  one[0].key = key;
  one[0].dest.push_back(std::move(dest));
  auto out = co_await read_remote_batch(std::move(one), timeout, 0, 0);
  if (actual_size) *actual_size = out[0].size;
  co_return std::move(out[0].value);
}

task<std::vector<remote_read_outcome>> data_manager::read_remote_batch(std::vector<remote_read_item> items,
                                                                       mc::duration timeout, std::uint64_t inline_limit,
                                                                       std::uint64_t inline_budget) {
  const auto start = clock::now();
  const auto deadline = start + timeout;
  std::vector<remote_read_outcome> out(items.size());
  std::vector<tiered::read_handle> pinned(items.size());
  std::vector<mc::transfer::request> dram;  // every DRAM value's pieces: one engine batch
  std::vector<std::size_t> dram_item;       // request -> item
  std::vector<std::size_t> staged;          // items streamed from another tier
  reserve_pieces(items, &remote_read_item::dest, dram, dram_item);
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto& it = items[i];
    auto& o = out[i];
    // Steps 2/3: the tier's handle pins the value; the shared key lock is
    // held only to take it (never across the transfer).
    auto h = co_await pin(it.key);
    if (!h) {
      o.value = h.error();
      continue;
    }
    o.size = h->size();
    if (it.inline_max > 0 && o.size <= it.inline_max && o.size <= inline_limit && o.size <= inline_budget) {
      inline_budget -= o.size;
      o.value = o.size;
      o.inline_value = std::move(*h);
      continue;
    }
    if (!valid_destination(it.dest, o.size)) {
      o.value = fail(errc::invalid_params);
      continue;
    }
    o.value = o.size;  // until its transfer fails
    if (h->tier() == tiered::tier_type::dram) {
      // Step 5: TransferEngine WRITE straight from the tier into the requester.
      auto bytes = h->data();
      std::uint64_t off = 0;
      for (auto& p : it.dest) {
        dram.push_back(mc::transfer::request::make_write(bytes.subspan(off, p.length), p));
        dram_item.push_back(i);
        off += p.length;
      }
    } else {
      staged.push_back(i);  // step 4: through DRAM staging buffers
    }
    pinned[i] = std::move(*h);
  }

  const auto prepared = clock::now();
  std::vector<task<result<void>>> work;
  if (!dram.empty()) {
    work.push_back([](mc::transfer::engine& e, std::vector<mc::transfer::request> reqs,
                      const std::vector<std::size_t>& owner, std::vector<remote_read_outcome>& out,
                      clock::time_point deadline) -> task<result<void>> {
      auto rs = co_await e.batch(std::move(reqs), mc::time_left(deadline));
      for (std::size_t k = 0; k < rs.size(); ++k)
        if (!rs[k] && out[owner[k]].value) out[owner[k]].value = rs[k].error();
      co_return result<void>{};
    }(engine_, std::move(dram), dram_item, out, deadline));
  }
  for (auto i : staged) work.push_back(send_staged(pinned[i], items[i].dest, deadline));
  auto results = co_await mc::when_all(std::move(work));
  std::size_t r = dram_item.empty() ? 0 : 1;
  for (auto i : staged) {
    if (!results[r]) out[i].value = results[r].error();
    ++r;
  }
  const auto transferred = clock::now();
  for (std::size_t i = 0; i < out.size(); ++i)
    if (!out[i].inline_value && (out[i].value || !mc::is(out[i].value.error(), errc::object_not_found)))
      count_read(out[i].value);  // step 6
  count_batch(false, start, prepared, transferred, transferred);
  co_return out;
}

task<result<void>> data_manager::send_staged(const tiered::read_handle& h, const remote_pieces& dest,
                                             clock::time_point deadline) {
  const std::uint64_t size = h.size();
  // Two staging buffers: the SSD read of chunk k+1 runs while chunk k is
  // sent. Pipelines are bounded (pipelines_) so that one waiting for its
  // second buffer cannot deadlock against the others.
  auto slot = co_await pipelines_->acquire(1);
  if (!slot) co_return slot.error();
  auto first = co_await backend_.acquire_staging(static_cast<std::size_t>(size));
  if (!first) co_return first.error();
  tiered::staging_buffer second;
  const auto chunk = first->capacity().size();
  if (size > chunk && staging_count_ >= 2) {
    auto b = co_await backend_.acquire_staging(static_cast<std::size_t>(size - chunk));
    if (!b) co_return b.error();
    second = std::move(*b);
  }
  auto cur_buf = first->capacity();
  auto spare_buf = second ? second.capacity() : std::span<std::byte>{};
  auto cur = cur_buf.first(static_cast<std::size_t>(std::min<std::uint64_t>(chunk, size)));
  if (auto r = co_await h.read_into(cur, 0); !r) co_return r;
  std::uint64_t off = 0;
  for (;;) {
    const std::uint64_t next_off = off + cur.size();
    if (next_off >= size)
      co_return co_await move_range(engine_, mc::transfer::op_kind::write, cur, dest, off, deadline);
    if (spare_buf.empty()) {  // single-buffered: send, then read the next chunk into the same buffer
      if (auto r = co_await move_range(engine_, mc::transfer::op_kind::write, cur, dest, off, deadline); !r)
        co_return r;
      cur = cur_buf.first(static_cast<std::size_t>(std::min<std::uint64_t>(chunk, size - next_off)));
      if (auto r = co_await h.read_into(cur, next_off); !r) co_return r;
      off = next_off;
      continue;
    }
    auto next = spare_buf.first(static_cast<std::size_t>(std::min<std::uint64_t>(spare_buf.size(), size - next_off)));
    std::vector<task<result<void>>> both;
    both.push_back(move_range(engine_, mc::transfer::op_kind::write, cur, dest, off, deadline));
    both.push_back(h.read_into(next, next_off));
    auto rs = co_await mc::when_all(std::move(both));
    for (auto& r : rs)
      if (!r) co_return r;
    std::swap(cur_buf, spare_buf);
    cur = next;
    off = next_off;
  }
}

task<result<void>> data_manager::receive_staged(tiered::write_handle& h, const remote_pieces& src,
                                                clock::time_point deadline) {
  const std::uint64_t size = h.size();
  for (std::uint64_t off = 0; off < size;) {
    auto st = co_await backend_.acquire_staging(static_cast<std::size_t>(size - off));
    if (!st) co_return st.error();
    auto chunk = st->data();
    if (auto r = co_await move_range(engine_, mc::transfer::op_kind::read, chunk, src, off, deadline); !r) co_return r;
    if (auto r = co_await h.write(chunk); !r) co_return r;
    off += chunk.size();
  }
  co_return result<void>{};
}

task<result<void>> data_manager::write_remote(const std::string& key, mc::transfer::remote_buffer src,
                                              mc::duration timeout) {
  remote_pieces one;
  one.push_back(std::move(src));
  co_return co_await write_remote_parts(key, std::move(one), timeout);
}

task<result<void>> data_manager::write_remote_parts(const std::string& key, remote_pieces src, mc::duration timeout,
                                                    tiered::value_tag tag, std::uint64_t version) {
  std::vector<remote_write_item> one(1);
  one[0].key = key;
  one[0].src = std::move(src);
  one[0].tag = tag;
  one[0].version = version;
  auto out = co_await write_remote_batch(std::move(one), timeout);
  co_return std::move(out[0]);
}

task<std::vector<result<void>>> data_manager::write_remote_batch(std::vector<remote_write_item> items,
                                                                 mc::duration timeout) {
  const auto start = clock::now();
  const auto deadline = start + timeout;
  const auto n = items.size();
  std::vector<result<void>> out(n);
  std::vector<tiered::write_handle> handles(n);
  std::vector<std::uint64_t> sizes(n, 0);
  std::vector<mc::transfer::request> dram;  // every DRAM-bound value's pieces: one engine batch
  std::vector<std::size_t> dram_item;       // request -> item
  std::vector<std::size_t> staged;          // items received through staging
  reserve_pieces(items, &remote_write_item::src, dram, dram_item);
  for (std::size_t i = 0; i < n; ++i) {
    auto& it = items[i];
    if (auto r = check_key(it.key); !r) {
      out[i] = r;
      continue;
    }
    auto total = total_length(it.src);
    if (!total || !valid_destination(it.src, *total)) {
      out[i] = fail(errc::invalid_params);
      continue;
    }
    // Step 4: space from the TieredBackend; the handle frees it unless
    // committed. No key lock: the allocation is invisible until the commit
    // (step 8), and concurrent writers of one key simply commit in turn.
    auto h = co_await backend_.allocate(static_cast<std::size_t>(*total));
    if (!h) {
      out[i] = h.error();
      continue;
    }
    sizes[i] = *total;
    if (h->tier() == tiered::tier_type::dram) {
      // Step 6: TransferEngine READ from the requester straight into the tier.
      auto bytes = h->data();
      std::uint64_t off = 0;
      for (auto& p : it.src) {
        dram.push_back(mc::transfer::request::make_read(bytes.subspan(off, p.length), p));
        dram_item.push_back(i);
        off += p.length;
      }
    } else {
      staged.push_back(i);  // steps 5-7
    }
    handles[i] = std::move(*h);
  }
  const auto prepared = clock::now();
  std::vector<task<result<void>>> work;
  if (!dram.empty()) work.push_back(pull_batch(engine_, std::move(dram), dram_item, out, deadline));
  for (auto i : staged) work.push_back(receive_staged(handles[i], items[i].src, deadline));
  auto received = co_await mc::when_all(std::move(work));
  std::size_t r = dram_item.empty() ? 0 : 1;
  for (auto i : staged) {
    if (!received[r]) out[i] = received[r];
    ++r;
  }
  const auto transferred = clock::now();
  co_await commit_batch(items, handles, sizes, out, deadline);
  count_batch(true, start, prepared, transferred, clock::now());
  co_return out;
}

task<void> data_manager::commit_batch(const std::vector<remote_write_item>& items,
                                      std::vector<tiered::write_handle>& handles,
                                      const std::vector<std::uint64_t>& sizes, std::vector<result<void>>& out,
                                      clock::time_point deadline) {
  // Steps 8-9: commit (exclusive lock, atomic replace) and publish, shielded
  // from cancellation; a failed item's handle releases its allocation and
  // the old value stays untouched. Past the deadline nothing is committed:
  // the requester has answered TIMEOUT, and a value committed now would only
  // race its later puts (the master orders those by version).
  const bool late = clock::now() >= deadline;
  std::vector<task<result<void>>> commits;
  std::vector<batch_commit> values;  // with a batch hook: one commit of them all, one publish
  std::vector<std::size_t> committed;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (sizes[i] == 0) continue;  // refused before allocation
    if (late && out[i]) out[i] = fail(errc::timeout);
    if (!out[i]) {
      count_write(out[i], 0);
      continue;
    }
    if (on_commit_batch_)
      values.push_back({items[i].key, std::move(handles[i]), sizes[i], items[i].tag, items[i].version});
    else
      commits.push_back(
          commit_and_publish(items[i].key, std::move(handles[i]), sizes[i], items[i].tag, items[i].version));
    committed.push_back(i);
  }
  auto done = co_await commit_all(std::move(values), std::move(commits));
  for (std::size_t k = 0; k < done.size(); ++k) {
    auto i = committed[k];
    count_write(done[k] || backend_.exists(items[i].key) ? result<void>{} : done[k], sizes[i]);
    out[i] = std::move(done[k]);
  }
}

}  // namespace mc::store
