// Fuzz target `master_rpc`: the master's `Master` service (lib/master
// master_server.cpp) served by a real mc::master::master_server on
// 127.0.0.1 (ephemeral port) and called through the project's RPC layer
// (mc::rpc::connect / call, the connection cached across inputs), with
// structurally valid Cap'n Proto requests whose fields are hostile: the input
// chooses each method and fills each field (empty / long / binary keys and
// ids, lists up to 5000 items, zero / huge / maximal counts, sizes, versions
// and epochs, malformed endpoints, bad patterns, shards past the end).
//
// Every typed call must complete with a response (a call error, a timeout
// or a dropped connection is a finding), and every answer must equal what a
// shadow mc::master::metadata (the same options, the same calls made
// directly) answers: statuses per item, replica lists, drop notices, client
// lists; at the end of the input every key the input named is looked up
// over RPC and compared with the shadow (state stays consistent).
//
// Two raw modes end an input (the rest of the bytes):
// - raw params: the bytes as a Cap'n Proto message (segment table and all)
//   read by capnp's FlatArrayMessageReader, its root copied into the params
//   of a chosen method (wrong pointer kinds, far pointers, ...); the call may
//   fail (a KJ exception from a getter is a clean rpc_fail) but the
//   connection must keep serving (a listClients right after must answer).
// - raw stream: the bytes on a fresh TCP connection to the server (its auth
//   frame peek, the RDMA hello peek, capnp's framing and RPC protocol,
//   lib/rpc's asio_stream), then EOF; the server must close the connection
//   (no hang), and keep serving others.
//
// Between inputs the server's state is emptied (every client unregistered).
// TTLs are a day (no expiry during a run: the answers are deterministic).
//
// Seeds: MC_FUZZ_WRITE_SEEDS=DIR ./master_rpc_fuzz writes the corpus
// (test/fuzz/corpus/master_rpc): typed scenarios encoded with codec.hpp, and
// raw streams serialised by capnp itself (Bootstrap, getService("master"),
// then Master calls, as lib/rpc's client sends them); each seed is run once
// before it is written.
#include <arpa/inet.h>
#include <capnp/rpc.capnp.h>
#include <capnp/serialize.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "bootstrap.capnp.h"
#include "codec.hpp"
#include "fuzz_support.hpp"
#include "master.capnp.h"
#include "mc/master/master_client.hpp"
#include "mc/master/master_server.hpp"
#include "mc/master/metadata.hpp"
#include "mc/rpc/capnp.hpp"
#include "mc/runtime/runtime.hpp"

namespace {

using namespace mc::fuzz;
using namespace std::chrono_literals;
using mc::errc;
namespace md = mc::master;

constexpr std::string_view key_pool[] = {"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"};
constexpr std::string_view id_pool[] = {"c0", "c1", "c2", ""};
constexpr std::string_view ep_pool[] = {"127.0.0.1:7000", "127.0.0.1:7001", "[::1]:7002", "", "127.0.0.1:0", "h:1"};
constexpr std::string_view pattern_pool[] = {"k[0-3]", ".", "^g1", "(a|b)*c", "[", ""};
constexpr std::size_t max_list = 5000;
constexpr auto call_timeout = 20s;

enum method : std::uint8_t {
  m_register,
  m_heartbeat,
  m_unregister,
  m_add,
  m_remove,
  m_get_list,
  m_write_route,
  m_remove_key,
  m_list_clients,
  m_finish,
  m_get_client,
  m_remove_matching,
  m_raw_params,
  m_raw_stream,
  m_write_routes,  // appended: the corpus's earlier method numbers keep their meaning
  m_count
};
const char* method_names[] = {"registerClient", "heartbeat",      "unregisterClient", "addReplicas",  "removeReplicas",
                              "getReplicaList", "writeRoute",     "removeKey",        "listClients",  "finishRepublish",
                              "getClient",      "removeMatching", "(raw params)",     "(raw stream)", "writeRoutes"};

/// A key: one of the pool, free text (binary included), or a long one.
template <class IO>
void key_field(IO& x, std::string& k) {
  std::uint8_t sel = 8;
  if constexpr (IO::writing) {
    sel = k.size() > 80 ? 9 : 8;
    for (std::uint8_t i = 0; i < 8; ++i)
      if (k == key_pool[i]) sel = i;
  }
  x.range(sel, std::uint8_t{0}, std::uint8_t{9});
  if (sel < 8) {
    k = std::string(key_pool[sel]);
  } else if (sel == 8) {
    x.text(k, 80);
  } else {
    auto n = static_cast<std::uint16_t>(k.size());
    x.range(n, std::uint16_t{0}, std::uint16_t{20000});
    k.assign(n, 'x');
  }
}

struct kitem {
  std::string key;
  std::uint64_t size = 0, version = 0;
  template <class IO>
  void io(IO& x) {
    key_field(x, key);
    number(x, size);
    number(x, version);
  }
  bool operator==(const kitem&) const = default;
};

struct mop {
  std::uint8_t method = m_list_clients;
  std::string id, s1, s2, s3;
  std::uint64_t a = 0, b = 0, c = 0;
  std::uint32_t u1 = 0, u2 = 0;
  bool f = false;
  std::vector<kitem> items;
  std::uint16_t extra = 0;  // generated items after `items` (long lists)
  std::uint8_t raw_method = 0;
  std::string raw;

