#include "mc/store/data_manager.hpp"

#include "mc/runtime/when_all.hpp"
#include "mc/tiered/tiered_backend.hpp"
#include "mc/transfer/engine.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>

namespace mc::store {

struct data_manager::shard {
  async_shared_mutex mu;
};

struct data_manager::counters {
  std::atomic<std::uint64_t> remote_reads{0}, remote_read_bytes{0}, remote_writes{0}, remote_write_bytes{0},
      remote_errors{0}, lock_waits{0}, lock_wait_ns{0};
  std::atomic<std::uint64_t> read_batches{0}, read_batch_prepare_ns{0}, read_batch_transfer_ns{0}, write_batches{0},
      write_batch_prepare_ns{0}, write_batch_transfer_ns{0}, write_batch_commit_ns{0};
};

namespace {
using clock = std::chrono::steady_clock;
using std::memory_order::relaxed;

/// A duration in whole nanoseconds, for the counters.
std::uint64_t duration_ns(clock::duration d) noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

}  // namespace

result<std::size_t> parse_lock_shard_count(std::string_view text) {
  std::size_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || p != text.data() + text.size() || v == 0 || v > max_lock_shard_count)
    return fail(errc::invalid_params);
  return v;
}

result<void> check_key(std::string_view key) {
  if (key.empty() || key.size() > max_key_bytes || key.find('\0') != std::string_view::npos)
    return fail(errc::invalid_key);
  return {};
}

data_manager::data_manager(tiered::tiered_backend& backend, mc::transfer::engine& engine, std::size_t lock_shards)
    : backend_(backend), engine_(engine), counters_(std::make_unique<counters>()) {
  lock_shards = std::clamp<std::size_t>(lock_shards, 1, max_lock_shard_count);
  shards_.reserve(lock_shards);
  for (std::size_t i = 0; i < lock_shards; ++i) shards_.push_back(std::make_unique<shard>());
  auto chunk = std::max<std::size_t>(backend_.staging_chunk_size(), 1);
  staging_count_ = std::max<std::size_t>(backend_.staging_region().size() / chunk, 1);
  pipelines_ = std::make_unique<async_semaphore>(std::max<std::size_t>(staging_count_ / 2, 1));
}

data_manager::~data_manager() = default;

async_shared_mutex& data_manager::lock_for(const std::string& key) {
  return shards_[std::hash<std::string>{}(key) % shards_.size()]->mu;
}

task<result<shared_lock_guard>> data_manager::lock_shared(const std::string& key) {
  auto& m = lock_for(key);
  if (auto g = m.try_lock_shared(); g.owns_lock()) co_return std::move(g);
  auto t0 = clock::now();
  auto g = co_await m.lock_shared();
  counters_->lock_waits.fetch_add(1, relaxed);
  counters_->lock_wait_ns.fetch_add(duration_ns(clock::now() - t0), relaxed);
  co_return g;
}

task<result<unique_lock_guard>> data_manager::lock_exclusive(const std::string& key) {
  auto& m = lock_for(key);
  if (auto g = m.try_lock(); g.owns_lock()) co_return std::move(g);
  auto t0 = clock::now();
  auto g = co_await m.lock();
  counters_->lock_waits.fetch_add(1, relaxed);
  counters_->lock_wait_ns.fetch_add(duration_ns(clock::now() - t0), relaxed);
  co_return g;
}

task<result<void>> data_manager::put(const std::string& key, std::span<const std::byte> value, tiered::value_tag tag,
                                     std::uint64_t version) {
  auto h = co_await stage(key, value);
  if (!h) co_return h.error();
  co_return co_await commit_and_publish(key, std::move(*h), value.size(), tag, version);
}

task<result<tiered::write_handle>> data_manager::stage(const std::string& key, std::span<const std::byte> value) {
  if (auto r = check_key(key); !r) co_return r.error();
  if (value.empty()) co_return fail(errc::invalid_params);
  // The allocation is invisible until commit: no key lock while copying.
  auto h = co_await backend_.allocate(value.size());
  if (!h) co_return h.error();
  if (auto w = co_await h->write(value); !w) co_return w.error();
  co_return std::move(*h);
}

