// Fuzz target `attach`: the standalone-mode attach service (lib/store
// attach_server, schema attach.capnp) as a hostile attacher on the same host
// sees it. A real in-process cluster (a master and one node with 64 MiB of
// DRAM serving the attach protocol) and an "attacher" transfer engine with
// one registered region live for the whole run. Each input is a sequence of
// up to 8 typed calls (hello, batchPut, batchGet, batchExists, remove,
// sizeOf) with hostile fields drawn by FuzzedDataProvider: keys (empty,
// binary, long), pieces inside, across or outside the region, wrong tokens,
// zero lengths, huge counts, the peer port of our engine, of the node's own
// engine or a closed one, instance ids right or wrong, timeouts.
//
// Invariants (abort on violation):
//  - every result code is 0 or an mc::errc the protocol names;
//  - a put whose pieces are not all inside the region with its token never
//    succeeds (the node reads only what the attacher registered);
//  - a get changes no byte of the region outside the pieces of the call's
//    items, and canary memory next to the region is never written;
//  - a get that succeeds into pieces built as valid returns the bytes of the
//    last successful put of that key in this input (when the input put it);
//  - the node's sentinel values (put before the run, under keys the input
//    cannot name: every input key gets the prefix "f/") are intact.
// After each input every key it used is removed through the node, so inputs
// do not depend on each other.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "attach.capnp.h"
#include "fuzz_support.hpp"
#include "mc/master/master_server.hpp"
#include "mc/rpc/capnp.hpp"
#include "mc/rpc/client.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/store/attach.hpp"
#include "mc/store/client.hpp"
#include "mc/transfer/engine.hpp"

namespace {

constexpr std::size_t region_bytes = 256 << 10;
constexpr std::size_t sentinels = 4;

std::vector<std::byte> pattern(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> v(n);
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = std::byte(x);
  }
  return v;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "attach_fuzz: invariant broken: %s\n", what);
    std::abort();
  }
}

struct harness {
  mc::runtime::runtime master_rt{1}, node_rt{2}, att_rt{1};
  std::unique_ptr<mc::master::master_server> master;
  std::unique_ptr<mc::store::client> node;
  std::unique_ptr<mc::store::attach_server> server;
  std::unique_ptr<mc::transfer::engine> eng;
  mc::fuzz::canary_memory before{4096}, after{4096};
  mc::fuzz::guarded_memory region{region_bytes};
  std::optional<mc::transfer::region> reg;
  std::uint16_t eng_port = 0, node_te_port = 0;

  harness() {
    master_rt.start();
    node_rt.start();
    att_rt.start();
    mc::master::master_options mo;
    mo.rpc_address = "127.0.0.1";
    mo.rpc_port = 0;
    mo.rpc_thread_num = 1;
    mo.metrics_port = 0;  // no HTTP server (a fixed port could be taken)
    master = std::make_unique<mc::master::master_server>(master_rt, mo);
    auto started = master->start();
    mc::fuzz::require(started.has_value(),
                      ("master start: " + started.error().message() + ": " + master->message()).c_str());
    mc::store::client_options o;
    o.client_id = "fuzz-node";
    o.master_server_address = "127.0.0.1:" + std::to_string(master->port());
    o.host = "127.0.0.1";
    o.port = 0;
    o.client_rpc_port = 0;
    o.rpc_timeout = std::chrono::seconds(5);
    o.transfer_transport = "tcp";
    o.tiered_backend_config = R"({"tiers":[{"type":"DRAM","capacity":"64MiB","priority":100}]})";
    mc::config::option_set dummy("attach_fuzz", "");
    mc::fuzz::require(mc::store::resolve(o, dummy).empty(), "node options");
    std::string why;
    auto c = mc::store::client::start(node_rt, o, &why);
    mc::fuzz::require(c.has_value(), why.c_str());
    node = std::move(*c);
    mc::store::attach_server_options ao;
    ao.ephemeral = true;
    ao.max_request_timeout = std::chrono::seconds(5);
    auto s = mc::store::attach_server::start(node_rt, *node, ao, &why);
    mc::fuzz::require(s.has_value(), why.c_str());
    server = std::move(*s);
    mc::transfer::engine_options eo;
    eo.bind_host = "127.0.0.1";
    eo.force = mc::transfer::transport_kind::tcp;
    eng = std::make_unique<mc::transfer::engine>(att_rt, eo);
    mc::fuzz::require(bool(eng->start()), "attacher engine start");
    eng_port = port_of(eng->endpoint());
    node_te_port = port_of(node->transfer_endpoint());
    auto r = eng->register_memory(region.data(), region.size());
    mc::fuzz::require(r.has_value(), "register_memory");
    reg.emplace(std::move(*r));
    for (std::size_t i = 0; i < sentinels; ++i) {
      auto v = pattern(1000 + 4099 * i, 7000 + i);
      auto put = node_rt.block_on(node->put("s/" + std::to_string(i), std::span<const std::byte>(v)));
      mc::fuzz::require(put.has_value(), "sentinel put");
    }
  }

