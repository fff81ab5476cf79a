#pragma once
// kj::AsyncIoStream over an asio TCP socket, reactive: readiness is awaited
// with async_wait and data moves with non-blocking read/write, so the kernel
// never holds a KJ buffer across a suspension and dropping a KJ promise is
// always safe (with io_uring a pending recv would write into freed memory).
// Asio handlers hold only a shared_ptr to plain state, never a KJ object.
#include "stream_base.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <kj/async-io.h>

#include <atomic>
#include <chrono>
#include <memory>

namespace mc::rpc::detail {

/// Whether `pieces` (what capnp's writeMessage hands a stream: the segment
/// table, then the segments) are one whole rpc.capnp Message whose union is
/// `finish`. Only reads inside the pieces; anything malformed is "no".
bool is_rpc_finish(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) noexcept;

class asio_stream final : public stream_base {
 public:
  /// `sock` must belong to the calling thread's io_context.
  explicit asio_stream(boost::asio::ip::tcp::socket sock);
  ~asio_stream() noexcept(false);

  kj::Promise<size_t> tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override;
  kj::Promise<void> write(const void* buffer, size_t size) override;
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override;
  kj::Promise<void> whenWriteDisconnected() override;
  void shutdownWrite() override;
  void abortRead() override;
  void getsockopt(int level, int option, void* value, kj::uint* length) override;
  void setsockopt(int level, int option, const void* value, kj::uint length) override;
  kj::Maybe<int> getFd() const override;

  mc::time_point last_activity() const noexcept override { return last_activity_; }
  void close() noexcept override;
  const char* transport() const noexcept override { return "tcp"; }

  struct core;

 private:
  kj::Promise<void> wait_readable();
  kj::Promise<void> wait_writable();
  kj::Promise<size_t> read_loop(kj::byte* buf, size_t min_bytes, size_t max_bytes, size_t done);
  kj::Promise<void> write_loop(const kj::byte* buf, size_t size);
  kj::Promise<void> writev_loop(kj::Array<kj::ArrayPtr<const kj::byte>> pieces, size_t first);

  /// The deferred Finish bytes (if any) followed by `pieces`, and the buffer
  /// holding them (kept alive by the write).
  kj::Promise<void> write_after_deferred(kj::Array<kj::ArrayPtr<const kj::byte>> pieces);
  void arm_deferred_flush();

  static constexpr size_t read_ahead_bytes = 8192;
  // Finish messages (the caller releasing an answered call) are not sent on
  // their own: they go out in front of the next message written on this
  // connection, else on their own when `finish_delay` has passed (one timer
  // per connection, armed by the first deferred Finish). A Finish is on
  // nobody's critical path (the peer only frees the answered call then); on
  // a request/reply stream this saves a send here and a wake-up, a receive
  // and an epoll_ctl on the peer per call, also at one call in flight, where
  // the next call follows the reply within tens of microseconds (two hops
  // through the executor's queue, the earlier rule, were too short for
  // that). Order is kept: a question id may be reused only after its
  // Finish, and the Finish always goes first. Bounded: past
  // max_deferred_bytes a Finish is written with what is deferred.
  static constexpr size_t max_deferred_bytes = 4096;
  static constexpr std::chrono::microseconds finish_delay{1000};
  std::shared_ptr<core> core_;
  mc::time_point last_activity_;
  // Read-ahead: small reads (capnp reads a frame header, then its segments)
  // take whatever is queued in one recv. Owned by the stream; only touched
  // synchronously, never by the kernel across a suspension.
  std::unique_ptr<kj::byte[]> rbuf_ = std::make_unique<kj::byte[]>(read_ahead_bytes);
  size_t rpos_ = 0;
  size_t rend_ = 0;
  // The last recv returned less than it asked for: the socket was empty then,
  // so the next read that needs bytes waits for readiness first instead of
  // a recv that would most likely fail with EAGAIN (one system call per
  // message saved on a request/reply stream).
  bool drained_ = false;
};

}  // namespace mc::rpc::detail