  template <class IO>
  void list(IO& x) {
    auto n = static_cast<std::uint8_t>(items.size());
    x.range(n, std::uint8_t{0}, std::uint8_t{8});
    items.resize(n);
    for (auto& i : items) i.io(x);
    bool lots = extra > 0;
    x.flag(lots);
    if (lots)
      x.range(extra, std::uint16_t{1}, static_cast<std::uint16_t>(max_list));
    else
      extra = 0;
  }

  template <class IO>
  void io(IO& x) {
    x.range(method, std::uint8_t{0}, static_cast<std::uint8_t>(m_count - 1));
    switch (method) {
      case m_register:
        pooled(x, id, id_pool, 40);
        pooled(x, s1, ep_pool, 40);
        pooled(x, s2, ep_pool, 40);
        pooled(x, s3, ep_pool, 300);
        number(x, a);
        number(x, b);
        number(x, c);
        break;
      case m_heartbeat:
        pooled(x, id, id_pool, 40);
        number(x, a);
        number(x, b);
        break;
      case m_unregister:
      case m_get_client:
        pooled(x, id, id_pool, 40);
        break;
      case m_add:
        pooled(x, id, id_pool, 40);
        list(x);
        x.flag(f);
        number(x, c);
        break;
      case m_remove:
        pooled(x, id, id_pool, 40);
        list(x);
        break;
      case m_get_list:
        list(x);
        break;
      case m_write_route:
        number(x, a);
        pooled(x, id, id_pool, 40);
        break;
      case m_remove_key:
        key_field(x, s1);
        break;
      case m_list_clients:
        break;
      case m_finish:
        pooled(x, id, id_pool, 40);
        number(x, c);
        break;
      case m_remove_matching:
        pooled(x, s1, pattern_pool, 1100);
        x.flag(f);
        number(x, u1);
        number(x, u2);
        break;
      case m_raw_params:
        x.range(raw_method, std::uint8_t{0}, std::uint8_t{m_remove_matching});
        x.rest(raw);
        break;
      case m_raw_stream:
        x.rest(raw);
        break;
      case m_write_routes:
        number(x, a);
        number(x, u1);
        pooled(x, id, id_pool, 40);
        break;
      default:
        break;
    }
  }
  bool operator==(const mop&) const = default;