  static std::uint16_t port_of(const std::string& ep) {
    return static_cast<std::uint16_t>(std::stoul(ep.substr(ep.rfind(':') + 1)));
  }

  void check_sentinels() {
    for (std::size_t i = 0; i < sentinels; ++i) {
      auto want = pattern(1000 + 4099 * i, 7000 + i);
      std::vector<std::byte> got(want.size() + 1);
      auto r = node_rt.block_on(node->get("s/" + std::to_string(i), std::span<std::byte>(got)));
      check(r.has_value() && *r == want.size() && std::equal(want.begin(), want.end(), got.begin()),
            "a sentinel value changed");
    }
  }
};

harness& h() {
  static harness* x = new harness();  // never destroyed: libFuzzer exits the process
  return *x;
}

// One piece as the input describes it, and whether it is valid (inside the
// region, with its token, non-empty).
struct piece {
  std::uint64_t address = 0, length = 0, token = 0;
  bool valid = false;
};

struct item {
  std::string key;
  std::vector<piece> pieces;
  bool all_valid = true;
};

struct call_result {
  std::int32_t code = 0;
  std::uint64_t size = 0;
};

bool known_code(std::int32_t code) {
  if (code == 0) return true;
  // Only the codes mc::errc names may cross the wire.
  return mc::errc_from_value(code).has_value();
}

mc::fuzz::handler_stats stats("attach");

/// Records one call: `reached` when some item got past the early checks (an
/// answer other than INVALID_PARAMS / INVALID_KEY / ACCESS_DENIED /
/// OVERLOADED / TOO_LARGE), `ok` when the call answered and every item
/// succeeded.
void tally(const char* method, bool answered, const std::vector<std::int32_t>& codes) {
  auto early = [](std::int32_t c) {
    using mc::errc;
    for (auto e : {errc::invalid_params, errc::invalid_key, errc::access_denied, errc::overloaded, errc::too_large})
      if (c == static_cast<std::int32_t>(e)) return true;
    return false;
  };
  // (A call without per-item codes, hello, reached its handler when it answered.)
  const bool reached =
      answered && (codes.empty() || std::any_of(codes.begin(), codes.end(), [&](auto c) { return !early(c); }));
  const bool ok = answered && std::all_of(codes.begin(), codes.end(), [](auto c) { return c == 0; });
  stats.record(method, reached, ok);
}
std::vector<std::int32_t> codes_of(const std::vector<call_result>& res) {
  std::vector<std::int32_t> out;
  for (auto& r : res) out.push_back(r.code);
  return out;
}

struct input_state {
  explicit input_state(FuzzedDataProvider& p) : in(p) {}
  FuzzedDataProvider& in;
  std::size_t cursor = 0;                               // next free offset for valid pieces
  std::map<std::string, std::vector<std::byte>> model;  // key -> bytes of its last successful put
  std::set<std::string> unknown;                        // keys whose value this input cannot predict
  std::set<std::string> used;
};

