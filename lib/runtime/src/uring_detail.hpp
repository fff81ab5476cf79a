#pragma once
// Internals of the io_uring file I/O (not a public header).
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"
#include "mc/runtime/uring_file.hpp"

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <liburing.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace mc::runtime::detail {

inline constexpr unsigned max_fixed_slots = 64;
/// The kernel refuses registered iovecs above 1 GiB.
inline constexpr std::size_t max_fixed_iov = std::size_t(1) << 30;

/// Process-wide table of regions registered for fixed-buffer I/O. Each slot
/// carries a generation, changed on every register/unregister, so rings can
/// tell whether what they pinned is still current.
class fixed_registry {
 public:
  struct slot {
    std::byte* base = nullptr;
    std::size_t len = 0;
    std::uint64_t gen = 0;
  };
  struct hit {
    int index = -1;
    slot s;
  };
  static fixed_registry& instance();

  /// Reserves `count` consecutive free slots; returns the first or -1.
  int add(std::byte* base, std::size_t len, unsigned count);
  void remove(unsigned first, unsigned count) noexcept;
  /// The slot fully containing [p, p+n), if any.
  hit find(const void* p, std::size_t n) const;
  slot get(unsigned i) const;
  std::uint64_t version() const noexcept { return version_.load(std::memory_order_acquire); }

 private:
  mutable std::mutex m_;
  std::array<slot, max_fixed_slots> slots_{};
  std::uint64_t next_gen_ = 1;
  std::atomic<std::uint64_t> version_{0};
};

/// Records an I/O error for last_io_error() and returns the matching code.
boost::system::error_code record_errno(int err, const char* op, const std::string& what);

/// One io_uring per io_context (= per runtime thread), created lazily, owned
/// and only touched by the thread running that context.
class ring_service : public boost::asio::execution_context::service {
 public:
  static boost::asio::execution_context::id id;
  explicit ring_service(boost::asio::execution_context& ctx);
  ~ring_service() override;

  /// Returns the service of the io_context behind `ex`, its ring set up.
  static result<ring_service*> for_executor(const mc::executor& ex);

  enum class op_kind { read, write };
  /// Submits one read/write and completes with the CQE's res (negative errno
  /// on failure). Completes only once the CQE arrived, even when cancelled.
  task<int> submit_rw(op_kind kind, int fd, void* buf, unsigned len, std::uint64_t offset);

  uring_thread_stats stats;

  struct op_base {
    void (*complete)(op_base*, int res, bool invoke) = nullptr;
  };

 private:
  void shutdown() override;
  result<void> setup(const mc::executor& ex);
  io_uring_sqe* get_sqe();
  void start(op_base* op, op_kind kind, int fd, void* buf, unsigned len, std::uint64_t offset);
  void request_cancel(op_base* op);
  int fixed_index(const void* buf, std::size_t len);
  void sync_registry();
  void arm();
  void on_ready();
  void submit_now();

  template <class Handler>
  struct op;

  io_uring ring_{};
  bool ring_ok_ = false;
  bool fixed_ok_ = false;
  int efd_ = -1;
  std::unique_ptr<boost::asio::posix::stream_descriptor> desc_;
  bool armed_ = false;
  bool retry_posted_ = false;
  bool in_round_ = false;         // on_ready is completing handlers: start() defers its submit
  std::size_t pending_cqes_ = 0;  // SQEs submitted whose CQE is outstanding
  std::uint64_t synced_version_ = 0;
  std::array<std::uint64_t, max_fixed_slots> ring_gen_{};    // gen pinned in the ring (0: none)
  std::array<std::uint64_t, max_fixed_slots> failed_gen_{};  // gen this ring failed to pin
};

}  // namespace mc::runtime::detail
