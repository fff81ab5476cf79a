// Fuzz target `client_rpc`: a store node's ClientService (lib/store
// client_service.cpp: readRemoteData, writeRemoteData, the batch forms with
// inline values, query, remove) on a real in-process node ("owner", a 64 MiB
// DRAM tier, registered with a real in-process master), called over the
// project's RPC layer (mc::rpc::connect / call on 127.0.0.1) by a second real
// node ("req") whose TransferEngine exposes one registered region R that
// lies between two canary areas inside a guarded mapping
// (support/fuzz_support.hpp).
//
// The input chooses the calls and fills every field: keys (the sentinels,
// scratch keys, binary, long), client ids ("", the requester, the owner,
// unknown ones), descriptors (the requester's endpoint or others, addresses
// inside / across / outside R, lengths 0 / huge, right and forged tokens,
// up to 5000 pieces), inline limits, inline data up to 1.1 MB, write
// versions (0, older than any the clock issued, a little or far ahead of the
// clock, any) and replication tags, timeouts, batches up to 5000 items. A raw mode delivers the rest of the
// bytes as a Cap'n Proto message (FlatArrayMessageReader) copied into the
// params of a chosen method.
//
// Invariants (abort on violation):
// - every typed call answers (only a batch over max_batch_items may fail the
//   whole call, with INVALID_PARAMS), one result per item, and the
//   connection keeps serving;
// - a read that succeeds returns the sentinel's exact bytes (inline data, or
//   the bytes landed in R when its descriptor lies in R);
// - nothing outside what a read descriptor named inside R changes in R, and
//   the canaries around R are intact (no out-of-bounds write into registered
//   memory, even through process_vm_writev);
// - every sentinel value no successful write / remove of this input named is
//   intact at the end (read back locally, byte for byte), or absent: the
//   64 MiB DRAM tier is LRU and may evict it under the input's writes
//   (legitimate); never present with other bytes or another size;
// - a write whose version is older than the value the owner held right
//   before the call never succeeds, nor does one more than 60 s ahead of
//   the clock.
// Sentinels touched or evicted by an input are put back before the next one.
//
// Seeds: MC_FUZZ_WRITE_SEEDS=DIR ./client_rpc_fuzz writes the corpus
// (test/fuzz/corpus/client_rpc) from real scenarios (reads inline and into R,
// writes inline and from R, batches, query, remove); each runs once first.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <capnp/serialize.h>

#include "client_service.capnp.h"
#include "codec.hpp"
#include "fuzz_support.hpp"
#include "mc/config/options.hpp"
#include "mc/master/master_server.hpp"
#include "mc/rpc/capnp.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/store/client.hpp"
#include "mc/store/client_options.hpp"
#include "mc/store/client_service.hpp"
#include "mc/store/data_manager.hpp"