std::string draw_key(input_state& s) {
  std::string k;
  switch (s.in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0:
      k = "";
      break;
    case 1:
      k = s.in.ConsumeRandomLengthString(5000);  // over the node's key limit at times
      break;
    default:
      k = "k" + std::to_string(s.in.ConsumeIntegralInRange<int>(0, 7));
  }
  k = "f/" + k;
  s.used.insert(k);
  return k;
}

piece draw_piece(input_state& s) {
  auto& hh = h();
  const auto base = reinterpret_cast<std::uint64_t>(hh.region.data());
  const auto token = hh.reg->describe().token;
  piece p;
  const int kind = s.in.ConsumeIntegralInRange<int>(0, 9);
  if (kind <= 5) {  // valid: a fresh disjoint range of the region
    const std::uint64_t len = s.in.ConsumeIntegralInRange<std::uint64_t>(1, 20000);
    if (s.cursor + len > region_bytes) s.cursor = 0;
    p = {base + s.cursor, std::min<std::uint64_t>(len, region_bytes - s.cursor), token, true};
    s.cursor += p.length;
    return p;
  }
  p.token = token;
  switch (kind) {
    case 6:  // crossing the end of the region
      p.address = base + region_bytes - s.in.ConsumeIntegralInRange<std::uint64_t>(1, 100);
      p.length = s.in.ConsumeIntegralInRange<std::uint64_t>(101, 10000);
      break;
    case 7:  // wrong token
      p.address = base;
      p.length = s.in.ConsumeIntegralInRange<std::uint64_t>(1, 1000);
      p.token = s.in.ConsumeIntegral<std::uint64_t>() | 1;
      if (p.token == token) p.token ^= 2;
      break;
    case 8:  // before the region, or wrapping around the address space
      p.address = s.in.ConsumeBool() ? base - 64 : ~std::uint64_t{0} - 10;
      p.length = s.in.ConsumeIntegralInRange<std::uint64_t>(1, 1u << 20);
      break;
    default:  // anything, including empty and huge
      p.address = s.in.ConsumeIntegral<std::uint64_t>();
      p.length = s.in.ConsumeIntegral<std::uint64_t>();
      p.token = s.in.ConsumeBool() ? token : s.in.ConsumeIntegral<std::uint64_t>();
  }
  return p;
}

std::vector<item> draw_items(input_state& s) {
  std::vector<item> items(s.in.ConsumeIntegralInRange<std::size_t>(0, 6));
  for (auto& it : items) {
    it.key = draw_key(s);
    it.pieces.resize(s.in.ConsumeIntegralInRange<std::size_t>(0, 4));
    for (auto& p : it.pieces) {
      p = draw_piece(s);
      it.all_valid = it.all_valid && p.valid;
    }
    if (it.pieces.empty()) it.all_valid = false;
  }
  return items;
}

std::vector<std::byte> bytes_of(const item& it) {
  std::vector<std::byte> v;
  for (auto& p : it.pieces) {
    auto* a = reinterpret_cast<const std::byte*>(p.address);
    v.insert(v.end(), a, a + p.length);
  }
  return v;
}

template <class Req>
void fill(Req& req, input_state& s, const std::vector<item>& items) {
  auto& hh = h();
  auto peer = req.initPeer();
  switch (s.in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0:
      peer.setPort(hh.node_te_port);  // the node's own engine
      break;
    case 1:
      peer.setPort(1);  // nothing listens there
      break;
    default:
      peer.setPort(hh.eng_port);
  }
  peer.setInstance(s.in.ConsumeBool() ? hh.eng->instance_id() : s.in.ConsumeIntegral<std::uint64_t>());
  req.setTimeoutMs(s.in.ConsumeBool() ? 3000u : s.in.ConsumeIntegralInRange<std::uint32_t>(1000, 0xffffffffu));
  auto list = req.initItems(static_cast<unsigned>(items.size()));
  for (unsigned i = 0; i < items.size(); ++i) {
    list[i].setKey(kj::StringPtr(items[i].key.c_str(), items[i].key.size()));
    auto ps = list[i].initPieces(static_cast<unsigned>(items[i].pieces.size()));
    for (unsigned j = 0; j < items[i].pieces.size(); ++j) {
      ps[j].setAddress(items[i].pieces[j].address);
      ps[j].setLength(items[i].pieces[j].length);
      ps[j].setToken(items[i].pieces[j].token);
    }
  }
}

