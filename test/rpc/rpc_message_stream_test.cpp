// Incoming Cap'n Proto messages read into pooled buffers
// (lib/rpc/src/message_stream.hpp): contents intact for every size and
// segment layout, buffers reused and the pool bounded, hostile segment
// tables refused before anything is allocated, EOF inside a message an
// error and EOF between messages a clean end. Every RPC connection reads
// through this stream, so the RPC suites cover it end to end as well. The
// call ledger (which RPC questions are open) follows Call, Bootstrap,
// Return and Finish in both directions and ignores anything else.
#include "message_stream.hpp"

#include <capnp/message.h>
#include <capnp/rpc.capnp.h>
#include <capnp/serialize-async.h>
#include <capnp/serialize.h>
#include <doctest/doctest.h>
#include <kj/async-io.h>
#include <kj/async.h>
#include <kj/exception.h>
#include <kj/vector.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

using mc::rpc::detail::call_ledger;
using mc::rpc::detail::pooled_message_stream;
using mc::rpc::detail::recv_pool;

/// A KJ loop and a socket pair (kernel-buffered, so a write need not wait
/// for its read); `in` reads end 1 through the pool.
struct fixture {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::WaitScope& ws = io.waitScope;
  kj::TwoWayPipe pipe = io.provider->newTwoWayPipe();
  std::shared_ptr<recv_pool> pool = std::make_shared<recv_pool>();
  pooled_message_stream in{*pipe.ends[1], pool};
  kj::Vector<kj::Promise<void>> writes;  // in flight while the reads run

  void send_raw(const std::vector<kj::byte>& bytes) {
    auto copy = kj::heapArray<kj::byte>(bytes.data(), bytes.size());
    auto* data = copy.begin();
    writes.add(pipe.ends[0]->write(data, copy.size()).attach(kj::mv(copy)).eagerlyEvaluate(nullptr));
  }
  /// A message whose root (an AnyPointer) is a Data blob of `payload`, built
  /// with a first segment of `first_words`, so that big blobs land in
  /// further segments.
  void send(const std::vector<kj::byte>& payload, unsigned first_words) {
    capnp::MallocMessageBuilder b(first_words, capnp::AllocationStrategy::FIXED_SIZE);
    b.getRoot<capnp::AnyPointer>().setAs<capnp::Data>(kj::arrayPtr(payload.data(), payload.size()));
    auto words = capnp::messageToFlatArray(b);
    auto bytes = words.asBytes();
    writes.add(pipe.ends[0]->write(bytes.begin(), bytes.size()).attach(kj::mv(words)).eagerlyEvaluate(nullptr));
  }
  kj::Maybe<kj::Own<capnp::MessageReader>> read(capnp::ReaderOptions o = {}) { return in.tryReadMessage(o).wait(ws); }
};

std::vector<kj::byte> random_bytes(std::mt19937_64& g, std::size_t n) {
  std::vector<kj::byte> v(n);
  for (auto& b : v) b = static_cast<kj::byte>(g());
  return v;
}

std::vector<kj::byte> le32s(std::initializer_list<std::uint32_t> words) {
  std::vector<kj::byte> out;
  for (auto w : words)
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<kj::byte>(w >> (8 * i)));
  return out;
}

std::string failure_of(fixture& f, capnp::ReaderOptions o = {}) {
  try {
    (void)f.read(o);
  } catch (const kj::Exception& e) {
    return e.getDescription().cStr();
  }
  return "";
}

}  // namespace

TEST_CASE("messages of every size and segment layout arrive intact through pooled buffers") {
  fixture f;
  std::mt19937_64 g(7);
  // Sizes around the pool's classes and bounds, none a multiple of a word.
  const std::size_t sizes[] = {
      0, 1, 7, 4095, 8191, 8193, 65535, 65537, 131071, 300001, 1048575, recv_pool::max_pooled + 5, 3 << 20};
  for (unsigned first_words : {8u, 1024u, 70000u}) {
    for (auto n : sizes) {
      auto payload = random_bytes(g, n);
      f.send(payload, first_words);
      auto r = f.read();
      capnp::MessageReader* reader = nullptr;
      KJ_IF_MAYBE (m, r) {
        reader = m->get();
      }
      REQUIRE(reader != nullptr);
      auto got = reader->getRoot<capnp::AnyPointer>().getAs<capnp::Data>();
      REQUIRE(got.size() == n);
      if (n > 0) CHECK(std::memcmp(got.begin(), payload.data(), n) == 0);  // (memcmp of null: UB)
    }
  }
  const auto s = f.pool->snapshot();
  CHECK(s.reused > 0);  // one message at a time: buffers come back and are taken again
  CHECK(s.retained_bytes <= recv_pool::max_retained);
  CHECK(s.free_buffers <= recv_pool::max_free);
  // EOF between messages: a clean end.
  f.pipe.ends[0]->shutdownWrite();
  CHECK(f.read() == nullptr);
}