namespace {

using namespace mc::fuzz;
using namespace std::chrono_literals;
using mc::errc;

constexpr std::size_t sentinel_sizes[] = {1, 100, 5000, 70000};
constexpr std::string_view key_pool[] = {"s0", "s1", "s2", "s3", "w0", "w1"};
constexpr std::string_view id_pool[] = {"", "req", "owner", "ghost"};
constexpr std::size_t region_bytes = 256 << 10;
constexpr std::size_t canary_bytes = 4096;
constexpr std::uint8_t fill = 0x5a, canary = 0xa5;
constexpr unsigned max_items = 5000;

std::uint8_t sentinel_byte(std::size_t k, std::size_t i) { return static_cast<std::uint8_t>(i * 31 + k * 7 + 1); }

enum method : std::uint8_t { m_read, m_write, m_batch_read, m_batch_write, m_query, m_remove, m_raw, m_count };
const char* method_names[] = {"readRemoteData", "writeRemoteData", "batchReadRemoteData", "batchWriteRemoteData",
                              "query",          "remove",          "(raw params)"};

/// A key: one of the pool, free text (binary included) or a long one.
template <class IO>
void key_field(IO& x, std::string& k) {
  std::uint8_t sel = 6;
  if constexpr (IO::writing) {
    sel = k.size() > 80 ? 7 : 6;
    for (std::uint8_t i = 0; i < 6; ++i)
      if (k == key_pool[i]) sel = i;
  }
  x.range(sel, std::uint8_t{0}, std::uint8_t{7});
  if (sel < 6) {
    k = std::string(key_pool[sel]);
  } else if (sel == 6) {
    x.text(k, 80);
  } else {
    auto n = static_cast<std::uint16_t>(k.size());
    x.range(n, std::uint16_t{0}, std::uint16_t{5000});
    k.assign(n, 'x');
  }
}

/// WriteItem.version as sent: 0 (the owner issues one), older than any the
/// clock has issued (1 + n mod 1e18 ns, before 2001), ahead of the clock by
/// less than 10 s, ahead by more than the 60 s the owner accepts, any.
enum version_kinds : std::uint8_t { v_issue, v_old, v_ahead, v_far_ahead, v_raw };
constexpr std::uint64_t old_versions = 1'000'000'000'000'000'000ULL;

/// A RemoteBuffer, relative to R where the input wants it.
struct desc {
  std::uint8_t ep = 0;  // 0 requester's endpoint, 1 loopback + its port, 2 port 1, 3 "", 4 text
  std::string ep_text;
  std::uint8_t where = 0;  // 0 R + offset, 1 left canary + offset, 2 absolute address
  std::uint64_t addr = 0, len = 0;
  std::uint8_t tok = 0;  // 0 R's token, 1 token + 1, 2 zero, 3 absolute
  std::uint64_t token = 0;
  template <class IO>
  void io(IO& x) {
    x.range(ep, std::uint8_t{0}, std::uint8_t{4});
    if (ep == 4) x.text(ep_text, 40);
    x.range(where, std::uint8_t{0}, std::uint8_t{2});
    number(x, addr);
    number(x, len);
    x.range(tok, std::uint8_t{0}, std::uint8_t{3});
    if (tok == 3) number(x, token);
  }
  bool operator==(const desc&) const = default;
};

struct citem {
  std::string key;
  std::uint8_t id = 0;       // index in id_pool
  std::vector<desc> pieces;  // 1: the single buffer (dest / src), more: pieces
  bool as_pieces = false;
  std::uint16_t extra_pieces = 0;  // generated copies of pieces[0] (long lists)
  std::uint64_t inline_max = 0;
  std::uint8_t data_kind = 0;  // writes: 0 none, 1 text, 2 generated (data_len bytes)
  std::string data;
  std::uint32_t data_len = 0;
  std::uint64_t replication = 0;  // writes: WriteItem.replication as sent
  std::uint8_t version_kind = 0;  // writes: see version_kinds
  std::uint64_t version = 0;
  template <class IO>
  void io(IO& x) {
    key_field(x, key);
    x.range(id, std::uint8_t{0}, std::uint8_t{3});
    auto n = static_cast<std::uint8_t>(pieces.size());
    x.range(n, std::uint8_t{0}, std::uint8_t{4});
    pieces.resize(n);
    for (auto& p : pieces) p.io(x);
    x.flag(as_pieces);
    bool lots = extra_pieces > 0;
    x.flag(lots);
    if (lots)
      x.range(extra_pieces, std::uint16_t{1}, std::uint16_t{5000});
    else
      extra_pieces = 0;
    number(x, inline_max);
    x.range(data_kind, std::uint8_t{0}, std::uint8_t{2});
    if (data_kind == 1) x.text(data, 200);
    if (data_kind == 2) x.range(data_len, std::uint32_t{0}, std::uint32_t{1100000});
    number(x, replication);
    x.range(version_kind, std::uint8_t{0}, std::uint8_t{v_raw});
    if (version_kind != v_issue) number(x, version);
  }
  bool operator==(const citem&) const = default;
};

struct cop {
  std::uint8_t method = m_query;
  std::vector<citem> items;
  std::uint16_t extra = 0;  // generated copies of items[0] in batches
  std::uint32_t timeout_ms = 0;
  std::uint8_t raw_method = 0;
  std::string raw;
  template <class IO>
  void io(IO& x) {
    x.range(method, std::uint8_t{0}, static_cast<std::uint8_t>(m_count - 1));
    if (method == m_raw) {
      x.range(raw_method, std::uint8_t{0}, std::uint8_t{m_remove});
      x.rest(raw);
      return;
    }
    auto n = static_cast<std::uint8_t>(items.size());
    x.range(n, std::uint8_t{1}, std::uint8_t{6});
    items.resize(n);
    for (auto& i : items) i.io(x);
    if (method == m_batch_read || method == m_batch_write) {
      bool lots = extra > 0;
      x.flag(lots);
      if (lots)
        x.range(extra, std::uint16_t{1}, static_cast<std::uint16_t>(max_items));
      else
        extra = 0;
    }
    number(x, timeout_ms);
  }
  bool operator==(const cop&) const = default;
};

// ---- the environment ----------------------------------------------------------

struct env {
  mc::runtime::runtime master_rt{1}, owner_rt{2}, req_rt{2};
  std::unique_ptr<mc::master::master_server> master;
  std::unique_ptr<mc::store::client> owner, req;
  std::unique_ptr<guarded_memory> mem;  // [canary | R | canary]
  std::optional<mc::transfer::region> region;
  std::byte* R = nullptr;
  std::vector<std::vector<std::uint8_t>> sentinels;
  std::vector<bool> dirty;
};
env* E = nullptr;

std::unique_ptr<mc::store::client> start_node(mc::runtime::runtime& rt, const std::string& id,
                                              const std::string& master) {
  mc::store::client_options o;
  o.client_id = id;
  o.master_server_address = master;
  o.host = "127.0.0.1";
  o.port = 0;
  o.client_rpc_port = 0;
  o.rpc_timeout = 5s;
  o.heartbeat_interval = 1s;
  o.limits.max_request_timeout = 3s;  // every hostile call ends within it
  o.tiered_backend_config = R"({"tiers":[{"type":"DRAM","capacity":"64MiB","priority":100}]})";
  mc::config::option_set dummy("t", "t");
  if (auto err = mc::store::resolve(o, dummy); !err.empty()) {
    std::fprintf(stderr, "client_rpc: %s\n", err.c_str());
    std::abort();
  }
  rt.start();
  std::string why;
  auto c = mc::store::client::start(rt, o, &why);
  if (!c) {
    std::fprintf(stderr, "client_rpc: node %s: %s\n", id.c_str(), why.c_str());
    std::abort();
  }
  return std::move(*c);
}

std::span<const std::byte> bytes(const std::vector<std::uint8_t>& v) { return std::as_bytes(std::span(v)); }

void put_sentinel(std::size_t k) {
  auto r = E->owner_rt.block_on(E->owner->put(std::string(key_pool[k]), bytes(E->sentinels[k])));
  MC_FUZZ_CHECK(r.has_value());
  E->dirty[k] = false;
}

void setup() {
  E = new env;  // never destroyed: its threads serve until the process exits
  E->master_rt.start();
  mc::master::master_options mo;
  mo.rpc_address = "127.0.0.1";
  mo.rpc_port = 0;
  mo.rpc_thread_num = 1;
  mo.client_ttl = 24h;
  mo.client_drop_ttl = 48h;
  E->master = std::make_unique<mc::master::master_server>(E->master_rt, mo);
  MC_FUZZ_CHECK(E->master->start().has_value());
  const auto maddr = "127.0.0.1:" + std::to_string(E->master->port());
  E->owner = start_node(E->owner_rt, "owner", maddr);
  E->req = start_node(E->req_rt, "req", maddr);
  E->mem = std::make_unique<guarded_memory>(region_bytes + 2 * canary_bytes);
  E->R = E->mem->data() + canary_bytes;
  auto reg = E->req->engine().register_memory(E->R, region_bytes);
  MC_FUZZ_CHECK(reg.has_value());
  E->region.emplace(std::move(*reg));
  for (std::size_t k = 0; k < std::size(sentinel_sizes); ++k) {
    std::vector<std::uint8_t> v(sentinel_sizes[k]);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = sentinel_byte(k, i);
    E->sentinels.push_back(std::move(v));
  }
  E->dirty.assign(std::size(sentinel_sizes), true);
}

handler_stats stats("client_rpc");

/// Stops both nodes, the master and the runtimes (at exit; see codec.hpp).
void teardown() {
  E->region.reset();
  E->req->stop();
  E->owner->stop();
  E->master->stop();
  for (auto* rt : {&E->req_rt, &E->owner_rt, &E->master_rt}) {
    mc::rpc::shutdown(*rt);
    rt->stop();
  }
}

capnp::Text::Reader text(const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); }