  /// The n-th item of the request's list (explicit ones, then generated).
  kitem item(std::size_t n) const {
    if (n < items.size()) return items[n];
    auto i = n - items.size();
    return {"g" + std::to_string(i % 512), i, 1 + i / 512};
  }
  std::size_t list_size() const { return items.size() + extra; }
};

/// The replication tag an item's publish carries: derived from its fields
/// (no field of its own, so the corpus keeps decoding as before): about one
/// item in seven is a copy of a small group (1..3) of 2..4 copies, so that
/// copies join, overflow (trimmed) and supersede other groups.
std::uint64_t replication_of(const kitem& it) {
  if (it.size % 7 != 3) return 0;
  return md::replication{1 + it.version % 3, static_cast<std::uint32_t>(2 + (it.size >> 3) % 3)}.tag();
}

// ---- the environment (one master for the whole run) ------------------------

struct env {
  mc::runtime::runtime rt{2};  // thread 0 serves, thread 1 calls
  std::unique_ptr<md::master_server> server;
  std::string addr;
};
env* E = nullptr;

md::metadata_options shadow_options() {
  md::metadata_options o;
  o.route_ttl = 24h;
  o.drop_ttl = 48h;
  o.max_key_bytes = 4096;
  return o;
}

void setup() {
  E = new env;  // never destroyed: its threads serve until the process exits
  E->rt.start();
  md::master_options mo;
  mo.rpc_address = "127.0.0.1";
  mo.rpc_port = 0;
  mo.rpc_thread_num = 1;
  mo.client_ttl = 24h;
  mo.client_drop_ttl = 48h;
  mo.metrics_port = 0;
  E->server = std::make_unique<md::master_server>(E->rt, mo);
  if (!E->server->start()) {
    std::fprintf(stderr, "master_rpc: cannot start the master: %s\n", E->server->message().c_str());
    std::abort();
  }
  E->addr = "127.0.0.1:" + std::to_string(E->server->port());
}

void reset_server() {
  auto& st = E->server->state();
  for (auto& c : st.clients()) (void)st.unregister_client(c.info.client_id);
  for (std::size_t s = 0; s < st.shard_count();) {
    auto r = st.remove_matching("", true, SIZE_MAX, s);
    MC_FUZZ_CHECK(r.has_value());
    s = r->next_shard;
  }
  st.forget_removals();  // each input starts from a master that never saw a key
  MC_FUZZ_CHECK(st.key_count() == 0 && st.clients().empty());
}

handler_stats stats("master_rpc");

/// Stops the master and the runtime (at exit; see codec.hpp).
void teardown() {
  E->server->stop();
  mc::rpc::shutdown(E->rt);
  E->rt.stop();
}

capnp::Text::Reader text(const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); }
std::string str(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }
std::int32_t code(const mc::result<void>& r) { return r ? 0 : r.error().value(); }
template <class T>
std::int32_t code(const mc::result<T>& r) {
  return r ? 0 : r.error().value();
}
bool validation(std::int32_t c) {
  return c == static_cast<std::int32_t>(errc::invalid_params) || c == static_cast<std::int32_t>(errc::invalid_key) ||
         c == static_cast<std::int32_t>(errc::client_not_found);
}
bool same_replica(Replica::Reader r, const md::replica& m) {
  return str(r.getClientId()) == m.client_id && str(r.getRpcEndpoint()) == m.rpc_endpoint &&
         str(r.getTransferEndpoint()) == m.transfer_endpoint;
}
bool same_replicas(capnp::List<Replica>::Reader l, const std::vector<md::replica>& m) {
  if (l.size() != m.size()) return false;
  for (unsigned i = 0; i < l.size(); ++i)
    if (!same_replica(l[i], m[i])) return false;
  return true;
}

std::string escaped(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    }
  }
  return out;
}

/// The free bytes write_route compares.
std::uint64_t free_of(const md::client_info& i) { return i.capacity > i.used ? i.capacity - i.used : 0; }

/// Runs one typed op over RPC and against the shadow; records stats.
/// Per client id: the last heartbeat reply's notice acknowledgement, from
/// the real master and from the shadow (reset per input).
std::map<std::string, std::pair<md::notice_ack, md::notice_ack>> acks;

