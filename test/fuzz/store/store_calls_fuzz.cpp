// Fuzz target `store_calls`: the store's small-value call formats
// (lib/store/src/small_read_wire.hpp, small_write_wire.hpp) as a peer sends
// them. The first byte selects the parser, the rest is the message, placed in
// guarded memory of exactly its size (a read past it faults):
//   0  read request   (the owner's decode_request)
//   1  write request  (the owner's decode_request)
//   2  read reply     (the requester's decode_reply, to a fixed request of
//                      three keys with inline bounds 1, 7 and 300)
//   3  write reply    (the requester's decode_reply, to a request of 3 values)
//   4  publish call   (the master's decode_publish_call, mc/master/publish_call.hpp)
//   5  publish answer (the owner's decode_publish_answer, to a call of 3 items)
// Invariants (abort on violation): an accepted request re-encodes, with the
// real encoder, to exactly the same bytes; an accepted read reply has one
// answer per key, each found value within its key's bound and inside the
// message, and entries plus values add up to the message; a write reply is
// accepted exactly when it is one code per value; an accepted publish call
// re-encodes to the same bytes; a publish answer is accepted exactly when it
// is the count 3 and three codes.
// Seeds: MC_FUZZ_WRITE_SEEDS=DIR ./store_calls_fuzz writes the corpus
// (test/fuzz/corpus/store_calls) from the real encoders.
#include "../../../lib/store/src/small_read_wire.hpp"
#include "../../../lib/store/src/small_write_wire.hpp"
#include "fuzz_support.hpp"
#include "mc/master/publish_call.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace sr = mc::store::detail::small_read;
namespace sw = mc::store::detail::small_write;
using mc::fuzz::guarded_memory;
using mc::fuzz::require;

const std::vector<sr::key_ask>& reply_asks() {
  static const std::vector<sr::key_ask> asks{{"a", 1}, {"bb", 7}, {"key/c", 300}};
  return asks;
}
constexpr std::size_t write_reply_count = 3;

