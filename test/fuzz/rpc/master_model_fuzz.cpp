// Fuzz target `master_model`: the master's metadata (lib/master metadata.hpp)
// driven by a sequence of operations (register / heartbeat / unregister
// clients, publish / remove replicas, remove keys, remove by pattern, lookups,
// write routes, republish epochs, drop notices, sweeps, resets), applied both to the
// real mc::master::metadata and to a plain std::map model written from the
// header's contract. Any difference in a result, an error code, a returned
// replica list, the per-client key counts, the ordering counters or the key
// tables aborts.
//
// Time: metadata reads the steady clock itself (no fake clock), so the TTLs
// are set to a day: nothing expires during an input, health is always
// "healthy" and sweep() must drop nothing (checked). Expiry is covered by the
// unit tests (test/master/metadata_test.cpp), not here.
//
// Seeds: MC_FUZZ_WRITE_SEEDS=DIR ./master_model_fuzz writes the seed corpus
// (test/fuzz/corpus/master_model) from the scenarios in write_seeds() and
// exits; each seed decodes back to exactly its operations (codec.hpp).
#include <boost/regex.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "codec.hpp"
#include "mc/master/metadata.hpp"
#include "mc/runtime/endpoint.hpp"

namespace {

using namespace mc::fuzz;
using mc::errc;
namespace md = mc::master;

constexpr std::string_view key_pool[] = {"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"};
constexpr std::string_view id_pool[] = {"c0", "c1", "c2", "c3"};
constexpr std::string_view ep_pool[] = {"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002",
                                        "[::1]:7003",     "localhost:7004", "",
                                        "127.0.0.1:0",    "host:99999"};
constexpr std::string_view pattern_pool[] = {"k[0-3]", ".", "^k1$", "(a|b)*c", "["};

enum class op_kind : std::uint8_t {
  register_client,
  heartbeat,
  unregister,
  add_replica,
  remove_replica,
  remove_key,
  remove_matching,
  lookup,
  write_route,
  finish_republish,
  take_notices,
  find_client,
  sweep,
  keys,
  count
};

struct op {
  op_kind kind = op_kind::lookup;
  std::string id, key, ep1, ep2, ep3;
  std::uint64_t a = 0, b = 0, c = 0;
  bool flag = false;