template <class Resp>
std::vector<call_result> results_of(const Resp& resp, std::size_t expected) {
  std::vector<call_result> out;
  for (auto r : resp.getResults()) {
    check(known_code(r.getCode()), "unknown result code");
    out.push_back({r.getCode(), r.getSize()});
  }
  check(out.empty() || out.size() == expected, "one result per item");
  return out;
}

mc::task<int> run_input(input_state& s) {
  auto& hh = h();
  auto cap = co_await mc::rpc::connect<Attach>(hh.server->endpoint(), mc::store::attach_service_name);
  if (!cap) co_return 0;  // the node refused the connection: nothing to check
  const std::size_t calls = s.in.ConsumeIntegralInRange<std::size_t>(1, 8);
  for (std::size_t c = 0; c < calls && s.in.remaining_bytes() > 0; ++c) {
    switch (s.in.ConsumeIntegralInRange<int>(0, 5)) {
      case 0: {
        auto req = cap->helloRequest();
        // The protocol's version or any other.
        req.setVersion(s.in.ConsumeBool() ? mc::store::attach_protocol_version : s.in.ConsumeIntegral<std::uint32_t>());
        auto r = co_await mc::rpc::call(req.send());
        if (r) check(r->getMaxKeys() > 0 && r->getMaxPieces() > 0, "hello limits");
        tally("hello", r.has_value(), {});
        break;
      }
      case 1: {  // batchPut
        auto items = draw_items(s);
        // The region's bytes are the values: give the pieces fresh content.
        for (auto& it : items)
          for (auto& p : it.pieces)
            if (p.valid) {
              auto v = pattern(p.length, s.in.ConsumeIntegral<std::uint32_t>());
              std::memcpy(reinterpret_cast<void*>(p.address), v.data(), v.size());
            }
        std::vector<std::vector<std::byte>> sent;
        for (auto& it : items) sent.push_back(it.all_valid ? bytes_of(it) : std::vector<std::byte>{});
        auto req = cap->batchPutRequest();
        fill(req, s, items);
        auto r = co_await mc::rpc::call(req.send());
        if (!r) {
          tally("batchPut", false, {});
          for (auto& it : items) s.unknown.insert(it.key);
          break;
        }
        auto res = results_of(*r, items.size());
        tally("batchPut", true, codes_of(res));
        for (std::size_t i = 0; i < res.size(); ++i) {
          auto& it = items[i];
          if (res[i].code == 0) {
            check(it.all_valid, "a put with a piece outside the registered region succeeded");
            // The model knows a key's bytes only when this put created it
            // (a put over an existing key keeps or replaces it, by mode).
            if (!s.model.count(it.key) && !s.unknown.count(it.key)) {
              s.model[it.key] = sent[i];
            } else {
              s.model.erase(it.key);
              s.unknown.insert(it.key);
            }
          } else if (!s.model.count(it.key)) {
            s.unknown.insert(it.key);
          }
        }
        if (res.empty())
          for (auto& it : items) s.unknown.insert(it.key);
        break;
      }
      case 2: {  // batchGet
        auto items = draw_items(s);
        std::vector<std::byte> before(hh.region.data(), hh.region.data() + region_bytes);
        std::vector<bool> allowed(region_bytes, false);
        const auto base = reinterpret_cast<std::uint64_t>(hh.region.data());
        for (auto& it : items)
          for (auto& p : it.pieces) {
            // Any piece overlapping the region may legitimately be written
            // where it overlaps (the engine clips nothing: it refuses).
            if (p.length == 0 || p.address >= base + region_bytes || p.address + p.length < p.address) continue;
            const auto lo = std::max(p.address, base), hi = std::min(p.address + p.length, base + region_bytes);
            for (auto a = lo; a < hi; ++a) allowed[a - base] = true;
          }
        auto req = cap->batchGetRequest();
        fill(req, s, items);
        auto r = co_await mc::rpc::call(req.send());
        for (std::size_t i = 0; i < region_bytes; ++i)
          if (!allowed[i]) check(hh.region.data()[i] == before[i], "a get wrote outside the call's pieces");
        if (!r) {
          tally("batchGet", false, {});
          break;
        }
        auto res = results_of(*r, items.size());
        tally("batchGet", true, codes_of(res));
        for (std::size_t i = 0; i < res.size(); ++i) {
          auto& it = items[i];
          if (res[i].code != 0 || !it.all_valid || !s.model.count(it.key) || s.unknown.count(it.key)) continue;
          const auto& want = s.model[it.key];
          check(res[i].size == want.size(), "a get returned another size than the put's");
          auto got = bytes_of(it);
          check(got.size() >= want.size() && std::equal(want.begin(), want.end(), got.begin()),
                "a get returned other bytes than the put's");
        }
        break;
      }
      case 3: {
        auto req = cap->batchExistsRequest();
        const auto n = s.in.ConsumeIntegralInRange<unsigned>(0, 8);
        auto keys = req.initKeys(n);
        for (unsigned i = 0; i < n; ++i) {
          auto k = draw_key(s);
          keys.set(i, kj::StringPtr(k.c_str(), k.size()));
        }
        req.setTimeoutMs(3000);
        auto r = co_await mc::rpc::call(req.send());
        tally("batchExists", r.has_value(), r ? codes_of(results_of(*r, n)) : std::vector<std::int32_t>{});
        break;
      }
      case 4: {
        auto req = cap->removeRequest();
        auto k = draw_key(s);
        req.setKey(kj::StringPtr(k.c_str(), k.size()));
        req.setTimeoutMs(3000);
        auto r = co_await mc::rpc::call(req.send());
        if (r) check(known_code(r->getResult().getCode()), "unknown remove code");
        tally("remove", r.has_value(),
              r ? std::vector<std::int32_t>{r->getResult().getCode()} : std::vector<std::int32_t>{});
        s.model.erase(k);
        s.unknown.insert(k);  // a failed remove may still have removed it
        break;
      }
      default: {
        auto req = cap->sizeOfRequest();
        auto k = draw_key(s);
        req.setKey(kj::StringPtr(k.c_str(), k.size()));
        req.setTimeoutMs(3000);
        auto r = co_await mc::rpc::call(req.send());
        tally("sizeOf", r.has_value(),
              r ? std::vector<std::int32_t>{r->getResult().getCode()} : std::vector<std::int32_t>{});
        if (r) {
          auto res = r->getResult();
          check(known_code(res.getCode()), "unknown sizeOf code");
          if (res.getCode() == 0 && s.model.count(k) && !s.unknown.count(k))
            check(res.getSize() == s.model[k].size(), "sizeOf disagrees with the put");
        }
      }
    }
  }
  co_return 0;
}

mc::task<int> cleanup(std::set<std::string> keys) {
  for (auto& k : keys) (void)co_await h().node->remove(k);
  co_return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto& hh = h();
  FuzzedDataProvider in(data, size);
  input_state s{in};
  hh.att_rt.block_on(run_input(s));
  hh.node_rt.block_on(cleanup(std::move(s.used)));
  check(hh.before.intact() && hh.after.intact(), "canary memory was written");
  hh.check_sentinels();
  return 0;
}
