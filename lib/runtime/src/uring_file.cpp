// O_DIRECT file object, error mapping and the fixed-buffer registry.
#include "uring_detail.hpp"
#include "mc/runtime/blocking.hpp"

#include <boost/asio/this_coro.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace mc::runtime {
namespace detail {
namespace {
thread_local io_error_detail tls_last_error;
}

boost::system::error_code record_errno(int err, const char* op, const std::string& what) {
  tls_last_error.sys_errno = err;
  tls_last_error.operation = op;
  tls_last_error.message = what + ": " + std::strerror(err);
  switch (err) {
    case ENOSPC:
    case EFBIG:
    case EDQUOT:
      return fail(errc::no_space);
    case ECANCELED:
    case EINTR:
      return fail(errc::cancelled);
    case ENOMEM:
      if (std::string_view(op).starts_with("io_uring_register")) return fail(errc::memlock_limit);
      return fail(errc::io_error);
    case EINVAL:
      if (std::string_view(op) == "open") return fail(errc::unsupported);
      return fail(errc::io_error);
    case EOPNOTSUPP:
      return fail(errc::unsupported);
    default:
      return fail(errc::io_error);
  }
}

fixed_registry& fixed_registry::instance() {
  static auto* r = new fixed_registry;  // never destroyed: runtime threads may use it during exit
  return *r;
}

int fixed_registry::add(std::byte* base, std::size_t len, unsigned count) {
  std::lock_guard lk(m_);
  for (unsigned first = 0; first + count <= max_fixed_slots; ++first) {
    bool free = true;
    for (unsigned k = 0; k < count && free; ++k) free = slots_[first + k].base == nullptr;
    if (!free) continue;
    for (unsigned k = 0; k < count; ++k) {
      std::size_t off = k * max_fixed_iov;
      slots_[first + k] = slot{base + off, std::min(max_fixed_iov, len - off), next_gen_++};
    }
    version_.fetch_add(1, std::memory_order_acq_rel);
    return static_cast<int>(first);
  }
  return -1;
}

void fixed_registry::remove(unsigned first, unsigned count) noexcept {
  std::lock_guard lk(m_);
  for (unsigned k = 0; k < count && first + k < max_fixed_slots; ++k) slots_[first + k] = slot{nullptr, 0, next_gen_++};
  version_.fetch_add(1, std::memory_order_acq_rel);
}

fixed_registry::hit fixed_registry::find(const void* p, std::size_t n) const {
  auto* b = static_cast<const std::byte*>(p);
  std::lock_guard lk(m_);
  for (unsigned i = 0; i < max_fixed_slots; ++i) {
    const auto& s = slots_[i];
    if (s.base && b >= s.base && b + n <= s.base + s.len) return {static_cast<int>(i), s};
  }
  return {};
}

fixed_registry::slot fixed_registry::get(unsigned i) const {
  std::lock_guard lk(m_);
  return slots_.at(i);
}

}  // namespace detail

const io_error_detail& last_io_error() noexcept { return detail::tls_last_error; }

// ---- fixed buffer registration --------------------------------------------

fixed_buffer_registration& fixed_buffer_registration::operator=(fixed_buffer_registration&& o) noexcept {
  if (this != &o) {
    reset();
    slots_ = std::exchange(o.slots_, 0);
    first_ = o.first_;
  }
  return *this;
}

void fixed_buffer_registration::reset() noexcept {
  if (slots_ == 0) return;
  detail::fixed_registry::instance().remove(first_, std::exchange(slots_, 0));
}

result<fixed_buffer_registration> register_fixed_buffer(std::span<std::byte> region) {
  using detail::max_fixed_iov;
  if (region.empty()) return fail(errc::invalid_params);
  auto count = static_cast<unsigned>((region.size() + max_fixed_iov - 1) / max_fixed_iov);
  if (count > detail::max_fixed_slots) return fail(errc::too_large);
  // Probe: pin the region once in a throw-away ring so RLIMIT_MEMLOCK
  // problems surface here, not as a silent slowdown later.
  io_uring probe{};
  int rc = io_uring_queue_init(1, &probe, 0);
  if (rc < 0) return detail::record_errno(-rc, "io_uring_queue_init", "probe ring");
  std::vector<iovec> iovs(count);
  for (unsigned k = 0; k < count; ++k) {
    std::size_t off = k * max_fixed_iov;
    iovs[k] = iovec{region.data() + off, std::min(max_fixed_iov, region.size() - off)};
  }
  rc = io_uring_register_buffers(&probe, iovs.data(), count);
  if (rc == 0) io_uring_unregister_buffers(&probe);
  io_uring_queue_exit(&probe);
  if (rc < 0) {
    auto ec = detail::record_errno(
        -rc, "io_uring_register_buffers",
        "registering " + std::to_string(region.size()) + " bytes as fixed buffers (RLIMIT_MEMLOCK?)");
    return ec;
  }
  int first = detail::fixed_registry::instance().add(region.data(), region.size(), count);
  if (first < 0) return fail(errc::no_available_handle);
  return fixed_buffer_registration(static_cast<unsigned>(first), count);
}