mc::transfer::remote_buffer to_buffer(const desc& d) {
  auto base = E->region->describe();
  mc::transfer::remote_buffer b;
  const auto port = base.endpoint.substr(base.endpoint.rfind(':') + 1);
  switch (d.ep) {
    case 0:
      b.endpoint = base.endpoint;
      break;
    case 1:
      b.endpoint = "127.0.0.1:" + port;
      break;
    case 2:
      b.endpoint = "127.0.0.1:1";
      break;
    case 3:
      b.endpoint = "";
      break;
    default:
      b.endpoint = d.ep_text;
  }
  const auto r = reinterpret_cast<std::uint64_t>(E->R);
  b.address = d.where == 0 ? r + d.addr : d.where == 1 ? r - canary_bytes + d.addr : d.addr;
  b.length = d.len;
  b.token = d.tok == 0 ? base.token : d.tok == 1 ? base.token + 1 : d.tok == 2 ? 0 : d.token;
  return b;
}

void set_buffer(RemoteBuffer::Builder b, const mc::transfer::remote_buffer& r) {
  b.setEndpoint(text(r.endpoint));
  b.setAddress(r.address);
  b.setLength(r.length);
  b.setToken(r.token);
}

/// The pieces of an item as sent (explicit ones, then generated copies).
std::vector<mc::transfer::remote_buffer> pieces_of(const citem& it) {
  std::vector<mc::transfer::remote_buffer> out;
  for (auto& d : it.pieces) out.push_back(to_buffer(d));
  if (!out.empty())
    for (unsigned i = 0; i < it.extra_pieces; ++i) out.push_back(out.front());
  return out;
}