  template <class IO>
  void io(IO& x) {
    auto k = static_cast<std::uint8_t>(kind);
    x.range(k, std::uint8_t{0}, static_cast<std::uint8_t>(static_cast<int>(op_kind::count) - 1));
    kind = static_cast<op_kind>(k);
    switch (kind) {
      case op_kind::register_client:
        pooled(x, id, id_pool, 32);
        pooled(x, ep1, ep_pool, 40);
        pooled(x, ep2, ep_pool, 40);
        pooled(x, ep3, ep_pool, 40);
        number(x, a);
        number(x, b);
        number(x, c);
        break;
      case op_kind::heartbeat:
        pooled(x, id, id_pool, 32);
        number(x, a);
        number(x, b);
        break;
      case op_kind::unregister:
      case op_kind::find_client:
        pooled(x, id, id_pool, 32);
        break;
      case op_kind::add_replica:
        pooled(x, key, key_pool, 80);
        pooled(x, id, id_pool, 32);
        number(x, a);  // size
        number(x, b);  // version
        x.flag(flag);  // republish
        number(x, c);  // epoch
        break;
      case op_kind::remove_replica:
        pooled(x, key, key_pool, 80);
        pooled(x, id, id_pool, 32);
        number(x, b);
        break;
      case op_kind::remove_key:
      case op_kind::lookup:
        pooled(x, key, key_pool, 80);
        break;
      case op_kind::remove_matching: {
        pooled(x, key, pattern_pool, 24);  // the pattern
        x.flag(flag);                      // all
        auto limit = static_cast<std::uint8_t>(a), from = static_cast<std::uint8_t>(b);
        x.range(limit, std::uint8_t{0}, std::uint8_t{10});
        x.range(from, std::uint8_t{0}, std::uint8_t{9});
        a = limit, b = from;
        break;
      }
      case op_kind::write_route:
        number(x, a);
        pooled(x, id, id_pool, 32);
        break;
      case op_kind::finish_republish:
        pooled(x, id, id_pool, 32);
        number(x, c);
        break;
      case op_kind::take_notices: {
        pooled(x, id, id_pool, 32);
        auto m = static_cast<std::uint8_t>(a);
        x.range(m, std::uint8_t{0}, std::uint8_t{5});
        a = m;
        break;
      }
      case op_kind::sweep:
        x.flag(flag);  // reset() instead (a master that stops leading)
        break;
      case op_kind::keys: {
        pooled(x, key, key_pool, 4);  // the prefix
        auto m = static_cast<std::uint8_t>(a);
        x.range(m, std::uint8_t{0}, std::uint8_t{10});
        a = m;
        break;
      }
      case op_kind::count:
        break;
    }
  }
  bool operator==(const op&) const = default;
};

/// The input's first fields: the metadata's options.
struct header {
  std::uint8_t shards = 4, key_limit = 2, max_drops = 4;
  template <class IO>
  void io(IO& x) {
    x.range(shards, std::uint8_t{1}, std::uint8_t{8});
    x.range(key_limit, std::uint8_t{0}, std::uint8_t{2});
    x.range(max_drops, std::uint8_t{1}, std::uint8_t{8});
  }
  bool operator==(const header&) const = default;
  std::size_t max_key_bytes() const { return key_limit == 0 ? 16 : key_limit == 1 ? 64 : 4096; }
};

// ---- the model -----------------------------------------------------------

struct m_holder {
  std::string id;
  std::uint64_t version = 0, epoch = 0;
  bool live = true;
};
struct m_entry {
  std::uint64_t size = 0;
  std::vector<m_holder> holders;
  std::uint64_t tag = 0;  // replication tag of the live copies' group
};

/// The replication tag of an add_replica op, derived from its size and
/// version (no field of its own, so the corpus keeps decoding as before):
/// about one publish in seven is a copy of group 1..3 asking for 2..4 copies.
std::uint64_t replication_of(std::uint64_t size, std::uint64_t version) {
  if (size % 7 != 3) return 0;
  return md::replication{1 + version % 3, static_cast<std::uint32_t>(2 + (size >> 3) % 3)}.tag();
}
struct m_client {
  md::client_info info;
  std::deque<md::key_version> drops;
  bool resync = false;
  // Acknowledged delivery (take_notices with an ack): the notices handed out
  // and not acknowledged yet (out_id 0: none), and the last reply's ack.
  std::vector<md::key_version> sent;
  bool sent_resync = false;
  std::uint64_t out_id = 0, epoch = 0;
  md::notice_ack last;
};

/// metadata_options::removed_key_bytes of the target: small, so that the
/// oldest removals are forgotten within one input.
constexpr std::size_t removed_key_bytes = 1024;

struct model {
  header h;
  std::map<std::string, m_client> clients;
  std::map<std::string, m_entry> keys;
  md::ordering_stats stats;
  std::uint64_t notice_calls = 0;  ///< take_notices ops so far (their mode)
  // Per shard: removed keys and their newest version, oldest removal first.
  struct graves_of_shard {
    std::list<std::pair<std::string, std::uint64_t>> order;
    std::size_t bytes = 0;
  };
  std::vector<graves_of_shard> graves;

  graves_of_shard& graves_for(const std::string& key) {
    if (graves.size() != h.shards) graves.resize(h.shards);
    return graves[std::hash<std::string>{}(key) % h.shards];
  }
  void bury(const std::string& key, std::uint64_t version) {
    const std::size_t budget = removed_key_bytes / h.shards;
    if (budget == 0) return;
    auto& g = graves_for(key);
    for (auto& x : g.order)
      if (x.first == key) {
        x.second = std::max(x.second, version);
        return;
      }
    g.order.emplace_back(key, version);
    g.bytes += key.size() + 64;
    while (g.bytes > budget && !g.order.empty()) {
      g.bytes -= g.order.front().first.size() + 64;
      g.order.pop_front();
    }
  }
  std::uint64_t grave_of(const std::string& key) {
    for (auto& x : graves_for(key).order)
      if (x.first == key) return x.second;
    return 0;
  }
  void unbury(const std::string& key) {
    auto& g = graves_for(key);
    for (auto it = g.order.begin(); it != g.order.end(); ++it)
      if (it->first == key) {
        g.bytes -= key.size() + 64;
        g.order.erase(it);
        return;
      }
  }
  /// remove_key / remove_matching of one key: every registered holder is
  /// sent a drop notice while its queue has room, the removal is remembered.
  void remove(std::map<std::string, m_entry>::iterator it) {
    std::uint64_t newest = 0;
    for (auto& x : it->second.holders) {
      newest = std::max(newest, x.version);
      if (auto c = clients.find(x.id); c != clients.end() && !c->second.resync && c->second.drops.size() < h.max_drops)
        c->second.drops.push_back({it->first, x.version});
    }
    bury(it->first, newest);
    keys.erase(it);
  }