task<std::vector<result<void>>> data_manager::put_batch(std::vector<put_item> items) {
  std::vector<result<void>> out(items.size());
  std::vector<batch_commit> values;
  std::vector<std::size_t> which;
  std::vector<task<result<void>>> singles;  // without a batch hook
  values.reserve(items.size());
  which.reserve(items.size());
  std::uint64_t copied = 0;
  for (std::size_t k = 0; k < items.size(); ++k) {
    auto& it = items[k];
    if (copied >= (1u << 20)) {  // never more than ~1 MiB of copies without yielding the thread
      copied = 0;
      co_await boost::asio::post(co_await boost::asio::this_coro::executor, boost::asio::use_awaitable);
    }
    copied += it.value.size();
    auto h = co_await stage(it.key, it.value);
    if (!h) {
      out[k] = h.error();
      continue;
    }
    if (on_commit_batch_)
      values.push_back({std::move(it.key), std::move(*h), it.value.size(), it.tag, it.version});
    else
      singles.push_back(commit_and_publish(it.key, std::move(*h), it.value.size(), it.tag, it.version));
    which.push_back(k);
  }
  auto done = co_await commit_all(std::move(values), std::move(singles));
  for (std::size_t j = 0; j < done.size() && j < which.size(); ++j) out[which[j]] = std::move(done[j]);
  co_return out;
}

task<std::vector<result<void>>> data_manager::commit_all(std::vector<batch_commit> values,
                                                         std::vector<task<result<void>>> singles) {
  if (!on_commit_batch_) co_return co_await mc::when_all(std::move(singles));
  if (values.empty()) co_return std::vector<result<void>>{};
  // Shielded from the caller's cancellation, as commit_and_publish.
  auto g = gate_.try_enter();
  if (!g) co_return std::vector<result<void>>(values.size(), fail(errc::shutting_down));
  auto ex = co_await boost::asio::this_coro::executor;
  co_return co_await boost::asio::co_spawn(
      ex, finish_commit_batch(std::move(values), std::move(g)),
      boost::asio::bind_cancellation_slot(boost::asio::cancellation_slot(), boost::asio::use_awaitable));
}

task<result<void>> data_manager::commit_and_publish(const std::string& key, tiered::write_handle h, std::uint64_t size,
                                                    tiered::value_tag tag, std::uint64_t version) {
  // Shielded from the caller's cancellation: once the bytes are in, commit
  // and publish run to completion on this executor (the caller still awaits
  // the outcome). The gate lets close() wait for them.
  auto g = gate_.try_enter();
  if (!g) co_return fail(errc::shutting_down);
  auto ex = co_await boost::asio::this_coro::executor;
  co_return co_await boost::asio::co_spawn(
      ex, finish_commit(key, std::move(h), size, tag, version, std::move(g)),
      boost::asio::bind_cancellation_slot(boost::asio::cancellation_slot(), boost::asio::use_awaitable));
}

task<result<std::uint64_t>> data_manager::commit_locked(const std::string& key, tiered::write_handle h,
                                                        tiered::value_tag tag, std::uint64_t version) {
  if (version != 0) {
    const auto lead = static_cast<std::uint64_t>(std::chrono::nanoseconds(max_version_lead).count());
    if (version > tiered::wall_clock_version() + lead) co_return fail(errc::invalid_params);
  }
  // The exclusive key lock only around the commit itself (no I/O under it).
  auto lock = co_await lock_exclusive(key);
  if (!lock) co_return lock.error();
  co_return backend_.commit(key, std::move(h), tag, version);
}

task<result<void>> data_manager::finish_commit(std::string key, tiered::write_handle h, std::uint64_t size,
                                               tiered::value_tag tag, std::uint64_t version, gate_holder g) {
  auto c = co_await commit_locked(key, std::move(h), tag, version);
  if (!c) co_return c.error();
  result<void> r;
  if (on_commit_) r = co_await on_commit_(key, size, *c, tag);  // after the lock is released
  g.leave();
  co_return r;
}