bool inside(std::span<const std::byte> part, std::span<const std::byte> whole) {
  return part.empty() || (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

void check_read_request(std::span<const std::byte> in) {
  auto r = sr::decode_request(in);
  if (!r) return;
  auto again = sr::encode_request(r->asks, r->timeout_ms);
  require(again && again->size() == in.size() && std::memcmp(again->data(), in.data(), in.size()) == 0,
          "an accepted read request re-encodes to the same bytes");
}

void check_write_request(std::span<const std::byte> in) {
  auto r = sw::decode_request(in);
  if (!r) return;
  std::vector<std::vector<std::span<const std::byte>>> pieces;
  pieces.reserve(r->values.size());
  std::vector<sw::value_out> out;
  for (auto& v : r->values) {
    require(inside(v.data, in) && inside(std::as_bytes(std::span(v.key.data(), v.key.size())), in),
            "a write request's keys and values lie inside it");
    pieces.push_back({v.data});
    out.push_back({v.key, pieces.back(), v.data.size(), v.tag, v.version});
  }
  auto again = sw::encode_request(out, r->timeout_ms);
  require(again && again->size() == in.size() && std::memcmp(again->data(), in.data(), in.size()) == 0,
          "an accepted write request re-encodes to the same bytes");
}

void check_read_reply(std::span<const std::byte> in) {
  const auto& asks = reply_asks();
  auto r = sr::decode_reply(in, asks);
  if (!r) return;
  require(r->size() == asks.size(), "one answer per key");
  std::size_t total = asks.size() * sr::result_bytes;
  for (std::size_t k = 0; k < asks.size(); ++k) {
    auto& a = (*r)[k];
    if (a.code != 0) continue;
    require(a.size <= asks[k].inline_max && a.value.size() == a.size && inside(a.value, in),
            "a found value is within its bound and inside the reply");
    total += a.value.size();
  }
  require(total == in.size(), "entries and values add up to the reply");
}

void check_write_reply(std::span<const std::byte> in) {
  auto r = sw::decode_reply(in, write_reply_count);
  require(r.has_value() == (in.size() == sw::reply_bytes(write_reply_count)),
          "a write reply is accepted exactly when it is one code per value");
  if (!r) return;
  for (std::size_t k = 0; k < write_reply_count; ++k) {
    std::int32_t c = 0;
    std::memcpy(&c, in.data() + 4 * k, 4);  // little-endian host (x86-64, the only target)
    require((*r)[k] == c, "codes as sent");
  }
}

void check_publish_call(std::span<const std::byte> in) {
  auto c = mc::master::decode_publish_call(in);
  if (!c) return;
  auto again = mc::master::encode_publish_call(c->client_id, c->epoch, c->kind, c->items);
  require(again && again->size() == in.size() && std::memcmp(again->data(), in.data(), in.size()) == 0,
          "an accepted publish call re-encodes to the same bytes");
}

constexpr std::size_t publish_answer_items = 3;

void check_publish_answer(std::span<const std::byte> in) {
  auto r = mc::master::decode_publish_answer(in, publish_answer_items);
  const bool shaped = in.size() == mc::master::publish_answer_size(publish_answer_items) &&
                      std::to_integer<std::uint8_t>(in[0]) == publish_answer_items && in[1] == std::byte{0} &&
                      in[2] == std::byte{0} && in[3] == std::byte{0};
  require(r.has_value() == shaped, "a publish answer is accepted exactly when it is the count and one code per item");
  if (r) require(r->size() == publish_answer_items, "one outcome per item");
}

void run(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return;
  guarded_memory m(size - 1);
  if (size > 1) std::memcpy(m.data(), data + 1, size - 1);
  const auto in = std::span<const std::byte>(m.data(), size - 1);
  switch (data[0] % 6) {
    case 0:
      check_read_request(in);
      break;
    case 1:
      check_write_request(in);
      break;
    case 2:
      check_read_reply(in);
      break;
    case 3:
      check_write_reply(in);
      break;
    case 4:
      check_publish_call(in);
      break;
    default:
      check_publish_answer(in);
  }
}

void write_seed(const std::filesystem::path& p, std::uint8_t selector, const std::vector<std::byte>& body) {
  std::vector<std::uint8_t> bytes{selector};
  for (auto b : body) bytes.push_back(std::to_integer<std::uint8_t>(b));
  run(bytes.data(), bytes.size());  // the seed runs clean before it is kept
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_seeds(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  auto rq = sr::encode_request(std::vector<sr::key_ask>{{"k0", 4096}, {"bench/4096/17", 65536}, {"x", 1}}, 1000);
  require(rq.has_value(), "read request seed");
  write_seed(dir / "read_request", 0, *rq);
  std::vector<std::byte> v1(5, std::byte{0x11}), v2(300, std::byte{0x22});
  std::vector<std::span<const std::byte>> p1{v1}, p2{std::span(v2).first(100), std::span(v2).subspan(100)};
  std::vector<sw::value_out> vs{{"w0", p1, v1.size(), 0, 1}, {"w/long/key", p2, v2.size(), 0x0300000000000002, 7}};
  auto wq = sw::encode_request(vs, 0);
  require(wq.has_value(), "write request seed");
  write_seed(dir / "write_request", 1, *wq);
  // A read reply: "a" found (1 byte), "bb" missing, "key/c" found (10 bytes).
  std::vector<std::byte> rr;
  auto entry = [&](std::int32_t code, std::uint64_t size) {
    sr::le::put<std::int32_t>(rr, code);
    sr::le::put<std::uint64_t>(rr, size);
  };
  entry(0, 1);
  entry(static_cast<std::int32_t>(mc::errc::object_not_found), 0);
  entry(0, 10);
  rr.push_back(std::byte{0x41});
  rr.insert(rr.end(), 10, std::byte{0x42});
  write_seed(dir / "read_reply", 2, rr);
  std::vector<std::byte> wr;
  sw::le::put<std::int32_t>(wr, 0);
  sw::le::put<std::int32_t>(wr, static_cast<std::int32_t>(mc::errc::superseded));
  sw::le::put<std::int32_t>(wr, static_cast<std::int32_t>(mc::errc::overloaded));
  write_seed(dir / "write_reply", 3, wr);
  std::vector<mc::master::publish_item> items{{"bench/4096/3", 4096, 1733000000000000001ull, 0},
                                              {"p/two", 65536, 1733000000000000002ull, 0x0200000000000001}};
  auto pc = mc::master::encode_publish_call("owner", 2, mc::master::publish_kind::put, items);
  require(pc.has_value(), "publish call seed");
  write_seed(dir / "publish_call", 4, *pc);
  std::vector<mc::result<void>> outs{mc::result<void>{}, mc::fail(mc::errc::superseded),
                                     mc::fail(mc::errc::client_not_found)};
  write_seed(dir / "publish_answer", 5, mc::master::encode_publish_answer(outs));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("MC_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::_Exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  run(data, size);
  return 0;
}
