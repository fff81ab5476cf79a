// SSD I/O through staging buffers, the staging pool, and the handles.
#include "backend_core.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <cstring>
#include <ctime>

namespace mc::tiered::detail {

namespace rtm = mc::runtime;

std::size_t backend_core::direct_len(const std::byte* p, std::size_t len) const noexcept {
  if (!rtm::is_direct_aligned(reinterpret_cast<std::uintptr_t>(p))) return 0;
  if (rtm::is_direct_aligned(len)) return len;
  // Inside a staging buffer the padding up to 4096 belongs to the same buffer.
  if (p >= staging && p < staging + staging_len) {
    auto idx = static_cast<std::size_t>(p - staging) / opts.staging_chunk_size;
    auto* end = staging + (idx + 1) * opts.staging_chunk_size;
    auto padded = rtm::align_up_direct(len);
    if (p + padded <= end) return padded;
  }
  return 0;
}

task<result<void>> backend_core::ssd_write(const value& v, std::uint64_t at, std::span<const std::byte> src,
                                           bool reserved) {
  if (src.empty()) co_return result<void>{};
  if (!rtm::is_direct_aligned(at)) co_return mc::fail(mc::errc::invalid_params);
  auto& f = v.t->file;
  if (auto n = direct_len(src.data(), src.size()); n > 0) {
    auto r = co_await f.write_at(v.offset + at, {src.data(), n});
    if (!r) co_return r.error();
    co_return result<void>{};
  }
  mc::result<staging_buffer> sb = staging_buffer{};
  mc::unique_lock_guard reserved_lock;
  std::span<std::byte> buf;
  if (reserved) {
    auto g = co_await demote_m_.lock();
    if (!g) co_return g.error();
    reserved_lock = std::move(*g);
    buf = {staging + opts.staging_buffers * opts.staging_chunk_size, opts.staging_chunk_size};
  } else {
    sb = co_await acquire_staging(opts.staging_chunk_size);
    if (!sb) co_return sb.error();
    buf = sb->capacity();
  }
  std::size_t done = 0;
  while (done < src.size()) {
    auto n = std::min(src.size() - done, buf.size());
    std::memcpy(buf.data(), src.data() + done, n);
    auto padded = rtm::align_up_direct(n);
    if (padded > n) std::memset(buf.data() + n, 0, padded - n);
    auto r = co_await f.write_at(v.offset + at + done, buf.first(padded));
    if (!r) co_return r.error();
    done += n;
  }
  co_return result<void>{};
}

task<result<void>> backend_core::ssd_read(const value& v, std::uint64_t at, std::span<std::byte> dst) {
  if (dst.empty()) co_return result<void>{};
  auto& f = v.t->file;
  if (rtm::is_direct_aligned(at)) {
    if (auto n = direct_len(dst.data(), dst.size()); n > 0) {
      auto r = co_await f.read_at(v.offset + at, {dst.data(), n});
      if (!r) co_return r.error();
      co_return result<void>{};
    }
  }
  auto sb = co_await acquire_staging(opts.staging_chunk_size);
  if (!sb) co_return sb.error();
  auto buf = sb->capacity();
  std::size_t done = 0;
  while (done < dst.size()) {
    std::uint64_t pos = at + done;
    std::uint64_t start = pos / ssd_alignment * ssd_alignment;
    std::size_t within = static_cast<std::size_t>(pos - start);
    std::size_t n = std::min(dst.size() - done, buf.size() - within);
    auto len = rtm::align_up_direct(within + n);
    auto r = co_await f.read_at(v.offset + start, buf.first(len));
    if (!r) co_return r.error();
    std::memcpy(dst.data() + done, buf.data() + within, n);
    done += n;
  }
  co_return result<void>{};
}

// FIFO staging pool on mc::waiter_queue: a released buffer goes straight to
// the oldest waiter (its index is the grant's value), else back to the free
// list. A grant always reaches its waiter, so no index is lost to a cancel.
task<result<staging_buffer>> backend_core::acquire_staging(std::size_t size) {
  std::uint64_t idx = 0;
  auto lk = staging_q_.lock();
  if (!free_staging_.empty() && staging_q_.empty()) {
    idx = free_staging_.back();
    free_staging_.pop_back();
    lk.unlock();
  } else {
    auto r = co_await staging_q_.wait(std::move(lk), 0);
    if (!r) co_return r.error();  // cancelled while waiting: holds nothing
    idx = *r;
  }
  staging_buffer b;
  b.core_ = this;
  b.index_ = static_cast<unsigned>(idx);
  b.whole_ = {staging + idx * opts.staging_chunk_size, opts.staging_chunk_size};
  b.data_ = b.whole_.first(std::min(size, opts.staging_chunk_size));
  co_return b;
}

void backend_core::release_staging(unsigned index) noexcept {
  mc::waiter_queue::wakeups w;
  auto lk = staging_q_.lock();
  if (staging_q_.empty()) {
    free_staging_.push_back(index);
  } else {
    staging_q_.grant_front(w, index);
  }
}

}  // namespace mc::tiered::detail