  bool bad_key(const std::string& k) const { return k.empty() || k.size() > h.max_key_bytes(); }
  std::uint64_t live_keys_of(const std::string& id) const {
    std::uint64_t n = 0;
    for (auto& [k, e] : keys)
      for (auto& x : e.holders) n += (x.live && x.id == id) ? 1 : 0;
    return n;
  }
  std::vector<md::replica> replicas_of(const std::vector<m_holder>& hs, bool live_only) const {
    std::vector<md::replica> out;
    for (auto& x : hs) {
      if (live_only && !x.live) continue;
      auto it = clients.find(x.id);
      if (it == clients.end()) continue;
      out.push_back({x.id, it->second.info.rpc_endpoint, it->second.info.transfer_endpoint});
    }
    return out;
  }
  void queue_drop(const std::string& holder, const std::string& key, std::uint64_t version) {
    auto it = clients.find(holder);
    if (it == clients.end()) return;
    auto& c = it->second;
    if (c.drops.size() >= h.max_drops) {
      c.drops.clear();
      c.resync = true;
      ++stats.notice_overflows;
    }
    if (!c.resync) c.drops.push_back({key, version});
  }
  // Removes `id`'s holders with epoch < below (all: every one); returns how many.
  std::uint64_t drop_holders(const std::string& id, std::uint64_t below, bool all = false) {
    std::uint64_t n = 0;
    for (auto it = keys.begin(); it != keys.end();) {
      auto& hs = it->second.holders;
      auto before = hs.size();
      std::erase_if(hs, [&](const m_holder& x) { return x.id == id && (all || x.epoch < below); });
      n += before - hs.size();
      it = hs.empty() ? keys.erase(it) : std::next(it);
    }
    return n;
  }
};

errc code_of(const mc::result<void>& r) { return r ? errc::ok : static_cast<errc>(r.error().value()); }
template <class T>
errc code_of(const mc::result<T>& r) {
  return r ? errc::ok : static_cast<errc>(r.error().value());
}

bool same_replicas(const std::vector<md::replica>& a, const std::vector<md::replica>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].client_id != b[i].client_id || a[i].rpc_endpoint != b[i].rpc_endpoint ||
        a[i].transfer_endpoint != b[i].transfer_endpoint)
      return false;
  return true;
}

bool same_info(const md::client_info& a, const md::client_info& b) {
  return a.client_id == b.client_id && a.rpc_endpoint == b.rpc_endpoint && a.transfer_endpoint == b.transfer_endpoint &&
         a.capacity == b.capacity && a.used == b.used && a.transfer_instance == b.transfer_instance &&
         a.http_endpoint == b.http_endpoint;
}

handler_stats stats("master_model");

const char* name_of(op_kind k) {
  static const char* names[] = {
      "register_client", "heartbeat", "unregister_client", "add_replica",      "remove_replica", "remove_key",
      "remove_matching", "lookup",    "write_route",       "finish_republish", "take_notices",   "find_client",
      "sweep",           "keys"};
  return names[static_cast<int>(k)];
}

const bool trace = std::getenv("MC_FUZZ_TRACE") != nullptr;

std::size_t shard_of(const std::string& key, std::size_t shards) { return std::hash<std::string>{}(key) % shards; }