task<std::vector<result<void>>> data_manager::finish_commit_batch(std::vector<batch_commit> values, gate_holder g) {
  // As finish_commit for each value (the key lock only around its commit),
  // then one batch hook call for all that committed: one coroutine, not one
  // spawned per value (their wake-ups cost ~5 us per value of a batch).
  std::vector<result<void>> out(values.size());
  std::vector<committed_value> hooked;
  std::vector<std::size_t> which;
  hooked.reserve(values.size());
  which.reserve(values.size());
  for (std::size_t k = 0; k < values.size(); ++k) {
    auto& v = values[k];
    auto c = co_await commit_locked(v.key, std::move(v.handle), v.tag, v.version);
    if (!c) {
      out[k] = c.error();
      continue;
    }
    hooked.push_back({std::move(v.key), v.size, *c, v.tag});
    which.push_back(k);
  }
  if (!hooked.empty()) {  // after every key lock was released
    const auto n = hooked.size();
    auto r = co_await on_commit_batch_(std::move(hooked));
    for (std::size_t j = 0; j < n; ++j) out[which[j]] = r.size() == n ? std::move(r[j]) : fail(errc::rpc_fail);
  }
  g.leave();
  co_return out;
}

task<void> data_manager::close() { co_await gate_.close(); }

task<result<std::size_t>> data_manager::get(const std::string& key, std::span<std::byte> dst) {
  // The handle pins the value: the shared lock only guards taking it, not
  // the copy (an SSD read is I/O).
  auto h = co_await pin(key);
  if (!h) co_return h.error();
  if (dst.size() < h->size()) co_return fail(errc::buffer_overflow);
  if (auto r = co_await h->read_into(dst.first(h->size())); !r) co_return r.error();
  co_return h->size();
}

task<result<tiered::read_handle>> data_manager::pin(const std::string& key) {
  if (auto r = check_key(key); !r) co_return r.error();
  result<tiered::read_handle> h = fail(errc::object_not_found);
  {
    auto lock = co_await lock_shared(key);  // only to take the handle
    if (!lock) co_return lock.error();
    h = backend_.get(key);
  }
  co_return h;
}

task<result<void>> data_manager::put_parts(const std::string& key, std::vector<std::span<const std::byte>> pieces,
                                           tiered::value_tag tag, std::uint64_t version) {
  if (auto r = check_key(key); !r) co_return r;
  if (pieces.empty() || pieces.size() > max_value_pieces) co_return fail(errc::invalid_params);
  std::uint64_t total = 0;
  for (auto& p : pieces) {
    if (p.size() > std::numeric_limits<std::uint64_t>::max() - total) co_return fail(errc::invalid_params);
    total += p.size();
  }
  if (total == 0) co_return fail(errc::invalid_params);
  auto h = co_await backend_.allocate(static_cast<std::size_t>(total));
  if (!h) co_return h.error();
  if (h->tier() == tiered::tier_type::dram) {
    // Chunks of <= 1 MiB with a yield between them: a long copy never holds
    // the runtime thread.
    constexpr std::size_t chunk = 1 << 20;
    auto dst = h->data();
    std::size_t off = 0, since_yield = 0;
    for (auto& p : pieces) {
      for (std::size_t at = 0; at < p.size();) {
        auto n = std::min(p.size() - at, chunk - since_yield);
        std::memcpy(dst.data() + off, p.data() + at, n);
        at += n;
        off += n;
        since_yield += n;
        if (since_yield == chunk) {
          since_yield = 0;
          co_await boost::asio::post(co_await boost::asio::this_coro::executor, boost::asio::use_awaitable);
        }
      }
    }
  } else {
    // Other tiers take whole aligned chunks: gather through a staging buffer.
    std::size_t piece = 0, within = 0;
    for (std::uint64_t off = 0; off < total;) {
      auto st = co_await backend_.acquire_staging(static_cast<std::size_t>(total - off));
      if (!st) co_return st.error();
      auto chunk = st->data();
      std::size_t filled = 0;
      while (filled < chunk.size()) {
        auto n = std::min(chunk.size() - filled, pieces[piece].size() - within);
        if (n > 0) std::memcpy(chunk.data() + filled, pieces[piece].data() + within, n);
        filled += n;
        within += n;
        if (within == pieces[piece].size()) ++piece, within = 0;
      }
      if (auto w = co_await h->write(chunk); !w) co_return w;
      off += chunk.size();
    }
  }
  co_return co_await commit_and_publish(key, std::move(*h), total, tag, version);
}