TEST_CASE("the pool reuses buffers and stays within its bounds however many messages were held") {
  fixture f;
  std::mt19937_64 g(8);
  std::vector<kj::Own<capnp::MessageReader>> held;
  for (int i = 0; i < 200; ++i) {  // 200 x ~100 KiB alive at once: more than the pool keeps
    f.send(random_bytes(g, 100 * 1024 + static_cast<std::size_t>(i)), 1024);
    auto r = f.read();
    KJ_IF_MAYBE (m, r) {
      held.push_back(kj::mv(*m));
    }
  }
  REQUIRE(held.size() == 200);
  CHECK(f.pool->snapshot().allocated >= 200);
  held.clear();
  auto s = f.pool->snapshot();
  CHECK(s.free_buffers <= recv_pool::max_free);
  CHECK(s.retained_bytes <= recv_pool::max_retained);
  CHECK(s.dropped > 0);
  // The next messages of that size are served from the pool.
  const auto before = s.allocated;
  for (int i = 0; i < 20; ++i) {
    f.send(random_bytes(g, 90 * 1024), 1024);
    (void)f.read();
  }
  CHECK(f.pool->snapshot().allocated == before);
  // Above max_pooled: allocated for the message, never kept.
  f.send(random_bytes(g, recv_pool::max_pooled + 1), 1024);
  (void)f.read();
  s = f.pool->snapshot();
  CHECK(s.allocated == before + 1);
  CHECK(s.retained_bytes <= recv_pool::max_retained);
}

TEST_CASE("hostile segment tables are refused before anything is allocated") {
  SUBCASE("512 segments") {
    fixture f;
    auto bytes = le32s({511, 1});
    f.send_raw(bytes);
    CHECK(failure_of(f).find("too many segments") != std::string::npos);
    CHECK(f.pool->snapshot().allocated == 0);
  }
  SUBCASE("a segment count that wraps (0xffffffff + 1)") {
    fixture f;
    f.send_raw(le32s({0xffffffffu, 1}));
    CHECK(failure_of(f).find("too many segments") != std::string::npos);
    CHECK(f.pool->snapshot().allocated == 0);
  }
  SUBCASE("more words than the traversal limit, in one segment or summed over several") {
    for (bool several : {false, true}) {
      fixture f;
      capnp::ReaderOptions o;
      o.traversalLimitInWords = 1024;
      if (several)
        f.send_raw(le32s({2, 0xffffffffu, 0xffffffffu, 0xffffffffu}));  // 3 segments, sizes sum past 2^32
      else
        f.send_raw(le32s({0, 1025}));
      CHECK(failure_of(f, o).find("too large") != std::string::npos);
      CHECK(f.pool->snapshot().allocated == 0);
    }
  }
  SUBCASE("EOF inside the first word, the segment table or a segment") {
    for (int where = 0; where < 3; ++where) {
      fixture f;
      std::vector<kj::byte> bytes;
      if (where == 0) bytes = {1, 0, 0};
      if (where == 1) bytes = le32s({2, 4, 4});              // 3 segments, one size of two missing
      if (where == 2) bytes = le32s({0, 4, 0xdeadbeef, 7});  // 4 words announced, 1 sent
      f.send_raw(bytes);
      f.pipe.ends[0]->shutdownWrite();
      CHECK_FALSE(failure_of(f).empty());
    }
  }
}

namespace {

/// One rpc.capnp Message of kind `kind` ("call", "bootstrap", "return",
/// "finish", "release") naming question `id`, and a ledger fed its segments.
struct rpc_message {
  capnp::MallocMessageBuilder b;
  rpc_message(const std::string& kind, std::uint32_t id) {
    auto m = b.getRoot<capnp::rpc::Message>();
    if (kind == "call") m.initCall().setQuestionId(id);
    if (kind == "bootstrap") m.initBootstrap().setQuestionId(id);
    if (kind == "return") m.initReturn().setAnswerId(id);
    if (kind == "finish") m.initFinish().setQuestionId(id);
    if (kind == "release") m.initRelease().setId(id);
  }
  call_ledger::segments segments() { return b.getSegmentsForOutput(); }
};

void sent(call_ledger& l, const std::string& kind, std::uint32_t id) {
  rpc_message m(kind, id);
  l.on_sent(m.segments());
}
void received(call_ledger& l, const std::string& kind, std::uint32_t id) {
  rpc_message m(kind, id);
  l.on_received(m.segments());
}

}  // namespace