mc::task<void> typed(Master::Client& m, const mop& o, md::metadata& sh, std::set<std::string>& named) {
  bool reached = false, ok = false;
  const char* name = method_names[o.method];
  switch (o.method) {
    case m_register: {
      auto req = m.registerClientRequest();
      auto in = req.initInfo();
      in.setClientId(text(o.id));
      in.setRpcEndpoint(text(o.s1));
      in.setTransferEndpoint(text(o.s2));
      in.setHttpEndpoint(text(o.s3));
      in.setCapacity(o.a);
      in.setUsed(o.b);
      in.setTransferInstance(o.c);
      auto r = co_await mc::rpc::call(req.send(), call_timeout);
      MC_FUZZ_CHECK(r.has_value());
      auto want = code(sh.register_client({o.id, o.s1, o.s2, o.a, o.b, o.c, o.s3}));
      if (r->getStatus().getCode() != want)
        std::fprintf(stderr, "registerClient [%s] [%s] [%s] [%s]: got %d, shadow %d\n", escaped(o.id).c_str(),
                     escaped(o.s1).c_str(), escaped(o.s2).c_str(), escaped(o.s3).c_str(), r->getStatus().getCode(),
                     want);
      MC_FUZZ_CHECK(r->getStatus().getCode() == want);
      reached = !validation(want), ok = want == 0;
      break;
    }
    case m_heartbeat: {
      // The acknowledgement: by used % 3 none, the last reply's (the real
      // master's and the shadow's epochs differ: each gets its own), or a
      // made-up one (never matches a random epoch).
      md::notice_ack real_ack, shadow_ack;
      if (o.a % 3 == 1) {
        if (auto it = acks.find(o.id); it != acks.end()) std::tie(real_ack, shadow_ack) = it->second;
      } else if (o.a % 3 == 2) {
        real_ack = shadow_ack = md::notice_ack{o.b, o.a};
      }
      auto req = m.heartbeatRequest();
      req.setClientId(text(o.id));
      req.setUsed(o.a);
      req.setCapacity(o.b);
      req.setAckEpoch(real_ack.epoch);
      req.setAckId(real_ack.id);
      auto r = co_await mc::rpc::call(req.send(), call_timeout);
      MC_FUZZ_CHECK(r.has_value());
      auto want = code(sh.heartbeat(o.id, o.a, o.b));
      MC_FUZZ_CHECK(r->getStatus().getCode() == want);
      if (want == 0) {
        auto n = sh.take_notices(o.id, md::max_drops_per_heartbeat, 0, shadow_ack);
        auto drops = r->getDrops();
        MC_FUZZ_CHECK(drops.size() == n.drops.size() && r->getResync() == n.resync);
        for (unsigned i = 0; i < drops.size(); ++i)
          MC_FUZZ_CHECK(str(drops[i].getKey()) == n.drops[i].key && drops[i].getVersion() == n.drops[i].version);
        MC_FUZZ_CHECK((r->getNoticeId() == 0) == (n.notice_id == 0));
        if (n.notice_id != 0 && acks.size() < 256)
          acks[o.id] = {md::notice_ack{r->getNoticeEpoch(), r->getNoticeId()},
                        md::notice_ack{n.notice_epoch, n.notice_id}};
      }
      reached = !validation(want), ok = want == 0;
      break;
    }
    case m_unregister: {
      auto req = m.unregisterClientRequest();
      req.setClientId(text(o.id));
      auto r = co_await mc::rpc::call(req.send(), call_timeout);
      MC_FUZZ_CHECK(r.has_value());
      auto want = code(sh.unregister_client(o.id));
      MC_FUZZ_CHECK(r->getStatus().getCode() == want);
      reached = !validation(want), ok = want == 0;
      break;
    }
    case m_add:
    case m_remove: {
      const auto n = static_cast<unsigned>(o.list_size());
      std::vector<std::int32_t> got;
      if (o.method == m_add) {
        auto req = m.addReplicasRequest();
        req.setClientId(text(o.id));
        req.setRepublish(o.f);
        req.setEpoch(o.c);
        auto l = req.initItems(n);
        for (unsigned i = 0; i < n; ++i) {
          auto it = o.item(i);
          l[i].setKey(text(it.key));
          l[i].setSize(it.size);
          l[i].setVersion(it.version);
          l[i].setReplication(replication_of(it));
        }
        auto r = co_await mc::rpc::call(req.send(), call_timeout);
        MC_FUZZ_CHECK(r.has_value());
        for (auto s : r->getResults()) got.push_back(s.getCode());
      } else {
        auto req = m.removeReplicasRequest();
        req.setClientId(text(o.id));
        auto l = req.initItems(n);
        for (unsigned i = 0; i < n; ++i) {
          auto it = o.item(i);
          l[i].setKey(text(it.key));
          l[i].setVersion(it.version);
        }
        auto r = co_await mc::rpc::call(req.send(), call_timeout);
        MC_FUZZ_CHECK(r.has_value());
        for (auto s : r->getResults()) got.push_back(s.getCode());
      }
      MC_FUZZ_CHECK(got.size() == n);
      ok = true;
      for (unsigned i = 0; i < n; ++i) {
        auto it = o.item(i);
        if (named.size() < 256) named.insert(it.key);
        auto want = o.method == m_add ? code(sh.add_replica(it.key, o.id, it.size, it.version,
                                                            o.f ? md::publish_kind::republish : md::publish_kind::put,
                                                            o.c, replication_of(it)))
                                      : code(sh.remove_replica(it.key, o.id, it.version));
        MC_FUZZ_CHECK(got[i] == want);
        reached |= !validation(want);
        ok &= want == 0;
      }
      break;
    }
    case m_get_list: {
      const auto n = static_cast<unsigned>(o.list_size());
      auto req = m.getReplicaListRequest();
      auto l = req.initKeys(n);
      for (unsigned i = 0; i < n; ++i) l.set(i, text(o.item(i).key));
      auto r = co_await mc::rpc::call(req.send(), call_timeout);
      MC_FUZZ_CHECK(r.has_value());
      auto res = r->getResults();
      MC_FUZZ_CHECK(res.size() == n);
      ok = true;
      for (unsigned i = 0; i < n; ++i) {
        auto want = sh.lookup(o.item(i).key);
        MC_FUZZ_CHECK(res[i].getStatus().getCode() == code(want));
        if (want) {
          MC_FUZZ_CHECK(res[i].getSize() == want->size);
          MC_FUZZ_CHECK(same_replicas(res[i].getReplicas(), want->replicas));
        }
        reached |= !validation(code(want));
        ok &= want.has_value();
      }
      break;
    }
    case m_write_route: {
      auto req = m.writeRouteRequest();
      req.setSize(o.a);
      req.setExclude(text(o.id));
      auto r = co_await mc::rpc::call(req.send(), call_timeout);
      MC_FUZZ_CHECK(r.has_value());
      auto want = sh.write_route(o.a, o.id);
      MC_FUZZ_CHECK(r->getStatus().getCode() == code(want));
      if (want) {  // ties may break differently: the pick must be as free as the shadow's
        auto id = str(r->getReplica().getClientId());
        auto mine = sh.find_client(id), theirs = sh.find_client(want->client_id);
        MC_FUZZ_CHECK(mine.has_value() && theirs.has_value() && id != o.id);
        MC_FUZZ_CHECK(free_of(*mine) == free_of(*theirs));
        MC_FUZZ_CHECK(str(r->getReplica().getRpcEndpoint()) == mine->rpc_endpoint);
      }
      reached = true, ok = want.has_value();
      break;
    }
    case m_write_routes: {
      auto req = m.writeRoutesRequest();
      req.setSize(o.a);
      req.setCount(o.u1);
      req.initExclude(1).set(0, text(o.id));
      auto r = co_await mc::rpc::call(req.send(), call_timeout);
      MC_FUZZ_CHECK(r.has_value());
      auto c = r->getStatus().getCode();
      if (o.u1 == 0 || o.u1 > md::replication::max_copies) {
        MC_FUZZ_CHECK(c == static_cast<std::int32_t>(errc::invalid_params));
        reached = false, ok = false;
        break;
      }
      std::vector<std::string> exclude{o.id};
      auto want = sh.write_routes(o.a, o.u1, exclude);
      MC_FUZZ_CHECK(c == code(want));
      if (want) {  // ties may break differently: the same free space, in order, distinct, not excluded
        auto got = r->getReplicas();
        MC_FUZZ_CHECK(got.size() == want->size());
        std::set<std::string> seen;
        for (unsigned i = 0; i < got.size(); ++i) {
          auto id = str(got[i].getClientId());
          auto mine = sh.find_client(id), theirs = sh.find_client((*want)[i].client_id);
          MC_FUZZ_CHECK(mine.has_value() && theirs.has_value() && id != o.id && seen.insert(id).second);
          MC_FUZZ_CHECK(free_of(*mine) == free_of(*theirs));
        }
      }
      reached = true, ok = want.has_value();
      break;
    }
    case m_remove_key: {
      auto req = m.removeKeyRequest();
      req.setKey(text(o.s1));
      auto r = co_await mc::rpc::call(req.send(), call_timeout);
      MC_FUZZ_CHECK(r.has_value());
      auto want = sh.remove_key(o.s1);
      MC_FUZZ_CHECK(r->getStatus().getCode() == code(want));
      if (want) MC_FUZZ_CHECK(same_replicas(r->getReplicas(), *want));
      if (named.size() < 256) named.insert(o.s1);
      reached = !validation(code(want)), ok = want.has_value();
      break;
    }
    case m_list_clients: {
      auto r = co_await mc::rpc::call(m.listClientsRequest().send(), call_timeout);
      MC_FUZZ_CHECK(r.has_value());
      auto want = sh.clients();
      auto got = r->getClients();
      MC_FUZZ_CHECK(got.size() == want.size());
      for (unsigned i = 0; i < got.size(); ++i) {
        auto g = got[i];
        MC_FUZZ_CHECK(str(g.getInfo().getClientId()) == want[i].info.client_id);
        MC_FUZZ_CHECK(str(g.getInfo().getRpcEndpoint()) == want[i].info.rpc_endpoint);
        MC_FUZZ_CHECK(str(g.getInfo().getHttpEndpoint()) == want[i].info.http_endpoint);
        MC_FUZZ_CHECK(g.getInfo().getCapacity() == want[i].info.capacity && g.getInfo().getUsed() == want[i].info.used);
        MC_FUZZ_CHECK(g.getKeys() == want[i].keys);
        MC_FUZZ_CHECK(str(g.getHealth()) == "healthy");
      }
      reached = true, ok = true;
      break;
    }
    case m_finish: {
      auto req = m.finishRepublishRequest();
      req.setClientId(text(o.id));
      req.setEpoch(o.c);
      auto r = co_await mc::rpc::call(req.send(), call_timeout);
      MC_FUZZ_CHECK(r.has_value());
      auto want = sh.finish_republish(o.id, o.c);
      MC_FUZZ_CHECK(r->getStatus().getCode() == code(want));
      if (want) MC_FUZZ_CHECK(r->getRemoved() == *want);
      reached = !validation(code(want)), ok = want.has_value();
      break;
    }
    case m_get_client: {
      auto req = m.getClientRequest();
      req.setClientId(text(o.id));
      auto r = co_await mc::rpc::call(req.send(), call_timeout);
      MC_FUZZ_CHECK(r.has_value());
      auto want = sh.find_client(o.id);
      MC_FUZZ_CHECK(r->getStatus().getCode() == code(want));
      if (want) {
        auto i = r->getInfo();
        MC_FUZZ_CHECK(str(i.getClientId()) == want->client_id &&
                      str(i.getTransferEndpoint()) == want->transfer_endpoint &&
                      i.getTransferInstance() == want->transfer_instance);
      }
      reached = !validation(code(want)), ok = want.has_value();
      break;
    }
    case m_remove_matching: {
      auto req = m.removeMatchingRequest();
      req.setPattern(text(o.s1));
      req.setAll(o.f);
      req.setLimit(o.u1);
      req.setFromShard(o.u2);
      auto r = co_await mc::rpc::call(req.send(), call_timeout);
      MC_FUZZ_CHECK(r.has_value());
      auto c = r->getStatus().getCode();
      const std::size_t limit = std::min<std::size_t>(o.u1, 4096);
      if (limit == 0) {
        MC_FUZZ_CHECK(c == static_cast<std::int32_t>(errc::invalid_params));
      } else if (c != 0) {
        // The shadow refuses the same way (a refusal removes nothing, except a
        // pattern too complex for some key: then both refuse on their first key).
        auto want = sh.remove_matching(o.s1, o.f, limit, o.u2);
        MC_FUZZ_CHECK(!want.has_value() && code(want) == c);
      } else {
        auto removed = r->getRemoved();
        MC_FUZZ_CHECK(removed.size() <= limit);
        MC_FUZZ_CHECK(r->getNextShard() >= o.u2 && r->getNextShard() <= sh.shard_count());
        MC_FUZZ_CHECK(r->getMore() == (r->getNextShard() < sh.shard_count()));
        for (auto k : removed) {
          auto want = sh.remove_key(str(k.getKey()));  // the same keys leave the shadow
          MC_FUZZ_CHECK(want.has_value());
          MC_FUZZ_CHECK(same_replicas(k.getReplicas(), *want));
        }
      }
      reached = c == 0 || !validation(c), ok = c == 0;
      break;
    }
    default:
      break;
  }
  stats.record(name, reached, ok);
}