std::string data_of(const citem& it) {
  if (it.data_kind == 1) return it.data;
  if (it.data_kind == 2) {
    std::string d(it.data_len, '\0');
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = static_cast<char>(i * 13 + 5);
    return d;
  }
  return {};
}

/// The i-th item of a batch: the explicit ones, then copies of the first
/// without inline data and extra pieces (so that a request stays far below
/// the server's 64 MiB message bound, past which it drops the connection by
/// design).
citem item_at(const cop& o, std::size_t i) {
  if (i < o.items.size()) return o.items[i];
  citem c = o.items[0];
  c.data_kind = 0;
  c.extra_pieces = 0;
  return c;
}
std::size_t count_of(const cop& o) { return o.items.size() + o.extra; }

template <class B>
void fill_read(B b, const citem& it) {
  b.setKey(text(it.key));
  b.setClientId(text(std::string(id_pool[it.id])));
  b.setInlineMax(it.inline_max);
  auto ps = pieces_of(it);
  if (ps.size() == 1 && !it.as_pieces) {
    set_buffer(b.initDest(), ps[0]);
  } else if (!ps.empty()) {
    auto l = b.initPieces(static_cast<unsigned>(ps.size()));
    for (unsigned i = 0; i < ps.size(); ++i) set_buffer(l[i], ps[i]);
  }
}

std::uint64_t version_of(const citem& it) {
  const auto now = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  switch (it.version_kind) {
    case v_issue:
      return 0;
    case v_old:
      return 1 + it.version % old_versions;
    case v_ahead:
      return now + it.version % 10'000'000'000ULL;
    case v_far_ahead:
      return now + 61'000'000'000ULL + it.version % 1'000'000'000'000'000ULL;
    default:
      return it.version;
  }
}

template <class B>
void fill_write(B b, const citem& it) {
  b.setKey(text(it.key));
  b.setClientId(text(std::string(id_pool[it.id])));
  b.setReplication(it.replication);
  b.setVersion(version_of(it));
  auto d = data_of(it);
  if (!d.empty()) b.setData(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(d.data()), d.size()));
  auto ps = pieces_of(it);
  if (ps.size() == 1 && !it.as_pieces) {
    set_buffer(b.initSrc(), ps[0]);
  } else if (!ps.empty()) {
    auto l = b.initPieces(static_cast<unsigned>(ps.size()));
    for (unsigned i = 0; i < ps.size(); ++i) set_buffer(l[i], ps[i]);
  }
}