void apply(md::metadata& real, model& m, const op& o) {
  errc got = errc::ok;
  switch (o.kind) {
    case op_kind::register_client: {
      md::client_info info{o.id, o.ep1, o.ep2, o.a, o.b, o.c, o.ep3};
      got = code_of(real.register_client(info));
      errc want = errc::ok;
      if (o.id.empty() || !mc::endpoint::parse(o.ep1) || !mc::endpoint::parse(o.ep2) ||
          !md::valid_http_endpoint(o.ep3)) {
        want = errc::invalid_params;
      } else if (auto it = m.clients.find(o.id);
                 it != m.clients.end() &&
                 (it->second.info.rpc_endpoint != o.ep1 || it->second.info.transfer_endpoint != o.ep2)) {
        want = errc::object_already_exists;  // the owner is live (TTLs of a day)
      } else {
        m.clients[o.id].info = info;
      }
      MC_FUZZ_CHECK(got == want);
      break;
    }
    case op_kind::heartbeat: {
      got = code_of(real.heartbeat(o.id, o.a, o.b));
      auto it = m.clients.find(o.id);
      MC_FUZZ_CHECK(got == (it == m.clients.end() ? errc::client_not_found : errc::ok));
      if (it != m.clients.end()) it->second.info.used = o.a, it->second.info.capacity = o.b;
      break;
    }
    case op_kind::unregister: {
      got = code_of(real.unregister_client(o.id));
      bool known = m.clients.erase(o.id) > 0;
      MC_FUZZ_CHECK(got == (known ? errc::ok : errc::client_not_found));
      if (known) m.drop_holders(o.id, 0, true);
      break;
    }
    case op_kind::add_replica: {
      auto kind = o.flag ? md::publish_kind::republish : md::publish_kind::put;
      const auto tag = replication_of(o.a, o.b);
      got = code_of(real.add_replica(o.key, o.id, o.a, o.b, kind, o.c, tag));
      errc want = errc::ok;
      if (m.bad_key(o.key)) {
        want = errc::invalid_key;
      } else if (o.b == 0) {
        want = errc::invalid_version;
      } else if (!m.clients.count(o.id)) {
        want = errc::client_not_found;
      } else if (!m.keys.count(o.key) && o.b <= m.grave_of(o.key)) {
        want = errc::superseded;  // removed at a version at least this new
        ++m.stats.stale_publishes;
      } else {
        if (!m.keys.count(o.key)) m.unbury(o.key);
        auto& e = m.keys[o.key];
        auto self = std::find_if(e.holders.begin(), e.holders.end(), [&](auto& x) { return x.id == o.id; });
        const auto others_live = static_cast<std::size_t>(
            std::count_if(e.holders.begin(), e.holders.end(), [&](auto& x) { return x.live && x.id != o.id; }));
        // A copy of the live group joins the others (up to its copy count).
        const bool joins = tag != 0 && e.tag == tag && others_live > 0;
        bool done = false;
        if (self != e.holders.end()) {
          if (o.b < self->version || (o.b == self->version && !self->live)) {
            want = errc::invalid_version, done = true;
          } else if (o.b == self->version) {
            self->epoch = std::max(self->epoch, o.c), done = true;
          }
        }
        // Across holders: ordered by version (a newer value is never replaced
        // by an older one; a republish also yields to an equal live one).
        std::uint64_t others_max = 0, others_live_max = 0;
        for (auto& x : e.holders)
          if (x.id != o.id) {
            others_max = std::max(others_max, x.version);
            if (x.live) others_live_max = std::max(others_live_max, x.version);
          }
        if (!done && !joins && (o.b < others_max || (o.flag && others_live > 0 && o.b <= others_live_max)))
          want = errc::superseded, done = true;
        if (!done && joins && others_live >= md::replication::of(tag).copies)
          want = errc::invalid_version, done = true;  // surplus copy: trimmed
        if (!done) {
          if (self == e.holders.end())
            e.holders.push_back({o.id, o.b, o.c, true});
          else
            *self = {o.id, o.b, std::max(self->epoch, o.c), true};
          e.size = o.a;
          if (!joins) {
            e.tag = tag;
            std::vector<m_holder> superseded;
            for (auto& x : e.holders)
              if (x.live && x.id != o.id) x.live = false, superseded.push_back(x);
            m.stats.superseded += superseded.size();
            for (auto& x : superseded) m.queue_drop(x.id, o.key, x.version);
          }
        }
        if (want == errc::invalid_version || want == errc::superseded) ++m.stats.stale_publishes;
        if (e.holders.empty()) m.keys.erase(o.key);
      }
      MC_FUZZ_CHECK(got == want);
      break;
    }
    case op_kind::remove_replica: {
      got = code_of(real.remove_replica(o.key, o.id, o.b));
      errc want = errc::ok;
      if (m.bad_key(o.key)) {
        want = errc::invalid_key;
      } else if (auto it = m.keys.find(o.key); it == m.keys.end()) {
        want = errc::object_not_found;
      } else {
        auto& hs = it->second.holders;
        auto pos = std::find_if(hs.begin(), hs.end(), [&](auto& x) { return x.id == o.id; });
        if (pos == hs.end()) {
          want = errc::object_not_found;
        } else if (pos->version > o.b) {
          want = errc::invalid_version;
          ++m.stats.stale_removals;
        } else {
          const auto v = pos->version;
          hs.erase(pos);
          if (hs.empty()) {
            m.bury(o.key, v);
            m.keys.erase(it);
          }
        }
      }
      MC_FUZZ_CHECK(got == want);
      break;
    }
    case op_kind::remove_key: {
      auto r = real.remove_key(o.key);
      got = code_of(r);
      if (m.bad_key(o.key)) {
        MC_FUZZ_CHECK(got == errc::invalid_key);
      } else if (auto it = m.keys.find(o.key); it == m.keys.end()) {
        MC_FUZZ_CHECK(got == errc::object_not_found);
      } else {
        MC_FUZZ_CHECK(got == errc::ok);
        MC_FUZZ_CHECK(same_replicas(*r, m.replicas_of(it->second.holders, false)));
        m.remove(it);
      }
      break;
    }
    case op_kind::remove_matching: {
      const std::string& pattern = o.key;
      auto r = real.remove_matching(pattern, o.flag, o.a, o.b);
      got = code_of(r);
      const std::size_t shards = real.shard_count();
      MC_FUZZ_CHECK(shards == m.h.shards);
      std::optional<boost::regex> re;
      bool compiles = true;
      if (!o.flag) try {
          re.emplace(pattern, boost::regex::ECMAScript);
        } catch (const std::exception&) {
          compiles = false;
        }
      if (o.b > shards) {
        MC_FUZZ_CHECK(got == errc::out_of_range);
        break;
      }
      if (!o.flag && (pattern.empty() || pattern.size() > md::metadata::max_pattern_bytes || !compiles)) {
        MC_FUZZ_CHECK(got == errc::invalid_params);
        break;
      }
      if (!r) {  // only a matching that exceeded the complexity bound, before any removal
        MC_FUZZ_CHECK(got == errc::invalid_params && !m.keys.empty());
        break;
      }
      auto matches = [&](const std::string& k) -> std::optional<bool> {
        if (o.flag) return true;
        try {
          return boost::regex_search(k, *re);
        } catch (const std::exception&) {
          return std::nullopt;
        }
      };
      MC_FUZZ_CHECK(r->removed.size() <= o.a);
      MC_FUZZ_CHECK(r->next_shard >= o.b && r->next_shard <= shards);
      for (auto& rk : r->removed) {
        auto it = m.keys.find(rk.key);
        MC_FUZZ_CHECK(it != m.keys.end());
        auto sh = shard_of(rk.key, shards);
        MC_FUZZ_CHECK(sh >= o.b && sh <= r->next_shard);
        MC_FUZZ_CHECK(matches(rk.key).value_or(false));
        MC_FUZZ_CHECK(same_replicas(rk.holders, m.replicas_of(it->second.holders, false)));
        m.remove(it);
      }
      // Every matching key of a shard the call went past is gone.
      for (auto& [k, e] : m.keys) {
        auto sh = shard_of(k, shards);
        if (sh >= o.b && sh < r->next_shard) MC_FUZZ_CHECK(!matches(k).value_or(false));
      }
      break;
    }
    case op_kind::lookup: {
      auto r = real.lookup(o.key);
      got = code_of(r);
      if (m.bad_key(o.key)) {
        MC_FUZZ_CHECK(got == errc::invalid_key);
        break;
      }
      auto it = m.keys.find(o.key);
      auto live = it == m.keys.end() ? std::vector<md::replica>{} : m.replicas_of(it->second.holders, true);
      if (live.empty()) {
        MC_FUZZ_CHECK(got == errc::object_not_found);
      } else {
        MC_FUZZ_CHECK(got == errc::ok);
        MC_FUZZ_CHECK(r->size == it->second.size);
        MC_FUZZ_CHECK(same_replicas(r->replicas, live));
        MC_FUZZ_CHECK(real.exists(o.key));
      }
      break;
    }
    case op_kind::write_route: {
      auto r = real.write_route(o.a, o.id);
      got = code_of(r);
      std::optional<std::uint64_t> best;
      for (auto& [id, c] : m.clients) {
        if (id == o.id) continue;
        auto free = c.info.capacity > c.info.used ? c.info.capacity - c.info.used : 0;
        if (free >= o.a && (!best || free > *best)) best = free;
      }
      if (!best) {
        MC_FUZZ_CHECK(got == errc::no_available_handle);
        break;
      }
      MC_FUZZ_CHECK(got == errc::ok);
      auto it = m.clients.find(r->client_id);
      MC_FUZZ_CHECK(it != m.clients.end() && r->client_id != o.id);
      auto& ci = it->second.info;
      MC_FUZZ_CHECK((ci.capacity > ci.used ? ci.capacity - ci.used : 0) == *best);  // most free space
      MC_FUZZ_CHECK(r->rpc_endpoint == ci.rpc_endpoint && r->transfer_endpoint == ci.transfer_endpoint);
      break;
    }
    case op_kind::finish_republish: {
      auto r = real.finish_republish(o.id, o.c);
      got = code_of(r);
      if (!m.clients.count(o.id)) {
        MC_FUZZ_CHECK(got == errc::client_not_found);
        break;
      }
      MC_FUZZ_CHECK(got == errc::ok);
      MC_FUZZ_CHECK(*r == m.drop_holders(o.id, o.c));
      break;
    }
    case op_kind::take_notices: {
      // The mode follows the count of these ops (no field of its own, so the
      // corpus keeps decoding as before): handed out once (no ack), the last
      // reply acknowledged, or nothing acknowledged (a lost reply).
      const auto mode = m.notice_calls++ % 3;
      auto it = m.clients.find(o.id);
      std::optional<md::notice_ack> ack;
      if (mode == 1) ack = it != m.clients.end() ? it->second.last : md::notice_ack{};
      if (mode == 2) ack = md::notice_ack{};
      auto n = real.take_notices(o.id, o.a, 0, ack);
      if (it == m.clients.end()) {
        MC_FUZZ_CHECK(n.drops.empty() && !n.resync && n.notice_id == 0);
        break;
      }
      auto& c = it->second;
      if (!ack) {
        auto k = std::min<std::size_t>(o.a, c.drops.size());
        MC_FUZZ_CHECK(n.drops.size() == k);
        for (std::size_t i = 0; i < k; ++i)
          MC_FUZZ_CHECK(n.drops[i].key == c.drops[i].key && n.drops[i].version == c.drops[i].version);
        c.drops.erase(c.drops.begin(), c.drops.begin() + static_cast<std::ptrdiff_t>(k));
        MC_FUZZ_CHECK(n.resync == c.resync);
        c.resync = false;
        break;
      }
      if (c.out_id != 0 && ack->epoch == c.epoch && ack->id == c.out_id) {
        c.out_id = 0;
        c.sent.clear();
        c.sent_resync = false;
      }
      if (c.out_id == 0) {
        auto k = std::min<std::size_t>(o.a, c.drops.size());
        c.sent.assign(c.drops.begin(), c.drops.begin() + static_cast<std::ptrdiff_t>(k));
        c.drops.erase(c.drops.begin(), c.drops.begin() + static_cast<std::ptrdiff_t>(k));
        c.sent_resync = std::exchange(c.resync, false);
        if (!c.sent.empty() || c.sent_resync) {
          MC_FUZZ_CHECK(n.notice_id != 0 && n.notice_id != c.last.id);  // a new id
          if (c.epoch != 0) MC_FUZZ_CHECK(n.notice_epoch == c.epoch);
          c.out_id = n.notice_id;
          c.epoch = n.notice_epoch;
        }
      } else {
        m.stats.notices_resent += c.sent.size();
      }
      MC_FUZZ_CHECK(n.notice_id == c.out_id);
      MC_FUZZ_CHECK(n.drops.size() == c.sent.size() && n.resync == c.sent_resync);
      for (std::size_t i = 0; i < n.drops.size() && i < c.sent.size(); ++i)
        MC_FUZZ_CHECK(n.drops[i].key == c.sent[i].key && n.drops[i].version == c.sent[i].version);
      if (n.notice_id != 0) c.last = {n.notice_epoch, n.notice_id};
      break;
    }
    case op_kind::find_client: {
      auto r = real.find_client(o.id);
      got = code_of(r);
      auto it = m.clients.find(o.id);
      if (it == m.clients.end()) {
        MC_FUZZ_CHECK(got == errc::client_not_found);
      } else {
        MC_FUZZ_CHECK(got == errc::ok && same_info(*r, it->second.info));
      }
      break;
    }
    case op_kind::sweep:
      if (o.flag) {
        // Every client and key forgotten at once, the removals kept; the
        // old keys freed in small chunks (each call frees at most 3).
        real.reset();
        for (std::size_t left = real.table().retired_keys; left;) {
          auto next = real.reclaim(3);
          MC_FUZZ_CHECK(next < left && left - next <= 3);
          left = next;
        }
        m.clients.clear();
        m.keys.clear();
        break;
      }
      MC_FUZZ_CHECK(real.sweep().empty());  // nobody is silent for a day
      break;
    case op_kind::keys: {
      auto r = real.keys(o.key, o.a);
      std::size_t expect = 0;
      for (auto& [k, e] : m.keys) {
        bool live = std::any_of(e.holders.begin(), e.holders.end(), [](auto& x) { return x.live; });
        if (live && k.compare(0, o.key.size(), o.key) == 0) ++expect;
      }
      MC_FUZZ_CHECK(r.size() == std::min<std::size_t>(expect, o.a));
      for (auto& [k, ki] : r) {
        auto it = m.keys.find(k);
        MC_FUZZ_CHECK(it != m.keys.end() && k.compare(0, o.key.size(), o.key) == 0);
        MC_FUZZ_CHECK(ki.size == it->second.size);
        MC_FUZZ_CHECK(same_replicas(ki.replicas, m.replicas_of(it->second.holders, true)));
      }
      // One page from an arbitrary (hostile) cursor: refused past the last
      // shard, else only matching live keys, and a cursor that moves on.
      // (Derived from the op's fields, so the input format is unchanged.)
      const std::uint64_t cursor = ((o.a % (real.shard_count() + 1)) << 32) |
                                   static_cast<std::uint32_t>(std::hash<std::string>{}(o.key) * 0x9E3779B97F4A7C15u);
      auto page = real.scan_keys(o.key, cursor, static_cast<std::size_t>(o.a) + 1);
      if ((cursor >> 32) >= real.shard_count()) {
        MC_FUZZ_CHECK(!page && mc::is(page.error(), errc::out_of_range));
      } else {
        MC_FUZZ_CHECK(page.has_value());
        for (auto& [k, ki] : page->keys) {
          auto it = m.keys.find(k);
          MC_FUZZ_CHECK(it != m.keys.end() && k.compare(0, o.key.size(), o.key) == 0);
          MC_FUZZ_CHECK(ki.size == it->second.size);
        }
        MC_FUZZ_CHECK(page->cursor != cursor || cursor == 0);
      }
      break;
    }
    case op_kind::count:
      break;
  }
  if (trace)
    std::fprintf(stderr, "%s id=%s key=%s eps=%s|%s|%s a=%llu b=%llu c=%llu flag=%d -> %d\n", name_of(o.kind),
                 o.id.c_str(), o.key.c_str(), o.ep1.c_str(), o.ep2.c_str(), o.ep3.c_str(),
                 static_cast<unsigned long long>(o.a), static_cast<unsigned long long>(o.b),
                 static_cast<unsigned long long>(o.c), o.flag, static_cast<int>(got));
  stats.record(name_of(o.kind), got != errc::invalid_params && got != errc::invalid_key, got == errc::ok);

  // Global state after every operation.
  auto cl = real.clients();
  MC_FUZZ_CHECK(cl.size() == m.clients.size());
  auto mit = m.clients.begin();
  for (auto& c : cl) {
    MC_FUZZ_CHECK(same_info(c.info, mit->second.info));
    MC_FUZZ_CHECK(c.state == md::health::healthy);
    MC_FUZZ_CHECK(c.keys == m.live_keys_of(c.info.client_id));
    ++mit;
  }
  std::uint64_t live_keys = 0, live_entries = 0;
  for (auto& [k, e] : m.keys) {
    MC_FUZZ_CHECK(!e.holders.empty());
    std::uint64_t l = 0;
    for (auto& x : e.holders) l += x.live ? 1 : 0;
    // At most one live holder per key, or the copies of its replicated put.
    MC_FUZZ_CHECK(l <= (e.tag ? std::max<std::uint64_t>(1, md::replication::of(e.tag).copies) : 1));
    live_keys += l ? 1 : 0;
    live_entries += l;
  }
  MC_FUZZ_CHECK(real.key_count() == live_keys);
  MC_FUZZ_CHECK(real.replica_count() == live_entries);
  auto o2 = real.ordering();
  MC_FUZZ_CHECK(o2.stale_publishes == m.stats.stale_publishes);
  MC_FUZZ_CHECK(o2.stale_removals == m.stats.stale_removals);
  MC_FUZZ_CHECK(o2.superseded == m.stats.superseded);
  MC_FUZZ_CHECK(o2.notice_overflows == m.stats.notice_overflows);
  MC_FUZZ_CHECK(o2.notices_resent == m.stats.notices_resent);
}