/// Raw params: the bytes as a capnp message whose root becomes the params of
/// `raw_method`; the connection must keep serving afterwards.
mc::task<void> raw_params(Master::Client& m, const mop& o) {
  auto words = kj::heapArray<capnp::word>(o.raw.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), o.raw.data(), words.size() * sizeof(capnp::word));
  kj::Maybe<kj::Promise<capnp::Response<capnp::AnyPointer>>> sent;
  bool parsed = false;
  try {
    capnp::ReaderOptions ro;
    ro.traversalLimitInWords = 1 << 16;
    ro.nestingLimit = 16;
    capnp::FlatArrayMessageReader msg(words, ro);
    auto req = m.typelessRequest(capnp::typeId<Master>(), o.raw_method, nullptr);
    req.set(msg.getRoot<capnp::AnyPointer>());
    parsed = true;
    sent = req.send();
  } catch (const kj::Exception&) {
    // The reader refused the bytes: a clean error, nothing was sent.
  }
  bool answered = false;
  KJ_IF_MAYBE (p, sent) {
    auto r = co_await mc::rpc::await_promise(kj::mv(*p), call_timeout);
    answered = r.has_value();
    if (!r) MC_FUZZ_CHECK(!mc::is(r.error(), errc::timeout));  // an error, not a hang
  }
  stats.record(std::string("(raw params) ") + method_names[o.raw_method], parsed, answered);
  auto alive = co_await mc::rpc::call(m.listClientsRequest().send(), call_timeout);
  MC_FUZZ_CHECK(alive.has_value());
}