task<result<std::size_t>> data_manager::get_parts(const std::string& key, std::vector<std::span<std::byte>> pieces) {
  if (pieces.size() > max_value_pieces) co_return fail(errc::invalid_params);
  auto h = co_await pin(key);
  if (!h) co_return h.error();
  const std::uint64_t size = h->size();
  std::uint64_t room = 0;
  for (auto& p : pieces) room += p.size();  // <= max_value_pieces spans: no overflow in practice
  if (room < size) co_return fail(errc::buffer_overflow);
  std::uint64_t off = 0;
  for (auto& p : pieces) {
    if (off == size) break;
    auto n = static_cast<std::size_t>(std::min<std::uint64_t>(p.size(), size - off));
    if (auto r = co_await h->read_into(p.first(n), off); !r) co_return r.error();
    off += n;
  }
  co_return static_cast<std::size_t>(size);
}

result<std::uint64_t> data_manager::size_of(const std::string& key) const {
  auto h = backend_.get(key);
  if (!h) return h.error();
  return h->size();
}

bool data_manager::exists(const std::string& key) const { return backend_.exists(key); }

task<result<void>> data_manager::remove(const std::string& key) {
  if (auto r = check_key(key); !r) co_return r;
  auto lock = co_await lock_exclusive(key);
  if (!lock) co_return lock.error();
  co_return backend_.remove(key);
}

task<result<void>> data_manager::drop_local(const std::string& key) {
  if (auto r = check_key(key); !r) co_return r;
  auto lock = co_await lock_exclusive(key);
  if (!lock) co_return lock.error();
  auto v = backend_.version_of(key);
  if (!v) co_return v.error();
  co_return backend_.drop_superseded(key, *v);
}

void data_manager::count_read(const result<std::uint64_t>& r) {
  if (!r) {
    counters_->remote_errors.fetch_add(1, relaxed);
    return;
  }
  counters_->remote_reads.fetch_add(1, relaxed);
  counters_->remote_read_bytes.fetch_add(*r, relaxed);
}

void data_manager::count_write(const result<void>& r, std::uint64_t bytes) {
  if (!r) {
    counters_->remote_errors.fetch_add(1, relaxed);
    return;
  }
  counters_->remote_writes.fetch_add(1, relaxed);
  counters_->remote_write_bytes.fetch_add(bytes, relaxed);
}

data_manager_stats data_manager::stats() const {
  const auto& c = *counters_;
  data_manager_stats s;
  s.remote_reads = c.remote_reads.load(relaxed);
  s.remote_read_bytes = c.remote_read_bytes.load(relaxed);
  s.remote_writes = c.remote_writes.load(relaxed);
  s.remote_write_bytes = c.remote_write_bytes.load(relaxed);
  s.remote_errors = c.remote_errors.load(relaxed);
  s.lock_waits = c.lock_waits.load(relaxed);
  s.lock_wait_ns = c.lock_wait_ns.load(relaxed);
  s.read_batches = c.read_batches.load(relaxed);
  s.read_batch_prepare_ns = c.read_batch_prepare_ns.load(relaxed);
  s.read_batch_transfer_ns = c.read_batch_transfer_ns.load(relaxed);
  s.write_batches = c.write_batches.load(relaxed);
  s.write_batch_prepare_ns = c.write_batch_prepare_ns.load(relaxed);
  s.write_batch_transfer_ns = c.write_batch_transfer_ns.load(relaxed);
  s.write_batch_commit_ns = c.write_batch_commit_ns.load(relaxed);
  return s;
}

void data_manager::count_batch(bool write, clock::time_point start, clock::time_point prepared,
                               clock::time_point transferred, clock::time_point end) noexcept {
  auto& c = *counters_;
  (write ? c.write_batches : c.read_batches).fetch_add(1, relaxed);
  (write ? c.write_batch_prepare_ns : c.read_batch_prepare_ns).fetch_add(duration_ns(prepared - start), relaxed);
  (write ? c.write_batch_transfer_ns : c.read_batch_transfer_ns)
      .fetch_add(duration_ns(transferred - prepared), relaxed);
  if (write) c.write_batch_commit_ns.fetch_add(duration_ns(end - transferred), relaxed);
}

}  // namespace mc::store