int sentinel_of(const std::string& key) {
  for (std::size_t k = 0; k < std::size(sentinel_sizes); ++k)
    if (key == key_pool[k]) return static_cast<int>(k);
  return -1;
}

/// What one input did to R and the sentinels.
struct effects {
  // Bytes of R a read descriptor named: +1 at each start, -1 at each end
  // (a running sum over R is then > 0 inside a named range).
  std::vector<std::int32_t> named_delta = std::vector<std::int32_t>(region_bytes + 1, 0);
  bool all_named = false;
  std::vector<bool> touched = std::vector<bool>(std::size(sentinel_sizes), false);
  // Sentinels held intact by the owner right before the current operation
  // (checked only where the operation writes one with an old version).
  std::vector<bool> held = std::vector<bool>(std::size(sentinel_sizes), false);
};

void note_read_pieces(effects& fx, const std::vector<mc::transfer::remote_buffer>& ps) {
  const auto r = reinterpret_cast<std::uint64_t>(E->R);
  for (auto& p : ps) {
    if (p.address >= r + region_bytes || p.length == 0) continue;
    auto lo = std::max(p.address, r);
    auto hi = p.address + p.length < p.address ? r + region_bytes : std::min(p.address + p.length, r + region_bytes);
    if (lo >= hi) continue;
    ++fx.named_delta[lo - r];
    --fx.named_delta[hi - r];
  }
}

/// Whether the item's pieces overlap each other (then a later piece may
/// overwrite an earlier one's bytes in R).
bool overlapping(const std::vector<mc::transfer::remote_buffer>& ps) {
  for (std::size_t i = 0; i < ps.size(); ++i)
    for (std::size_t j = i + 1; j < ps.size(); ++j)
      if (ps[i].address < ps[j].address + ps[j].length && ps[j].address < ps[i].address + ps[i].length) return true;
  return false;
}

/// A read of item `it` answered `res`: check it against the sentinel
/// (`in_r`: also the bytes it transferred into R, when no other item of the
/// call could have written there).
void check_read(const citem& it, ItemResult::Reader res, effects& fx, bool in_r) {
  const int k = sentinel_of(it.key);
  if (res.getCode() != 0 || k < 0 || fx.touched[static_cast<std::size_t>(k)]) return;
  const auto& want = E->sentinels[static_cast<std::size_t>(k)];
  MC_FUZZ_CHECK(res.getSize() == want.size());
  if (res.hasData()) {
    auto d = res.getData();
    MC_FUZZ_CHECK(d.size() == want.size() && std::memcmp(d.begin(), want.data(), want.size()) == 0);
    return;
  }
  // Transferred: where the pieces lie inside R, the bytes are the value's.
  const auto r = reinterpret_cast<std::uint64_t>(E->R);
  std::size_t off = 0;
  const auto ps = pieces_of(it);
  if (!in_r || ps.size() > 64 || overlapping(ps)) return;
  for (auto& p : ps) {
    if (p.address >= r && p.length <= region_bytes && p.address - r <= region_bytes - p.length &&
        p.token == E->region->token())
      MC_FUZZ_CHECK(std::memcmp(E->R + (p.address - r), want.data() + off,
                                std::min<std::size_t>(p.length, want.size() - std::min(off, want.size()))) == 0);
    off += p.length;
  }
}