/// Raw stream: the bytes on a fresh connection, then EOF; the server must
/// close it (everything it answers is read and dropped).
void raw_stream(const std::string& bytes) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  require(fd >= 0, "socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(E->server->port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  require(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0, "connect");
  std::size_t off = 0;
  while (off < bytes.size()) {
    auto n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server closed early: fine
    off += static_cast<std::size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  char buf[4096];
  auto deadline = std::chrono::steady_clock::now() + 25s;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) violated("the master neither answered nor closed a raw connection after EOF");
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;  // EOF or reset: closed
  }
  ::close(fd);
  stats.record("(raw stream)", !bytes.empty(), true);
}

mc::task<void> run_one(const mop& o, md::metadata& shadow, std::set<std::string>& named) {
  auto m = co_await mc::rpc::connect<Master>(E->addr, "master");  // the thread's cached connection
  MC_FUZZ_CHECK(m.has_value());
  if (o.method == m_raw_params)
    co_await raw_params(*m, o);
  else
    co_await typed(*m, o, shadow, named);
}

void run(const std::vector<mop>& ops) {
  reset_server();
  acks.clear();
  md::metadata shadow(shadow_options());
  std::set<std::string> named;
  bool raw = false;
  for (auto& o : ops) {
    if (o.method == m_raw_stream)
      raw_stream(o.raw);  // on this (non-runtime) thread
    else
      E->rt.block_on(run_one(o, shadow, named), 1);
    raw |= o.method == m_raw_stream || o.method == m_raw_params;
  }
  if (raw) return;  // a raw call may have changed the state: no shadow to compare with
  // Every key the input named answers as the shadow does.
  for (auto& k : key_pool) named.insert(std::string(k));
  mop look;
  look.method = m_get_list;
  for (auto& k : named) look.items.push_back({k, 0, 0});
  E->rt.block_on(run_one(look, shadow, named), 1);
}

