#pragma once
/// O_DIRECT positional file I/O on io_uring (liburing), one ring per runtime
/// thread, completions delivered through an eventfd awaited by asio.
///
/// Model:
/// - Every io_context that performs file I/O gets its own ring, created lazily
///   on the first read_at/write_at awaited on that context and destroyed with
///   the context. The ring is only ever touched by the thread running that
///   context (the project runs one thread per context).
/// - The ring signals completions on an eventfd (io_uring_register_eventfd);
///   asio waits for that fd to become readable (no polling loops).
/// - Memory regions registered with register_fixed_buffer() are used as fixed
///   buffers (read_fixed/write_fixed) by every ring that could register them;
///   other memory goes through plain read/write. Both are O_DIRECT.
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

namespace mc::runtime {

/// Buffer address, file offset and length of every O_DIRECT operation must be
/// multiples of this (conservative: the largest logical block size we expect).
inline constexpr std::size_t direct_io_alignment = 4096;

/// True if `n` is a multiple of direct_io_alignment.
constexpr bool is_direct_aligned(std::uint64_t n) noexcept { return n % direct_io_alignment == 0; }
/// Rounds `n` up to a multiple of direct_io_alignment.
constexpr std::uint64_t align_up_direct(std::uint64_t n) noexcept {
  return (n + direct_io_alignment - 1) / direct_io_alignment * direct_io_alignment;
}

/// Details of the last errc::io_error produced on the calling thread by this
/// module (file I/O results carry only the project error code). Read it right
/// after the failing co_await, before awaiting anything else.
struct io_error_detail {
  int sys_errno = 0;      ///< errno value (positive), 0 if none
  std::string operation;  ///< "read", "write", "open", "fallocate", ...
  std::string message;    ///< e.g. "write at 4096 (+1048576): Input/output error"
};
/// Thread-local; empty (sys_errno == 0) if no I/O error happened on this thread.
const io_error_detail& last_io_error() noexcept;

/// RAII registration of a memory region for fixed-buffer I/O. Move-only.
/// Destruction removes the region from the registry; rings drop their pin on
/// their next I/O (or when their context is destroyed). The memory itself must
/// stay valid until every I/O into it has completed (as for any I/O).
class [[nodiscard]] fixed_buffer_registration {
 public:
  fixed_buffer_registration() = default;
  fixed_buffer_registration(fixed_buffer_registration&& o) noexcept
      : slots_(std::exchange(o.slots_, 0)), first_(o.first_) {}
  fixed_buffer_registration& operator=(fixed_buffer_registration&& o) noexcept;
  ~fixed_buffer_registration() { reset(); }
  void reset() noexcept;
  bool registered() const noexcept { return slots_ != 0; }

 private:
  friend result<fixed_buffer_registration> register_fixed_buffer(std::span<std::byte>);
  fixed_buffer_registration(unsigned first, unsigned slots) noexcept : slots_(slots), first_(first) {}
  unsigned slots_ = 0;
  unsigned first_ = 0;
};

/// Registers `region` (page-aligned start recommended) as fixed buffers for
/// every ring. Thread-safe; callable from any thread. A probe registration is
/// made at once so limits are reported here:
/// - errc::memlock_limit: RLIMIT_MEMLOCK (without CAP_IPC_LOCK) forbids pinning
///   the region. Nothing is registered; I/O into the region still works, only
///   unregistered (slightly slower). last_io_error() has the details.
/// - errc::no_available_handle: the registry's slots are exhausted.
/// - errc::invalid_params: empty region.
/// Each ring pins the region again when it first touches it (the kernel
/// accounts per ring); a ring that cannot, silently uses plain I/O.
result<fixed_buffer_registration> register_fixed_buffer(std::span<std::byte> region);

/// Open mode of a uring_file.
enum class file_mode {
  read_only,
  read_write,         ///< file must exist
  create_read_write,  ///< create if missing, keep content
  create_truncate,    ///< create or truncate to 0
};

/// An O_DIRECT file. Move-only; closes on destruction. The object must
/// outlive every read_at/write_at awaited on it. Operations may be awaited
/// from any runtime thread (each uses its own thread's ring), concurrently.
class uring_file {
 public:
  uring_file() = default;
  uring_file(uring_file&& o) noexcept : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)) {}
  uring_file& operator=(uring_file&& o) noexcept;
  uring_file(const uring_file&) = delete;
  uring_file& operator=(const uring_file&) = delete;
  ~uring_file();

  /// Opens `path` with O_DIRECT (mode 0600 when created). errc::unsupported if
  /// the filesystem refuses O_DIRECT, errc::io_error otherwise (details in
  /// last_io_error()).
  static result<uring_file> open(const std::string& path, file_mode mode);

  /// Reads exactly dst.size() bytes at `offset`. Buffer address, offset and
  /// length must be multiples of direct_io_alignment (errc::misaligned,
  /// checked before anything is submitted). Short transfers are resubmitted
  /// for the remainder; a read hitting end of file yields errc::short_io.
  /// Errors: errc::io_error (errno in last_io_error()), errc::cancelled.
  /// Cancellation: the kernel request is cancelled, and the coroutine only
  /// resumes once the kernel has released the buffer (the CQE arrived), so
  /// `dst` is never written after this returns. Must be awaited on a thread
  /// that runs an io_context (a runtime thread).
  task<result<std::size_t>> read_at(std::uint64_t offset, std::span<std::byte> dst) const;

  /// Writes exactly src.size() bytes at `offset`; same rules as read_at, plus
  /// errc::no_space on ENOSPC / EFBIG (file size limit) and errc::short_io
  /// if the kernel writes nothing.
  task<result<std::size_t>> write_at(std::uint64_t offset, std::span<const std::byte> src) const;

  /// Preallocates [0, size) with fallocate (errc::no_space if the device is
  /// too small; errc::unsupported if the filesystem cannot).
  result<void> allocate(std::uint64_t size) const;
  /// Discards the content of [offset, offset+len) (FALLOC_FL_PUNCH_HOLE |
  /// KEEP_SIZE); errc::unsupported where not available.
  result<void> discard(std::uint64_t offset, std::uint64_t len) const;
  /// Current file size.
  result<std::uint64_t> size() const;

  bool is_open() const noexcept { return fd_ >= 0; }
  int native_handle() const noexcept { return fd_; }
  const std::string& path() const noexcept { return path_; }
  void close() noexcept;

 private:
  int fd_ = -1;
  std::string path_;
};

/// Counters of the calling thread's ring (zero if it has none).
struct uring_thread_stats {
  std::uint64_t fixed_ops = 0;          ///< submitted as read_fixed/write_fixed
  std::uint64_t plain_ops = 0;          ///< submitted as plain read/write
  std::uint64_t resubmits = 0;          ///< short transfers continued
  std::uint64_t cancels = 0;            ///< cancellation requests sent to the kernel
  std::uint64_t register_failures = 0;  ///< regions this ring could not pin
  /// io_uring_submit system calls. Operations started by coroutines that a
  /// completion round resumed are submitted together, so under concurrency
  /// this stays below fixed_ops + plain_ops.
  std::uint64_t submit_calls = 0;
};
/// Must be awaited on a runtime thread; returns that thread's ring counters.
task<uring_thread_stats> current_uring_stats();

}  // namespace mc::runtime