mc::task<void> run_op(const cop& o, effects& fx) {
  auto svc = co_await mc::rpc::connect<ClientService>(E->owner->rpc_endpoint(), mc::store::client_service_name);
  MC_FUZZ_CHECK(svc.has_value());
  auto& s = *svc;
  const auto n = static_cast<unsigned>(count_of(o));
  bool reached = false, ok = true;
  auto tally = [&](std::int32_t code) {
    reached |= code != static_cast<std::int32_t>(errc::invalid_params) &&
               code != static_cast<std::int32_t>(errc::invalid_key) &&
               code != static_cast<std::int32_t>(errc::access_denied) &&
               code != static_cast<std::int32_t>(errc::overloaded);
    ok &= code == 0;
  };
  auto wrote = [&](const citem& it, std::int32_t code) {
    const int k = sentinel_of(it.key);
    // A write older than the value the owner holds never replaces it
    // (SUPERSEDED), and one far ahead of the owner's clock is refused.
    if (o.method != m_remove && it.version_kind == v_old && k >= 0 && fx.held[static_cast<std::size_t>(k)])
      MC_FUZZ_CHECK(code != 0);
    if (o.method != m_remove && it.version_kind == v_far_ahead) MC_FUZZ_CHECK(code != 0);
    if (code == 0 && k >= 0) fx.touched[static_cast<std::size_t>(k)] = true;
  };
  switch (o.method) {
    case m_read: {
      auto req = s.readRemoteDataRequest();
      fill_read(req.initItem(), o.items[0]);
      req.setTimeoutMs(o.timeout_ms);
      note_read_pieces(fx, pieces_of(o.items[0]));
      auto r = co_await mc::rpc::call(req.send(), 30s);
      MC_FUZZ_CHECK(r.has_value());
      check_read(o.items[0], r->getResult(), fx, true);
      tally(r->getResult().getCode());
      break;
    }
    case m_write: {
      auto req = s.writeRemoteDataRequest();
      fill_write(req.initItem(), o.items[0]);
      req.setTimeoutMs(o.timeout_ms);
      auto r = co_await mc::rpc::call(req.send(), 30s);
      MC_FUZZ_CHECK(r.has_value());
      wrote(o.items[0], r->getResult().getCode());
      tally(r->getResult().getCode());
      break;
    }
    case m_batch_read: {
      auto req = s.batchReadRemoteDataRequest();
      auto l = req.initItems(n);
      for (unsigned i = 0; i < n; ++i) {
        fill_read(l[i], item_at(o, i));
        if (i < o.items.size()) note_read_pieces(fx, pieces_of(o.items[i]));
      }
      req.setTimeoutMs(o.timeout_ms);
      auto r = co_await mc::rpc::call(req.send(), 30s);
      if (n > mc::store::max_batch_items) {
        MC_FUZZ_CHECK(!r && mc::is(r.error(), errc::invalid_params));
        tally(static_cast<std::int32_t>(errc::invalid_params));
        break;
      }
      MC_FUZZ_CHECK(r.has_value());
      auto res = r->getResults();
      MC_FUZZ_CHECK(res.size() == n);
      for (unsigned i = 0; i < n; ++i) {
        check_read(item_at(o, i), res[i], fx, n == 1);
        tally(res[i].getCode());
      }
      break;
    }
    case m_batch_write: {
      auto req = s.batchWriteRemoteDataRequest();
      auto l = req.initItems(n);
      for (unsigned i = 0; i < n; ++i) fill_write(l[i], item_at(o, i));
      req.setTimeoutMs(o.timeout_ms);
      auto r = co_await mc::rpc::call(req.send(), 30s);
      if (n > mc::store::max_batch_items) {
        MC_FUZZ_CHECK(!r && mc::is(r.error(), errc::invalid_params));
        tally(static_cast<std::int32_t>(errc::invalid_params));
        break;
      }
      if (!r) std::fprintf(stderr, "batchWriteRemoteData: %s\n", r.error().message().c_str());
      MC_FUZZ_CHECK(r.has_value());
      auto res = r->getResults();
      MC_FUZZ_CHECK(res.size() == n);
      for (unsigned i = 0; i < n; ++i) {
        wrote(item_at(o, i), res[i].getCode());
        tally(res[i].getCode());
      }
      break;
    }
    case m_query: {
      auto req = s.queryRequest();
      req.setKey(text(o.items[0].key));
      auto r = co_await mc::rpc::call(req.send(), 30s);
      MC_FUZZ_CHECK(r.has_value());
      const int k = sentinel_of(o.items[0].key);
      if (k >= 0 && !fx.touched[static_cast<std::size_t>(k)] && r->getResult().getCode() == 0)  // (or evicted)
        MC_FUZZ_CHECK(r->getResult().getSize() == E->sentinels[static_cast<std::size_t>(k)].size());
      tally(r->getResult().getCode());
      break;
    }
    case m_remove: {
      auto req = s.removeRequest();
      req.setKey(text(o.items[0].key));
      auto r = co_await mc::rpc::call(req.send(), 30s);
      MC_FUZZ_CHECK(r.has_value());
      wrote(o.items[0], r->getResult().getCode());
      tally(r->getResult().getCode());
      break;
    }
    case m_raw: {
      auto words = kj::heapArray<capnp::word>(o.raw.size() / sizeof(capnp::word));
      std::memcpy(words.begin(), o.raw.data(), words.size() * sizeof(capnp::word));
      kj::Maybe<kj::Promise<capnp::Response<capnp::AnyPointer>>> sent;
      try {
        capnp::ReaderOptions ro;
        ro.traversalLimitInWords = 1 << 16;
        ro.nestingLimit = 16;
        capnp::FlatArrayMessageReader msg(words, ro);
        auto req = s.typelessRequest(capnp::typeId<ClientService>(), o.raw_method, nullptr);
        req.set(msg.getRoot<capnp::AnyPointer>());
        reached = true;
        sent = req.send();
      } catch (const kj::Exception&) {}
      ok = false;
      KJ_IF_MAYBE (p, sent) {
        auto r = co_await mc::rpc::await_promise(kj::mv(*p), 30s);
        ok = r.has_value();
        if (!r) MC_FUZZ_CHECK(!mc::is(r.error(), errc::timeout));
      }
      // A raw call may have written anything anywhere a typed one could.
      std::fill(fx.touched.begin(), fx.touched.end(), true);
      fx.all_named = true;
      stats.record(std::string("(raw params) ") + method_names[o.raw_method], reached, ok);
      auto alive = co_await mc::rpc::call(s.queryRequest().send(), 30s);  // the connection serves on
      MC_FUZZ_CHECK(alive.has_value());
      co_return;
    }
    default:
      break;
  }
  stats.record(method_names[o.method], reached, ok);
}

