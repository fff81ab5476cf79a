// The TCP stream defers capnp Finish messages and sends them in front of the
// next message (lib/rpc/src/asio_stream.hpp). Which messages count as a
// Finish is decided on the bytes capnp hands the stream: real rpc.capnp
// messages of every kind, and malformed pieces, are classified here.
#include <capnp/message.h>
#include <capnp/rpc.capnp.h>
#include <doctest/doctest.h>
#include <kj/array.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

namespace mc::rpc::detail {
// Defined in lib/rpc/src/asio_stream.cpp (a private header declares it).
bool is_rpc_finish(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) noexcept;
}  // namespace mc::rpc::detail

namespace {

/// What capnp::writeMessage hands a stream for a one-segment message: the
/// segment table (count - 1, the segment's words), then the segment.
struct wire {
  std::vector<kj::byte> table, segment;
  bool finish() const {
    kj::ArrayPtr<const kj::byte> pieces[2] = {kj::arrayPtr(table.data(), table.size()),
                                              kj::arrayPtr(segment.data(), segment.size())};
    return mc::rpc::detail::is_rpc_finish(kj::arrayPtr(pieces, 2));
  }
};

wire encode(const std::function<void(capnp::rpc::Message::Builder)>& fill) {
  capnp::MallocMessageBuilder b;
  fill(b.initRoot<capnp::rpc::Message>());
  auto segs = b.getSegmentsForOutput();
  REQUIRE(segs.size() == 1);
  wire w;
  std::uint32_t t[2] = {0, static_cast<std::uint32_t>(segs[0].size())};
  w.table.resize(8);
  std::memcpy(w.table.data(), t, 8);
  auto bytes = segs[0].asBytes();
  w.segment.assign(bytes.begin(), bytes.end());
  return w;
}

}  // namespace

TEST_SUITE("rpc unit") {
  TEST_CASE("only a whole rpc.capnp Finish message is deferred") {
    auto fin = encode([](capnp::rpc::Message::Builder m) {
      auto f = m.initFinish();
      f.setQuestionId(7);
      f.setReleaseResultCaps(true);
    });
    CHECK(fin.finish());
    auto fin0 = encode([](capnp::rpc::Message::Builder m) { m.initFinish(); });
    CHECK(fin0.finish());
    CHECK_FALSE(encode([](capnp::rpc::Message::Builder m) {
                  auto c = m.initCall();
                  c.setQuestionId(4);
                  c.setMethodId(1);
                  c.initParams().initCapTable(0);
                }).finish());
    CHECK_FALSE(encode([](capnp::rpc::Message::Builder m) { m.initReturn().setAnswerId(4); }).finish());
    CHECK_FALSE(encode([](capnp::rpc::Message::Builder m) { m.initRelease().setId(4); }).finish());
    CHECK_FALSE(encode([](capnp::rpc::Message::Builder m) { m.initBootstrap().setQuestionId(0); }).finish());
    CHECK_FALSE(encode([](capnp::rpc::Message::Builder m) { m.initAbort().setReason("x"); }).finish());

    SUBCASE("malformed pieces are not a Finish") {
      auto w = fin;
      w.table[0] = 1;  // two segments announced
      CHECK_FALSE(w.finish());
      w = fin;
      w.segment.pop_back();  // shorter than the table says
      CHECK_FALSE(w.finish());
      w = fin;
      w.segment[0] |= 2;  // a far pointer as the root
      CHECK_FALSE(w.finish());
      w = fin;
      std::uint64_t root;
      std::memcpy(&root, w.segment.data(), 8);
      root = (root & ~std::uint64_t{0xFFFFFFFC}) | (std::uint64_t{100} << 2);  // data past the segment
      std::memcpy(w.segment.data(), &root, 8);
      CHECK_FALSE(w.finish());
      w = fin;
      root = std::uint64_t{0xFFFFFFFC} | (std::uint64_t{1} << 32);  // offset -1: the data would start at the pointer
      std::memcpy(w.segment.data(), &root, 8);
      CHECK_FALSE(w.finish());
      wire empty;
      CHECK_FALSE(empty.finish());
    }
  }
}