TEST_CASE("the call ledger counts the questions open in each direction") {
  SUBCASE("ours: open from Call or Bootstrap until its Return arrives or we send its Finish") {
    call_ledger l;
    sent(l, "bootstrap", 0);
    sent(l, "call", 1);
    sent(l, "call", 2);
    CHECK(l.open() == 3);
    received(l, "return", 0);
    sent(l, "finish", 0);  // after its Return: nothing left to close
    CHECK(l.open() == 2);
    sent(l, "finish", 1);  // cancelled before its Return
    CHECK(l.open() == 1);
    received(l, "return", 1);  // the late Return of the cancelled call
    CHECK(l.open() == 1);
    received(l, "release", 2);
    sent(l, "release", 2);
    CHECK(l.open() == 1);
    received(l, "return", 2);
    CHECK(l.open() == 0);
  }
  SUBCASE("theirs: open from their Call until we send its Return or their Finish arrives") {
    call_ledger l;
    received(l, "call", 7);
    received(l, "bootstrap", 8);
    CHECK(l.open() == 2);
    sent(l, "return", 7);
    CHECK(l.open() == 1);
    received(l, "finish", 8);
    CHECK(l.open() == 0);
    // A question id of ours and one of theirs are separate numbering spaces.
    sent(l, "call", 3);
    received(l, "call", 3);
    CHECK(l.open() == 2);
    received(l, "return", 3);
    CHECK(l.open() == 1);
    sent(l, "return", 3);
    CHECK(l.open() == 0);
  }
  SUBCASE("a Return or Finish for an unknown question, or a repeated Call id, changes nothing else") {
    call_ledger l;
    received(l, "return", 42);
    sent(l, "finish", 42);
    received(l, "finish", 42);
    sent(l, "return", 42);
    CHECK(l.open() == 0);
    sent(l, "call", 5);
    sent(l, "call", 5);
    CHECK(l.open() == 1);
    received(l, "return", 5);
    CHECK(l.open() == 0);
  }
  SUBCASE("bytes that are not an RPC message are not counted and do not throw") {
    call_ledger l;
    std::mt19937_64 g(11);
    for (int i = 0; i < 200; ++i) {
      std::vector<std::uint64_t> raw(1 + g() % 16);
      for (auto& v : raw) v = g();
      auto words = kj::heapArray<capnp::word>(raw.size());
      std::memcpy(words.asBytes().begin(), raw.data(), raw.size() * sizeof(std::uint64_t));
      kj::ArrayPtr<const capnp::word> seg(words.begin(), words.size());
      l.on_received(kj::arrayPtr(&seg, 1));
      l.on_sent(kj::arrayPtr(&seg, 1));
    }
    l.on_received(nullptr);
    l.on_sent(nullptr);
    // At most what happened to parse as a Call or Bootstrap is open.
    CHECK(l.open() <= 400);
  }
}

TEST_CASE("a stream that tracks calls sees them open and close through its own writes and reads") {
  fixture f;
  pooled_message_stream tracked{*f.pipe.ends[0], f.pool, true};
  pooled_message_stream untracked{*f.pipe.ends[1], f.pool};
  rpc_message call("call", 9), ret("return", 9);
  tracked.writeMessage(nullptr, call.segments()).wait(f.ws);
  CHECK(tracked.open_calls() == 1);
  // The other end reads it (untracked: always 0) and answers.
  auto in = untracked.tryReadMessage(capnp::ReaderOptions()).wait(f.ws);
  REQUIRE(in != nullptr);
  CHECK(untracked.open_calls() == 0);
  untracked.writeMessage(nullptr, ret.segments()).wait(f.ws);
  auto back = tracked.tryReadMessage(capnp::ReaderOptions()).wait(f.ws);
  capnp::MessageReader* reader = nullptr;
  KJ_IF_MAYBE (m, back) {
    reader = m->get();
  }
  REQUIRE(reader != nullptr);
  CHECK(tracked.open_calls() == 0);
  // The message read is intact: the ledger peeked at it without consuming it.
  auto root = reader->getRoot<capnp::rpc::Message>();
  CHECK(root.isReturn());
  CHECK(root.getReturn().getAnswerId() == 9);
}
