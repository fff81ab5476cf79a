#pragma once
// capnp::MessageStream over a kj::AsyncIoStream whose incoming messages are
// read into buffers reused from a per-thread pool (recv_pool) instead of a
// fresh heap array per message, as capnp's own AsyncIoMessageStream does.
//
// Why: a get of a 64 KiB value comes back inside one ~64 KiB reply message.
// With a fresh array per message glibc's malloc can fall into a trim cycle
// (free() returns the top of a thread arena with madvise(MADV_DONTNEED), the
// next message's recv() faults every page in again, each madvise flushing
// TLBs across CPUs): measured on store_bench's 64 KiB gets at 8 in flight,
// 4x the CPU per get and a quarter of the throughput, depending on history
// (glibc raises its thresholds only once a large mmapped chunk has been
// freed). Reused buffers never go back to the kernel, so recv() copies into
// resident pages.
//
// Writes are capnp's AsyncIoMessageStream's (unchanged). Optionally the
// stream keeps a call_ledger of the RPC questions open on the connection
// (the client cache does not close an "idle" connection a call still waits on).
//
// Thread-safety: none; a stream, its pool and every reader it returned live
// on one thread (KJ objects are thread-confined).
#include <capnp/serialize-async.h>
#include <kj/async-io.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_set>
#include <vector>

namespace mc::rpc::detail {

/// Free receive buffers of one thread, by size class (powers of two words
/// from 8 KiB). Bounded: at most `max_free` buffers and `max_retained`
/// bytes are kept; buffers above `max_pooled` bytes are never kept.
class recv_pool {
 public:
  static constexpr std::size_t min_bytes = 8 * 1024;
  static constexpr std::size_t max_pooled = 2u * 1024 * 1024;
  static constexpr std::size_t max_retained = 8u * 1024 * 1024;
  static constexpr std::size_t max_free = 64;

  struct stats {
    std::uint64_t reused = 0;     ///< take() served from the pool
    std::uint64_t allocated = 0;  ///< take() that allocated
    std::uint64_t dropped = 0;    ///< give() that freed (over a bound, or too big)
    std::size_t free_buffers = 0;
    std::size_t retained_bytes = 0;
  };

  recv_pool();

  /// A buffer of at least `words` words (contents unspecified). Throws
  /// std::bad_alloc like any allocation.
  kj::Array<capnp::word> take(std::size_t words);
  /// Returns a buffer from take(); kept or freed within the bounds.
  void give(kj::Array<capnp::word> buffer) noexcept;
  stats snapshot() const noexcept;

 private:
  std::vector<kj::Array<capnp::word>> free_;
  std::size_t retained_ = 0;
  std::uint64_t reused_ = 0, allocated_ = 0, dropped_ = 0;
};

/// The calls open on one connection, seen from the RPC messages crossing it
/// (capnp's rpc.capnp): a question this side asked (Call, Bootstrap) is open
/// from the moment the message is handed to the stream until its Return
/// arrives or this side sends its Finish (a cancelled call); a question the
/// peer asked, from its arrival until this side sends its Return or the
/// peer's Finish arrives. Messages that do not parse, and questions beyond
/// max_tracked per direction, are not counted.
class call_ledger {
 public:
  static constexpr std::size_t max_tracked = 65536;
  using segments = kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>>;

  void on_sent(segments message) noexcept { note(message, asked_, answering_); }
  void on_received(segments message) noexcept { note(message, answering_, asked_); }
  /// Questions open in both directions.
  std::size_t open() const noexcept { return asked_.size() + answering_.size(); }

 private:
  static void note(segments message, std::unordered_set<std::uint32_t>& opened,
                   std::unordered_set<std::uint32_t>& answered) noexcept;

  std::unordered_set<std::uint32_t> asked_;      // by this side
  std::unordered_set<std::uint32_t> answering_;  // by the peer
};

class pooled_message_stream final : public capnp::MessageStream {
 public:
  /// `stream` must outlive this object; `pool` is shared with the readers
  /// this stream returns (they give their buffer back when destroyed).
  /// `track_calls`: keep a call_ledger of the messages written and read
  /// (open_calls()); off, open_calls() is always 0.
  pooled_message_stream(kj::AsyncIoStream& stream, std::shared_ptr<recv_pool> pool, bool track_calls = false);

  /// Calls open on this connection (call_ledger::open()), when tracked.
  std::size_t open_calls() const noexcept { return calls_.open(); }

  /// Reads one message (null at a clean EOF between messages). The segment
  /// table is checked before anything is allocated: fewer than 512
  /// segments and no more than options.traversalLimitInWords words in all
  /// (capnp's own limits), else the promise fails with a kj::Exception, as
  /// it does on EOF inside a message. No file descriptors are received
  /// (`fdSpace` is ignored) and `scratchSpace` is not used (the pool is).
  kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> tryReadMessage(
      kj::ArrayPtr<kj::AutoCloseFd> fdSpace, capnp::ReaderOptions options = capnp::ReaderOptions(),
      kj::ArrayPtr<capnp::word> scratchSpace = nullptr) override;
  kj::Promise<void> writeMessage(kj::ArrayPtr<const int> fds,
                                 kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) override;
  kj::Promise<void> writeMessages(kj::ArrayPtr<kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>>> messages) override;
  kj::Maybe<int> getSendBufferSize() override;
  kj::Promise<void> end() override;

  using capnp::MessageStream::tryReadMessage;

 private:
  kj::AsyncIoStream& stream_;
  capnp::AsyncIoMessageStream writer_;
  std::shared_ptr<recv_pool> pool_;
  bool track_calls_;
  call_ledger calls_;
};

}  // namespace mc::rpc::detail