namespace mc::tiered {

// ---- staging_buffer ----

staging_buffer::staging_buffer(staging_buffer&& o) noexcept
    : core_(std::exchange(o.core_, nullptr)), index_(o.index_), data_(o.data_), whole_(o.whole_) {}

staging_buffer& staging_buffer::operator=(staging_buffer&& o) noexcept {
  if (this != &o) {
    if (core_) core_->release_staging(index_);
    core_ = std::exchange(o.core_, nullptr);
    index_ = o.index_;
    data_ = o.data_;
    whole_ = o.whole_;
  }
  return *this;
}

staging_buffer::~staging_buffer() {
  if (core_) core_->release_staging(index_);
}

// ---- write_handle ----

write_handle::~write_handle() = default;

std::size_t write_handle::size() const noexcept { return v_ ? v_->size : 0; }
tier_type write_handle::tier() const noexcept { return v_ ? v_->t->cfg.type : tier_type::dram; }

std::span<std::byte> write_handle::data() const noexcept {
  if (!v_ || v_->t->cfg.type != tier_type::dram) return {};
  return {v_->dram(), v_->size};
}

task<result<void>> write_handle::write(std::span<const std::byte> src) {
  if (!v_) co_return mc::fail(mc::errc::invalid_params);
  if (src.size() > v_->size - cursor_) co_return mc::fail(mc::errc::buffer_overflow);
  if (v_->t->cfg.type == tier_type::dram) {
    if (!src.empty()) std::memcpy(v_->dram() + cursor_, src.data(), src.size());
  } else {
    auto r = co_await v_->core->ssd_write(*v_, cursor_, src);
    if (!r) co_return r;
  }
  cursor_ += src.size();
  co_return result<void>{};
}

// ---- read_handle ----

std::size_t read_handle::size() const noexcept { return v_ ? v_->size : 0; }
tier_type read_handle::tier() const noexcept { return v_ ? v_->t->cfg.type : tier_type::dram; }

std::span<const std::byte> read_handle::data() const noexcept {
  if (!v_ || v_->t->cfg.type != tier_type::dram) return {};
  return {v_->dram(), v_->size};
}

task<result<void>> read_handle::read_into(std::span<std::byte> dst, std::uint64_t offset) const {
  if (!v_) co_return mc::fail(mc::errc::invalid_params);
  if (offset > v_->size || dst.size() > v_->size - offset) co_return mc::fail(mc::errc::out_of_range);
  if (v_->t->cfg.type == tier_type::dram) {
    if (!dst.empty()) std::memcpy(dst.data(), v_->dram() + offset, dst.size());
    co_return result<void>{};
  }
  co_return co_await v_->core->ssd_read(*v_, offset, dst);
}

// ---- tiered_backend forwarding ----

task<result<write_handle>> tiered_backend::allocate(std::size_t size, std::optional<tier_type> preferred) {
  auto v = co_await core_->allocate(size, preferred);
  if (!v) co_return v.error();
  write_handle h;
  h.v_ = std::move(*v);
  co_return h;
}

result<value_version> tiered_backend::commit(std::string key, write_handle&& h, value_tag tag, value_version version) {
  if (key.empty()) return mc::fail(mc::errc::invalid_key);
  if (!h.v_) return mc::fail(mc::errc::invalid_params);
  if (h.v_->t->cfg.type == tier_type::ssd && h.cursor_ != h.v_->size) return mc::fail(mc::errc::invalid_write);
  auto v = std::move(h.v_);
  h.cursor_ = 0;
  return core_->commit(std::move(key), std::move(v), tag, version);
}

result<read_handle> tiered_backend::get(std::string_view key) {
  auto v = core_->get(key);
  if (!v) return v.error();
  read_handle h;
  h.v_ = std::move(*v);
  return h;
}

result<void> tiered_backend::remove(std::string_view key) { return core_->remove(key); }
result<void> tiered_backend::drop_superseded(std::string_view key, value_version version) {
  return core_->drop_superseded(key, version);
}
value_version wall_clock_version() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<value_version>(ts.tv_sec) * 1'000'000'000u + static_cast<value_version>(ts.tv_nsec);
}
value_version tiered_backend::issue_version() noexcept { return core_->issue_version(); }
result<value_version> tiered_backend::version_of(std::string_view key) const { return core_->version_of(key); }
result<value_stamp> tiered_backend::stamp_of(std::string_view key) const { return core_->stamp_of(key); }
bool tiered_backend::exists(std::string_view key) const { return core_->exists(key); }
std::size_t tiered_backend::count() const { return core_->count(); }

std::vector<key_info> tiered_backend::keys() const {
  std::vector<key_info> out;
  core_->for_each([&](const key_info& k) { out.push_back(k); });
  return out;
}

void tiered_backend::for_each_key(const std::function<void(const key_info&)>& fn) const { core_->for_each(fn); }
void tiered_backend::set_observer(observer fn) { core_->set_observer(std::move(fn)); }
std::vector<tier_usage> tiered_backend::usage() const { return core_->usage(); }

task<result<staging_buffer>> tiered_backend::acquire_staging(std::size_t size) { return core_->acquire_staging(size); }

}  // namespace mc::tiered
