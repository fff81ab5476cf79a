// capnp messages read into pooled buffers (see message_stream.hpp).
#include "message_stream.hpp"

#include <capnp/rpc.capnp.h>
#include <kj/debug.h>

#include <algorithm>
#include <array>
#include <bit>

namespace mc::rpc::detail {
namespace {

constexpr std::size_t word_bytes = sizeof(capnp::word);
constexpr std::uint64_t max_segments = 512;  // capnp's own bound (serialize-async.c++)

/// Bytes of the buffer take() hands out for `words` words: a power of two
/// from min_bytes while pooled, the exact size above max_pooled.
std::size_t class_bytes(std::size_t words) {
  const std::size_t bytes = std::max<std::size_t>(words, 1) * word_bytes;
  if (bytes > recv_pool::max_pooled) return bytes;
  return std::max(recv_pool::min_bytes, std::bit_ceil(bytes));
}

std::uint32_t le32(const kj::byte* p) noexcept {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

/// A read in progress: the segment table as read, and the buffer, which
/// goes back to the pool if the read fails or is dropped.
struct read_state {
  read_state(std::shared_ptr<recv_pool> p, capnp::ReaderOptions o) : pool(std::move(p)), options(o) {}
  ~read_state() {
    if (buffer != nullptr) pool->give(kj::mv(buffer));
  }
  KJ_DISALLOW_COPY(read_state);

  /// Segments announced by the first word (1..2^32).
  std::uint64_t count() const noexcept { return static_cast<std::uint64_t>(le32(first)) + 1; }
  /// Words of segment `i` (< count(); the sizes after the first come from `rest`).
  std::uint32_t size(std::uint64_t i) const noexcept { return le32(i == 0 ? first + 4 : rest.begin() + (i - 1) * 4); }

  std::shared_ptr<recv_pool> pool;
  capnp::ReaderOptions options;
  kj::byte first[8] = {};    // segment count - 1, size of segment 0 (words)
  kj::Array<kj::byte> rest;  // sizes of segments 1.. (and padding to a word)
  kj::Array<capnp::word> buffer;
};

/// One message's segments over a pooled buffer, given back on destruction.
class pooled_reader final : public capnp::MessageReader {
 public:
  /// Takes `s`'s buffer, laid out as `s`'s (complete) segment table says.
  explicit pooled_reader(read_state& s)
      : capnp::MessageReader(s.options), pool_(s.pool), buffer_(kj::mv(s.buffer)), count_(s.count()) {
    if (count_ > inline_.size()) more_ = kj::heapArray<kj::ArrayPtr<const capnp::word>>(count_);
    auto segs = segments();
    const capnp::word* at = buffer_.begin();
    for (std::size_t i = 0; i < count_; ++i) {
      segs[i] = kj::arrayPtr(at, s.size(i));
      at += s.size(i);
    }
  }
  ~pooled_reader() noexcept(false) override { pool_->give(kj::mv(buffer_)); }
  KJ_DISALLOW_COPY(pooled_reader);

  kj::ArrayPtr<const capnp::word> getSegment(uint id) override {
    if (id >= count_) return nullptr;
    return segments()[id];
  }
  /// Every segment of the message, in order.
  call_ledger::segments all_segments() { return segments().slice(0, count_); }

 private:
  kj::ArrayPtr<kj::ArrayPtr<const capnp::word>> segments() {
    if (more_ != nullptr) return more_;
    return kj::arrayPtr(inline_.data(), inline_.size());
  }

  std::shared_ptr<recv_pool> pool_;
  kj::Array<capnp::word> buffer_;
  std::size_t count_;
  std::array<kj::ArrayPtr<const capnp::word>, 2> inline_{};
  kj::Array<kj::ArrayPtr<const capnp::word>> more_;
};

}  // namespace

void call_ledger::note(segments message, std::unordered_set<std::uint32_t>& opened,
                       std::unordered_set<std::uint32_t>& answered) noexcept {
  // A message in one direction opens a question of its sender (Call,
  // Bootstrap), closes one of its sender (Finish) or answers one of the
  // other side (Return).
  using msg = capnp::rpc::Message;
  try {
    capnp::SegmentArrayMessageReader reader(message);
    auto m = reader.getRoot<msg>();
    switch (m.which()) {
      case msg::CALL:
        if (opened.size() < max_tracked) opened.insert(m.getCall().getQuestionId());
        break;
      case msg::BOOTSTRAP:
        if (opened.size() < max_tracked) opened.insert(m.getBootstrap().getQuestionId());
        break;
      case msg::FINISH:
        opened.erase(m.getFinish().getQuestionId());
        break;
      case msg::RETURN:
        answered.erase(m.getReturn().getAnswerId());
        break;
      default:
        break;
    }
  } catch (...) {
    // Not an RPC message we can read (the RPC system refuses it), or no
    // memory to note it: not counted.
  }
}

recv_pool::recv_pool() { free_.reserve(max_free); }

kj::Array<capnp::word> recv_pool::take(std::size_t words) {
  const std::size_t bytes = class_bytes(words);
  if (bytes <= max_pooled) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->size() * word_bytes != bytes) continue;
      auto out = kj::mv(*it);
      free_.erase(it);
      retained_ -= bytes;
      ++reused_;
      return out;
    }
  }
  ++allocated_;
  return kj::heapArray<capnp::word>(bytes / word_bytes);
}