/// Reads a sentinel back locally: 1 byte for byte intact, 0 absent (the
/// DRAM tier may evict it under the input's writes: LRU, legitimate), -1
/// present but different (a finding).
mc::task<int> intact(std::size_t k) {
  std::vector<std::uint8_t> back(E->sentinels[k].size() + 1, 0);
  auto r = co_await E->owner->data().get(std::string(key_pool[k]), std::as_writable_bytes(std::span(back)));
  if (!r) co_return mc::is(r.error(), errc::object_not_found) ? 0 : -1;
  co_return *r == E->sentinels[k].size() &&
          std::memcmp(back.data(), E->sentinels[k].data(), E->sentinels[k].size()) == 0
      ? 1
      : -1;
}

void run(const std::vector<cop>& ops) {
  for (std::size_t k = 0; k < E->dirty.size(); ++k)
    if (E->dirty[k]) put_sentinel(k);
  std::memset(E->mem->data(), canary, canary_bytes);
  std::memset(E->R, fill, region_bytes);
  std::memset(E->R + region_bytes, canary, canary_bytes);
  effects fx;
  for (auto& o : ops) {
    // (Items past o.items are copies of the first.)
    for (std::size_t i = 0; i < o.items.size() && (o.method == m_write || o.method == m_batch_write); ++i) {
      const int k = sentinel_of(item_at(o, i).key);
      if (k >= 0 && item_at(o, i).version_kind == v_old)
        fx.held[static_cast<std::size_t>(k)] =
            !fx.touched[static_cast<std::size_t>(k)] && E->owner_rt.block_on(intact(static_cast<std::size_t>(k))) == 1;
    }
    E->req_rt.block_on(run_op(o, fx), 1);
  }
  // The canaries and every byte of R no read named are untouched.
  for (std::size_t i = 0; i < canary_bytes; ++i)
    if (std::to_integer<std::uint8_t>(E->mem->data()[i]) != canary ||
        std::to_integer<std::uint8_t>(E->R[region_bytes + i]) != canary)
      violated("a canary around R changed");
  std::int64_t named = 0;
  for (std::size_t i = 0; i < region_bytes && !fx.all_named; ++i) {
    named += fx.named_delta[i];
    if (named == 0 && std::to_integer<std::uint8_t>(E->R[i]) != fill) violated("a byte of R no read named changed");
  }
  // Sentinels this input did not replace or remove are intact.
  for (std::size_t k = 0; k < E->dirty.size(); ++k) {
    if (fx.touched[k]) {
      E->dirty[k] = true;
      continue;
    }
    auto state = E->owner_rt.block_on(intact(k));
    MC_FUZZ_CHECK(state >= 0);
    if (state == 0) E->dirty[k] = true;  // evicted: put back next time
  }
}