constexpr std::size_t max_ops = 64;

// ---- seeds -------------------------------------------------------------------

mop reg(std::string id, std::string rpc, std::string xfer, std::uint64_t cap) {
  mop o;
  o.method = m_register, o.id = id, o.s1 = rpc, o.s2 = xfer, o.a = cap, o.b = 0, o.c = 1;
  return o;
}
mop with_items(std::uint8_t method, std::string id, std::vector<kitem> items, std::uint16_t extra = 0) {
  mop o;
  o.method = method, o.id = id, o.items = std::move(items), o.extra = extra;
  return o;
}

/// A raw stream as lib/rpc's client would send it: Bootstrap, getService(name),
/// then `calls` on the service (built by capnp from the real schemas).
std::string rpc_stream(
    const std::vector<std::pair<std::uint16_t, std::function<void(capnp::AnyPointer::Builder)>>>& calls) {
  std::string out;
  auto append = [&](capnp::MallocMessageBuilder& b) {
    auto flat = capnp::messageToFlatArray(b);
    auto bytes = flat.asBytes();
    out.append(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  };
  {
    capnp::MallocMessageBuilder b;
    b.initRoot<capnp::rpc::Message>().initBootstrap().setQuestionId(0);
    append(b);
  }
  {
    capnp::MallocMessageBuilder b;
    auto call = b.initRoot<capnp::rpc::Message>().initCall();
    call.setQuestionId(1);
    call.initTarget().initPromisedAnswer().setQuestionId(0);
    call.setInterfaceId(capnp::typeId<mc::rpc::schema::Bootstrap>());
    call.setMethodId(0);
    call.initParams().getContent().initAs<mc::rpc::schema::Bootstrap::GetServiceParams>().setName("master");
    append(b);
  }
  std::uint32_t q = 2;
  for (auto& [method, fill] : calls) {
    capnp::MallocMessageBuilder b;
    auto call = b.initRoot<capnp::rpc::Message>().initCall();
    call.setQuestionId(q++);
    auto pa = call.initTarget().initPromisedAnswer();
    pa.setQuestionId(1);
    pa.initTransform(1)[0].setGetPointerField(0);
    call.setInterfaceId(capnp::typeId<Master>());
    call.setMethodId(method);
    fill(call.initParams().getContent());
    append(b);
  }
  return out;
}

void write_seeds(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  auto emit = [&](const char* name, std::vector<mop> ops) {
    write_seed(dir / name, ops, [](const mop& a, const mop& b) { return a == b; });
    run(ops);  // the seed runs clean before it is kept
  };
  const std::string e0 = "127.0.0.1:7000", e1 = "127.0.0.1:7001";
  emit("register_publish_lookup",
       {reg("c0", e0, e1, 1 << 20), with_items(m_add, "c0", {{"k0", 100, 1}, {"k1", 200, 1}}),
        with_items(m_get_list, "", {{"k0", 0, 0}, {"k1", 0, 0}, {"k2", 0, 0}}), mop{}});
  {
    mop hb;
    hb.method = m_heartbeat, hb.id = "c0", hb.a = 10, hb.b = 1 << 20;
    emit("supersede_heartbeat_drops",
         {reg("c0", e0, e1, 1 << 20), reg("c1", e1, e0, 1 << 20), with_items(m_add, "c0", {{"k2", 5, 3}}),
          with_items(m_add, "c1", {{"k2", 6, 1}}), hb, with_items(m_remove, "c0", {{"k2", 0, 3}})});
  }
  {
    mop wr, fin, gc, rk;
    wr.method = m_write_route, wr.a = 4096, wr.id = "c2";
    fin.method = m_finish, fin.id = "c2", fin.c = 9;
    gc.method = m_get_client, gc.id = "c2";
    rk.method = m_remove_key, rk.s1 = "k3";
    auto add = with_items(m_add, "c2", {{"k3", 1, 1}, {"k4", 2, 1}});
    add.f = true, add.c = 5;
    emit("republish_route_client", {reg("c2", e0, e0, 1 << 30), add, wr, fin, gc, reg("c1", e1, e1, 5000), rk});
  }
  {
    // Routes for a replicated put: two other nodes with room, then more
    // copies than nodes, then a size no node has room for.
    mop two, three, huge;
    two.method = m_write_routes, two.a = 4096, two.u1 = 2, two.id = "c0";
    three = two, three.u1 = 3;
    huge = two, huge.a = std::uint64_t{1} << 40;
    emit("write_routes_replicas",
         {reg("c0", e0, e1, 1 << 20), reg("c1", e1, e0, 1 << 20), reg("c2", e0, e0, 1 << 22), two, three, huge});
  }
  {
    mop rm;
    rm.method = m_remove_matching, rm.s1 = "^g1", rm.u1 = 100, rm.u2 = 0;
    mop all = rm;
    all.f = true, all.s1 = "", all.u1 = 4096;
    emit("long_list_remove_matching", {reg("c1", e1, e0, 1 << 20), with_items(m_add, "c1", {}, 600), rm, all, mop{}});
  }
  {
    mop un;
    un.method = m_unregister, un.id = "c0";
    emit("unregister_drops_keys", {reg("c0", e0, e1, 100), with_items(m_add, "c0", {{"k5", 1, 7}}), un,
                                   with_items(m_get_list, "", {{"k5", 0, 0}})});
  }
  // Raw params: a real registerClient params message, then its bytes as raw.
  {
    capnp::MallocMessageBuilder b;
    auto info = b.initRoot<Master::RegisterClientParams>().initInfo();
    info.setClientId("c0");
    info.setRpcEndpoint(e0);
    info.setTransferEndpoint(e1);
    info.setCapacity(1000);
    auto flat = capnp::messageToFlatArray(b);
    mop raw;
    raw.method = m_raw_params, raw.raw_method = m_register;
    raw.raw.assign(reinterpret_cast<const char*>(flat.asBytes().begin()), flat.asBytes().size());
    emit("raw_params_register", {raw});
  }
  {
    capnp::MallocMessageBuilder b;
    auto keys = b.initRoot<Master::GetReplicaListParams>().initKeys(2);
    keys.set(0, "k0");
    keys.set(1, "k1");
    auto flat = capnp::messageToFlatArray(b);
    mop raw;
    raw.method = m_raw_params, raw.raw_method = m_get_list;
    raw.raw.assign(reinterpret_cast<const char*>(flat.asBytes().begin()), flat.asBytes().size());
    emit("raw_params_lookup", {reg("c0", e0, e1, 1 << 20), with_items(m_add, "c0", {{"k0", 1, 1}}), raw});
  }
  // Raw streams: a whole RPC conversation as the bytes on the wire.
  {
    mop raw;
    raw.method = m_raw_stream;
    raw.raw = rpc_stream({{m_list_clients, [](capnp::AnyPointer::Builder p) { p.initAs<Master::ListClientsParams>(); }},
                          {m_register,
                           [e0, e1](capnp::AnyPointer::Builder p) {
                             auto i = p.initAs<Master::RegisterClientParams>().initInfo();
                             i.setClientId("c0");
                             i.setRpcEndpoint(e0);
                             i.setTransferEndpoint(e1);
                           }},
                          {m_get_list, [](capnp::AnyPointer::Builder p) {
                             p.initAs<Master::GetReplicaListParams>().initKeys(1).set(0, "k0");
                           }}});
    emit("raw_stream_rpc", {raw});
    mop auth = raw;
    // The auth frame lib/rpc's client sends first ("MCAU", u32 LE length 0: no token).
    auth.raw = std::string("MCAU\0\0\0\0", 8) + raw.raw;
    emit("raw_stream_auth_frame", {auth});
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
  std::vector<mop> ops;
  while (in.more() && ops.size() < max_ops) {
    mop o;
    o.io(in);
    ops.push_back(std::move(o));
  }
  run(ops);
  stop_threads_at_exit(teardown);
  return 0;
}