void recv_pool::give(kj::Array<capnp::word> buffer) noexcept {
  if (buffer == nullptr) return;
  const std::size_t bytes = buffer.size() * word_bytes;
  if (bytes > max_pooled || free_.size() >= max_free || retained_ + bytes > max_retained) {
    ++dropped_;
    return;  // `buffer` is freed
  }
  retained_ += bytes;
  free_.push_back(kj::mv(buffer));  // within the capacity reserved up front: no allocation
}

recv_pool::stats recv_pool::snapshot() const noexcept {
  return stats{reused_, allocated_, dropped_, free_.size(), retained_};
}

pooled_message_stream::pooled_message_stream(kj::AsyncIoStream& stream, std::shared_ptr<recv_pool> pool,
                                             bool track_calls)
    : stream_(stream), writer_(stream), pool_(std::move(pool)), track_calls_(track_calls) {}

kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> pooled_message_stream::tryReadMessage(kj::ArrayPtr<kj::AutoCloseFd>,
                                                                                         capnp::ReaderOptions options,
                                                                                         kj::ArrayPtr<capnp::word>) {
  using result = kj::Maybe<capnp::MessageReaderAndFds>;
  auto owned = kj::heap<read_state>(pool_, options);
  read_state* s = owned.get();

  // The segments, once the whole table is known.
  auto read_segments = [this, s]() -> kj::Promise<result> {
    std::uint64_t total = 0;
    for (std::uint64_t i = 0; i < s->count(); ++i) total += s->size(i);
    KJ_REQUIRE(total <= s->options.traversalLimitInWords,
               "Message is too large.  To increase the limit on the receiving end, see capnp::ReaderOptions.", total,
               s->options.traversalLimitInWords);
    s->buffer = s->pool->take(static_cast<std::size_t>(total));
    return stream_.read(s->buffer.begin(), static_cast<std::size_t>(total) * word_bytes).then([this, s]() -> result {
      auto reader = kj::heap<pooled_reader>(*s);
      if (track_calls_) calls_.on_received(reader->all_segments());
      return capnp::MessageReaderAndFds{kj::mv(reader), nullptr};
    });
  };

  return stream_.tryRead(s->first, sizeof s->first, sizeof s->first)
      .then([this, s, read_segments](std::size_t n) mutable -> kj::Promise<result> {
        if (n == 0) return result(nullptr);  // EOF between messages
        KJ_REQUIRE(n == sizeof s->first, "Premature EOF.");
        const std::uint64_t count = s->count();
        KJ_REQUIRE(count < max_segments, "Message has too many segments.", count);
        if (count == 1) return read_segments();
        // The table's remaining entries, padded to a whole word.
        s->rest = kj::heapArray<kj::byte>(static_cast<std::size_t>(count & ~std::uint64_t{1}) * 4);
        return stream_.read(s->rest.begin(), s->rest.size()).then(kj::mv(read_segments));
      })
      .attach(kj::mv(owned));
}

kj::Promise<void> pooled_message_stream::writeMessage(kj::ArrayPtr<const int> fds,
                                                      kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) {
  if (track_calls_) calls_.on_sent(segments);
  return writer_.writeMessage(fds, segments);
}

kj::Promise<void> pooled_message_stream::writeMessages(
    kj::ArrayPtr<kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>>> messages) {
  if (track_calls_)
    for (auto m : messages) calls_.on_sent(m);
  return writer_.writeMessages(messages);
}

kj::Maybe<int> pooled_message_stream::getSendBufferSize() { return writer_.getSendBufferSize(); }

kj::Promise<void> pooled_message_stream::end() { return writer_.end(); }

}  // namespace mc::rpc::detail
