// Fuzz target etcd_reply: the parsers of etcd's JSON-gateway replies
// (mc::master::etcd_reply), which read what an etcd endpoint — or anything
// listening where one was configured — sends to a master or a client.
// Input: one selector byte (which reply kind), then the reply body.
// Invariants on success (beyond "no crash, no UB, no leak"): a lease has an
// id and a positive TTL; a keepalive TTL is >= 0; a created election has a
// positive revision, a holder has the asked key; a one-key read returns the
// asked key; a prefix read returns at most `limit` keys, each under the
// prefix; a delete count is 0 or 1; a watch line's events are all on the
// watched key, at positive, non-decreasing revisions, at most
// etcd_max_watch_events; an auth token is 1..4096 printable ASCII characters
// (it becomes an HTTP header).
#include "mc/master/etcd.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {
void require(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  namespace r = mc::master::etcd_reply;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string key = "mooncake-store/c/master_view";
  const std::string prefix = "mooncake-store/c/clients/";
  switch (data[0] % 10) {
    case 0:
      if (auto g = r::grant(body)) require(g->id != 0 && g->ttl_s > 0);
      break;
    case 1:
      if (auto k = r::keepalive(body)) require(*k >= 0);
      break;
    case 2:
      if (auto c = r::create_if_absent(body, key)) {
        if (c->created)
          require(c->revision > 0);
        else
          require(c->holder.key.empty() || c->holder.key == key);
      }
      break;
    case 3:
      if (auto v = r::revision(body)) require(*v >= 0);
      break;
    case 4:
      if (auto g = r::get(body, key); g && *g) require((*g)->key == key);
      break;
    case 5:
      if (auto p = r::get_prefix(body, prefix, 4)) {
        require(p->size() <= 4);
        for (auto& kv : *p) require(kv.key.starts_with(prefix));
      }
      break;
    case 6:
      if (auto d = r::deleted(body)) require(*d == 0 || *d == 1);
      break;
    case 7:
      if (auto w = r::watch(body, key)) {
        require(w->events.size() <= mc::master::etcd_max_watch_events && w->compact_revision >= 0);
        std::int64_t last = 0;
        for (auto& e : w->events) {
          require(e.kv.key == key && e.kv.mod_revision > 0 && e.kv.mod_revision >= last);
          last = e.kv.mod_revision;
        }
      }
      break;
    case 8:
      if (auto t = r::token(body)) {
        require(!t->empty() && t->size() <= 4096);
        for (char ch : *t) require(ch > 0x20 && ch < 0x7f);
      }
      break;
    default:
      (void)r::succeeded(body);
      // base64 both ways on the same bytes: decode(encode(x)) == x.
      {
        auto e = mc::master::etcd_base64(body);
        auto back = mc::master::etcd_unbase64(e);
        require(back && *back == body);
        (void)mc::master::etcd_unbase64(body);
      }
      break;
  }
  return 0;
}