void run(const header& h, const std::vector<op>& ops) {
  md::metadata_options mo;
  mo.route_ttl = std::chrono::hours(24);
  mo.drop_ttl = std::chrono::hours(48);
  mo.shards = h.shards;
  mo.max_key_bytes = h.max_key_bytes();
  mo.max_pending_drops = h.max_drops;
  mo.removed_key_bytes = removed_key_bytes;
  md::metadata real(mo);
  model m;
  m.h = h;
  for (auto& o : ops) apply(real, m, o);
  // Every key of the model answers the same at the end.
  for (auto& [k, e] : m.keys) {
    op look;
    look.kind = op_kind::lookup;
    look.key = k;
    apply(real, m, look);
  }
}

constexpr std::size_t max_ops = 256;

// ---- seeds ----------------------------------------------------------------

op reg(std::string id, std::string rpc, std::string xfer, std::uint64_t cap = 1 << 20) {
  op o;
  o.kind = op_kind::register_client, o.id = id, o.ep1 = rpc, o.ep2 = xfer, o.a = cap, o.b = 0, o.c = 7;
  return o;
}
op put(std::string key, std::string id, std::uint64_t size, std::uint64_t version, bool republish = false,
       std::uint64_t epoch = 0) {
  op o;
  o.kind = op_kind::add_replica, o.key = key, o.id = id, o.a = size, o.b = version, o.flag = republish, o.c = epoch;
  return o;
}
op simple(op_kind k, std::string id = {}, std::string key = {}, std::uint64_t a = 0, std::uint64_t b = 0,
          std::uint64_t c = 0, bool flag = false) {
  op o;
  o.kind = k, o.id = id, o.key = key, o.a = a, o.b = b, o.c = c, o.flag = flag;
  return o;
}