constexpr std::size_t max_ops = 16;

// ---- seeds -------------------------------------------------------------------

desc in_r(std::uint64_t off, std::uint64_t len) {
  desc d;
  d.ep = 0, d.where = 0, d.addr = off, d.len = len, d.tok = 0;
  return d;
}
citem item(std::string key, std::uint8_t id, std::vector<desc> pieces, std::uint64_t inline_max = 0) {
  citem i;
  i.key = key, i.id = id, i.pieces = std::move(pieces), i.inline_max = inline_max;
  i.as_pieces = i.pieces.size() > 1;
  return i;
}
cop op(std::uint8_t m, std::vector<citem> items, std::uint32_t timeout = 2000) {
  cop o;
  o.method = m, o.items = std::move(items), o.timeout_ms = timeout;
  return o;
}

void write_seeds(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  auto emit = [&](const char* name, std::vector<cop> ops) {
    write_seed(dir / name, ops, [](const cop& a, const cop& b) { return a == b; });
    run(ops);  // the seed runs clean before it is kept
  };
  emit("read_inline_and_into_r", {op(m_read, {item("s1", 1, {}, 4096)}), op(m_read, {item("s2", 1, {in_r(0, 5000)})}),
                                  op(m_read, {item("s3", 0, {in_r(8192, 70000)})})});
  emit("read_scattered", {op(m_read, {item("s2", 1, {in_r(0, 1000), in_r(4096, 4000)})})});
  emit("batch_read_mixed",
       {op(m_batch_read, {item("s0", 1, {}, 64), item("s1", 1, {in_r(0, 100)}), item("s2", 0, {in_r(1024, 5000)}),
                          item("missing", 1, {}, 64), item("s3", 1, {in_r(65536, 70000)})})});
  {
    auto w = item("w0", 1, {});
    w.data_kind = 1, w.data = "an inline value";
    emit("write_inline_then_read", {op(m_write, {w}), op(m_read, {item("w0", 1, {}, 100)}),
                                    op(m_query, {item("w0", 0, {})}), op(m_remove, {item("w0", 0, {})})});
  }
  emit("write_from_r_then_batch", {op(m_write, {item("w1", 1, {in_r(0, 3000)})}),
                                   op(m_batch_write, {item("w0", 0, {in_r(100, 200)}), item("w1", 1, {in_r(0, 10)})}),
                                   op(m_batch_read, {item("w1", 1, {}, 100), item("w0", 1, {}, 1000)})});
  {
    auto old = item("s1", 1, {});
    old.data_kind = 1, old.data = "an old write", old.version_kind = v_old, old.version = 12345;
    auto far = item("w0", 1, {});
    far.data_kind = 1, far.data = "from the future", far.version_kind = v_far_ahead;
    auto ahead = item("w1", 1, {in_r(0, 500)});
    ahead.version_kind = v_ahead, ahead.version = 2'000'000'000, ahead.replication = 7;
    emit("write_versions",
         {op(m_write, {old}), op(m_batch_write, {far, ahead, old}), op(m_read, {item("s1", 1, {}, 1000)})});
  }
  emit("query_remove_sentinel",
       {op(m_query, {item("s0", 0, {})}), op(m_remove, {item("s0", 0, {})}), op(m_query, {item("s0", 0, {})})});
  {
    capnp::MallocMessageBuilder b;
    auto p = b.initRoot<ClientService::ReadRemoteDataParams>();
    p.setTimeoutMs(1000);
    auto it = p.initItem();
    it.setKey("s1");
    it.setInlineMax(1000);
    auto flat = capnp::messageToFlatArray(b);
    cop raw;
    raw.method = m_raw, raw.raw_method = m_read;
    raw.raw.assign(reinterpret_cast<const char*>(flat.asBytes().begin()), flat.asBytes().size());
    emit("raw_params_read", {raw});
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  without_entropic(argc, argv);
  setup();
  if (const char* dir = std::getenv("MC_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::_Exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider p(data, size);
  reader in{p};
  std::vector<cop> ops;
  while (in.more() && ops.size() < max_ops) {
    cop o;
    o.io(in);
    ops.push_back(std::move(o));
  }
  run(ops);
  stop_threads_at_exit(teardown);
  return 0;
}