// ---- uring_file ------------------------------------------------------------

uring_file& uring_file::operator=(uring_file&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
  }
  return *this;
}

uring_file::~uring_file() { close(); }

void uring_file::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

result<uring_file> uring_file::open(const std::string& path, file_mode mode) {
  int flags = O_DIRECT | O_CLOEXEC;
  switch (mode) {
    case file_mode::read_only:
      flags |= O_RDONLY;
      break;
    case file_mode::read_write:
      flags |= O_RDWR;
      break;
    case file_mode::create_read_write:
      flags |= O_RDWR | O_CREAT;
      break;
    case file_mode::create_truncate:
      flags |= O_RDWR | O_CREAT | O_TRUNC;
      break;
  }
  mc::runtime::assert_may_block("mc::runtime::uring_file::open (synchronous open)");
  int fd = ::open(path.c_str(), flags, 0600);
  if (fd < 0) return detail::record_errno(errno, "open", "opening " + path + " with O_DIRECT");
  uring_file f;
  f.fd_ = fd;
  f.path_ = path;
  return f;
}

result<void> uring_file::allocate(std::uint64_t size) const {
  if (fd_ < 0) return fail(errc::invalid_params);
  mc::runtime::assert_may_block("mc::runtime::uring_file::allocate (synchronous fallocate)");
  int rc;
  do rc = ::posix_fallocate(fd_, 0, static_cast<off_t>(size));
  while (rc == EINTR);
  if (rc != 0) return detail::record_errno(rc, "fallocate", "preallocating " + path_);
  return {};
}

result<void> uring_file::discard(std::uint64_t offset, std::uint64_t len) const {
  if (fd_ < 0) return fail(errc::invalid_params);
  mc::runtime::assert_may_block("mc::runtime::uring_file::discard (synchronous fallocate)");
  if (::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                  static_cast<off_t>(len)) != 0)
    return detail::record_errno(errno, "fallocate", "discarding a range of " + path_);
  return {};
}

result<std::uint64_t> uring_file::size() const {
  struct stat st {};
  if (fd_ < 0) return fail(errc::invalid_params);
  if (::fstat(fd_, &st) != 0) return detail::record_errno(errno, "fstat", path_);
  return static_cast<std::uint64_t>(st.st_size);
}

namespace {

// io_uring lengths are 32-bit; keep each SQE at most 1 GiB (aligned).
constexpr std::size_t max_sqe_len = std::size_t(1) << 30;

task<result<std::size_t>> transfer(detail::ring_service::op_kind kind, int fd, const std::string& path,
                                   std::uint64_t offset, std::byte* p, std::size_t n) {
  if (fd < 0) co_return fail(errc::invalid_params);
  if (!is_direct_aligned(reinterpret_cast<std::uintptr_t>(p)) || !is_direct_aligned(offset) || !is_direct_aligned(n))
    co_return fail(errc::misaligned);
  if (n == 0) co_return std::size_t{0};
  auto ex = co_await boost::asio::this_coro::executor;
  auto svc = detail::ring_service::for_executor(ex);
  if (!svc) co_return svc.error();
  const bool is_read = kind == detail::ring_service::op_kind::read;
  std::size_t done = 0;
  while (done < n) {
    auto cs = co_await boost::asio::this_coro::cancellation_state;
    if (cs.cancelled() != boost::asio::cancellation_type::none) co_return fail(errc::cancelled);
    auto chunk = static_cast<unsigned>(std::min(n - done, max_sqe_len));
    int res = co_await (*svc)->submit_rw(kind, fd, p + done, chunk, offset + done);
    if (res < 0) {
      co_return detail::record_errno(-res, is_read ? "read" : "write",
                                     std::string(is_read ? "read" : "write") + " of " + path + " at " +
                                         std::to_string(offset + done) + " (+" + std::to_string(chunk) + ")");
    }
    if (res == 0) co_return fail(errc::short_io);  // EOF on read, nothing written on write
    done += static_cast<std::size_t>(res);
    if (static_cast<unsigned>(res) < chunk) {
      if (!is_direct_aligned(done)) co_return fail(errc::short_io);  // cannot continue O_DIRECT
      ++(*svc)->stats.resubmits;
    }
  }
  co_return done;
}

}  // namespace

task<result<std::size_t>> uring_file::read_at(std::uint64_t offset, std::span<std::byte> dst) const {
  return transfer(detail::ring_service::op_kind::read, fd_, path_, offset, dst.data(), dst.size());
}

task<result<std::size_t>> uring_file::write_at(std::uint64_t offset, std::span<const std::byte> src) const {
  return transfer(detail::ring_service::op_kind::write, fd_, path_, offset, const_cast<std::byte*>(src.data()),
                  src.size());
}

task<uring_thread_stats> current_uring_stats() {
  auto ex = co_await boost::asio::this_coro::executor;
  auto& ctx = boost::asio::query(ex, boost::asio::execution::context);
  if (!boost::asio::has_service<detail::ring_service>(ctx)) co_return uring_thread_stats{};
  co_return boost::asio::use_service<detail::ring_service>(ctx).stats;
}

}  // namespace mc::runtime