void write_seeds(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  auto emit = [&](const char* name, header h, std::vector<op> ops) {
    using any_op = header_or<header, op>;
    std::vector<any_op> all{{true, h, {}}};
    for (auto& o : ops) all.push_back({false, {}, o});
    write_seed(dir / name, all, [](const any_op& a, const any_op& b) { return a.h == b.h && a.o == b.o; });
    run(h, ops);  // the seed's calls pass the model checks
  };
  const std::string e0 = "127.0.0.1:7000", e1 = "127.0.0.1:7001", e2 = "127.0.0.1:7002";
  emit("register_publish_lookup", {},
       {reg("c0", e0, e1), put("k0", "c0", 100, 1), put("k1", "c0", 200, 1), simple(op_kind::lookup, {}, "k0"),
        simple(op_kind::lookup, {}, "k1"), simple(op_kind::keys, {}, "k", 10)});
  emit("supersede_and_notices", {},
       {reg("c0", e0, e1), reg("c1", e1, e2), put("k2", "c0", 10, 3), put("k2", "c1", 20, 1),
        simple(op_kind::heartbeat, "c0", {}, 5, 1000), simple(op_kind::take_notices, "c0", {}, 5),
        simple(op_kind::remove_replica, "c0", "k2", 0, 3), simple(op_kind::lookup, {}, "k2")});
  emit("republish_epochs", {},
       {reg("c1", e1, e2), put("k3", "c1", 8, 1, true, 1), put("k4", "c1", 8, 2, true, 2),
        simple(op_kind::finish_republish, "c1", {}, 0, 0, 2), simple(op_kind::lookup, {}, "k3"),
        simple(op_kind::lookup, {}, "k4")});
  emit("remove_matching_pages", {2, 2, 2},
       {reg("c2", e0, e2), put("k0", "c2", 1, 1), put("k1", "c2", 1, 1), put("k2", "c2", 1, 1), put("k5", "c2", 1, 1),
        simple(op_kind::remove_matching, {}, "k[0-3]", 1, 0), simple(op_kind::remove_matching, {}, "k[0-3]", 10, 1),
        simple(op_kind::remove_matching, {}, "", 10, 0, 0, true)});
  emit("write_route_unregister", {},
       {reg("c0", e0, e1, 1000), reg("c3", e2, e0, 5000), simple(op_kind::write_route, "c3", {}, 100),
        simple(op_kind::write_route, {}, {}, 4000), put("k6", "c3", 9, 1), simple(op_kind::unregister, "c3"),
        simple(op_kind::lookup, {}, "k6"), simple(op_kind::find_client, "c0"), simple(op_kind::sweep)});
  emit("reset_then_republish", {},
       {reg("c0", e0, e1), reg("c1", e1, e2), put("k0", "c0", 5, 1, false, 3), put("k1", "c1", 5, 1, false, 3),
        put("k1", "c0", 6, 2, false, 3), simple(op_kind::remove_key, {}, "k0"),
        simple(op_kind::sweep, {}, {}, 0, 0, 0, true), simple(op_kind::lookup, {}, "k1"), reg("c0", e0, e1),
        put("k0", "c0", 5, 1, true, 4), put("k1", "c0", 6, 2, true, 4), put("k2", "c0", 1, 1, false, 2),
        simple(op_kind::finish_republish, "c0", {}, 0, 0, 4), simple(op_kind::finish_republish, "c0", {}, 0, 0, 4),
        simple(op_kind::lookup, {}, "k1"), simple(op_kind::lookup, {}, "k2")});
  // take_notices modes by count: handed out once, acknowledged, lost reply.
  auto take = [](std::uint64_t max) { return simple(op_kind::take_notices, "c0", {}, max); };
  emit("acknowledged_notices", {},
       {reg("c0", e0, e1), reg("c1", e1, e2), put("k0", "c0", 1, 1), put("k0", "c1", 1, 2), take(5),
        put("k1", "c0", 1, 1), put("k1", "c1", 1, 2), take(5), put("k2", "c0", 1, 1), put("k2", "c1", 1, 2), take(5),
        take(5), take(5), put("k3", "c0", 1, 1), put("k3", "c1", 1, 2), take(0), take(5), take(5), take(5)});
  emit("overflowing_notices", {1, 2, 1},
       {reg("c0", e0, e1), reg("c1", e1, e2), put("k0", "c0", 1, 1), put("k1", "c0", 1, 1), put("k0", "c1", 1, 1),
        put("k1", "c1", 1, 1), simple(op_kind::take_notices, "c0", {}, 5), simple(op_kind::remove_key, {}, "k0")});
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  without_entropic(argc, argv);
  if (const char* dir = std::getenv("MC_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider p(data, size);
  reader in{p};
  header h;
  h.io(in);
  std::vector<op> ops;
  while (in.more() && ops.size() < max_ops) {
    op o;
    o.io(in);
    ops.push_back(std::move(o));
  }
  run(h, ops);
  return 0;
}
