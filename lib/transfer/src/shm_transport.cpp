// Same-host transport: cross-memory attach (process_vm_readv/writev).
//
// The peer engine listens on an abstract unix socket named after its
// endpoint (abstract names are per network namespace, so finding it means:
// same kernel, same network namespace - NOT the same pid namespace or user:
// hostNetwork pods share abstract sockets). Before anything else both sides
// check the other end's credentials as the kernel reports them (SO_PEERCRED):
// same uid, and on the initiator a pid that is visible in our pid namespace
// (0 = not visible). The pid used for process_vm_* is that kernel-reported
// pid, never a number from the peer. The hello answer carries the target's
// pid namespace (st_dev/st_ino of /proc/self/ns/pid) and its engine instance
// id; another namespace, another uid, pid 0 or an instance id other than the
// one the descriptor expects means "not same host" for that peer: cached per
// peer (60 s, bounded) and the items go over TCP. EPERM/EACCES/ENOSYS from
// process_vm_* means the same, for that peer only.
//
// Per request the initiator asks for a grant (address, length, token,
// requested lease = its deadline); the target validates exactly like a TCP
// request and answers with a lease (an absolute CLOCK_MONOTONIC deadline,
// <= 1 s). The initiator copies in chunks of at most 1 MiB, checks the lease
// before each chunk and yields to the runtime between chunks; on lease
// expiry it releases and asks again for the rest. Unregistration never waits
// for grants (revoke now, reclaim later); the target forgets expired grants.
// Items of one direction (each <= 4 MiB; <= 32 MiB and the target's bound on
// live grants together, 256 or 64 for older targets) move as a window: their
// grant requests in one send, gathered process_vm_* calls of at most 1 MiB
// each over the granted items (the lease checked before each, the runtime
// thread yielded between them), their releases in one send (a spread
// batch's windows: in front of the connection's next request, or by the
// claimer's flush_deferred when it has no more chunks). Consecutive
// items under one token ask as one grant_ranges request (up to 64 ranges:
// one answer, one release) when the target's hello tells it serves them;
// a refused run goes again item by item. A window is
// also the first use of a pooled connection (no single-item probe first):
// failing before the target answered, it is tried again on a fresh one.
// The target's control server runs on a private service thread.
#include "shm_common.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "mc/runtime/when_all.hpp"

namespace mc::transfer::detail {
namespace {

using namespace shm;

class shm_transport final : public transport {
 public:
  explicit shm_transport(engine_impl& eng) : eng_(eng) {}
  transport_kind kind() const noexcept override { return transport_kind::same_host; }

  task<void> execute(thread_state& ts, const std::string& endpoint, std::span<transfer_item*> items) override {
    if (ts.not_same_host.get(endpoint, std::chrono::steady_clock::now())) {
      for (auto* it : items) it->finish(make_error_code(errc::unsupported));
      co_return;
    }
    auto* pool = ts.shm_pools.get(endpoint, ts.ex, eng_.opts_.connections_per_peer, eng_.opts_.max_peers, &ts.stopping);
    if (!pool) {
      for (auto* it : items) it->finish(make_error_code(errc::unsupported));
      co_return;
    }
    peer_pool<unix_socket>::connect_fn connect = [this, &ts, endpoint] { return this->connect(ts, endpoint); };
    std::size_t next = 0;
    auto workers = std::min<std::size_t>(items.size(), eng_.opts_.connections_per_peer);
    if (workers == 1) {
      co_await worker(ts, endpoint, *pool, connect, items, next, 0);
      co_return;
    }
    std::vector<task<int>> ws;
    for (std::size_t w = 0; w < workers; ++w) ws.push_back(worker(ts, endpoint, *pool, connect, items, next, w));
    co_await mc::when_all(std::move(ws));
  }

  task<void> flush_deferred(thread_state& ts, const std::string& endpoint) override {
    auto* pool = ts.shm_pools.find(endpoint);
    if (!pool) co_return;
    // Every idle connection is taken out (so none is visited twice) and
    // given back when this returns; only those with deferred releases send.
    std::vector<lease> taken;
    for (auto c = pool->try_idle(); c; c = pool->try_idle()) {
      if (!c->deferred.empty()) {
        c.begin();
        auto s = co_await send_all(c->sock, c->deferred.data(), c->deferred.size());
        c->deferred.clear();
        if (!s) {
          c.discard();  // closed: the peer ends its grants
          continue;
        }
        c.keep();
      }
      taken.push_back(std::move(c));
    }
  }

 private:
  /// Sends `n` bytes at `p` on `c`, behind its deferred releases (one send).
  static task<result<void>> send_after_deferred(pooled_conn<unix_socket>& c, const std::byte* p, std::size_t n) {
    if (c.deferred.empty()) co_return co_await send_all(c.sock, p, n);
    c.deferred.insert(c.deferred.end(), p, p + n);
    auto s = co_await send_all(c.sock, c.deferred.data(), c.deferred.size());
    c.deferred.clear();  // sent, or the connection is unusable (closed: the peer ends its grants)
    co_return s;
  }

  bool refused(thread_state& ts, const std::string& endpoint) const {
    return ts.not_same_host.get(endpoint, std::chrono::steady_clock::now()) == same_host_verdict::refused;
  }

  /// Marks `endpoint` "not same host" for refused_ttl (TCP from now on).
  void refuse(thread_state& ts, const std::string& endpoint, const char* why) {
    if (!refused(ts, endpoint))
      std::fprintf(stderr, "transfer: same-host transport not used for %s for %llds: %s; using TCP\n", endpoint.c_str(),
                   static_cast<long long>(refused_ttl.count()), why);
    ts.not_same_host.put(endpoint, same_host_verdict::refused, std::chrono::steady_clock::now() + refused_ttl);
    bump(eng_.counters_.same_host_fallbacks);
  }

  task<int> worker(thread_state& ts, const std::string& endpoint, peer_pool<unix_socket>& pool,
                   const peer_pool<unix_socket>::connect_fn& connect, std::span<transfer_item*> items,
                   std::size_t& next, std::size_t w) {
    auto got = co_await pool.acquire(connect, w == 0);
    if (!got) {
      if (!mc::is(got.error(), errc::cancelled))
        for (; next < items.size(); ++next) items[next]->finish(got.error());
      co_return 0;
    }
    lease c = std::move(*got);
    if (!c) co_return 0;
    bool first_on_conn = true;
    while (next < items.size()) {
      // Small items of one direction move as a window: one send of their
      // grant requests, gathered process_vm_* calls, one send of the
      // releases (no round trip per item).
      std::vector<transfer_item*> win;
      take_window(items, next, win, c->peer_max_grants);
      if (win.size() > 1) {
        bool unanswered = false;
        c.begin();
        auto r = co_await move_window(ts, endpoint, *c, win, unanswered);
        if (!r && unanswered && c.reused() && first_on_conn && !mc::is(r.error(), errc::cancelled)) {
          // Failed before the target answered: nothing was copied. A pooled
          // connection failing on first use is probably stale (the peer
          // restarted): the window again on a fresh connection, in windows
          // of that peer's bound.
          if (auto e = co_await replace_stale(ts, endpoint, pool, connect, c); e) {
            if (!mc::is(e, errc::cancelled)) fail_rest(win, items, next, e);
            co_return 0;
          }
          r = result<void>{};
          for (std::size_t at = 0; r && at < win.size();) {
            const auto n = std::min<std::size_t>(win.size() - at, c->peer_max_grants);
            c.begin();
            r = co_await move_window(ts, endpoint, *c, std::span<transfer_item* const>(win).subspan(at, n), unanswered);
            at += n;
          }
        }
        first_on_conn = false;
        if (r) {
          c.keep();
          continue;
        }
        c.discard();
        if (!mc::is(r.error(), errc::cancelled))
          for (auto* it : win)
            if (!it->done) it->finish(r.error());
        co_return 0;  // the other items: the remaining workers, or unfinished when cancelled
      }
      if (win.size() == 1) --next;  // one item: the path below
      transfer_item& it = *items[next++];
      c.begin();
      auto r = co_await move_one(ts, endpoint, *c, it);
      if (r) c.keep();
      if (!r && !mc::is(r.error(), errc::cancelled) && c.reused() && first_on_conn && !it.done) {
        // A pooled connection failing on first use is probably stale (the
        // peer restarted): retry once on a fresh connection.
        if (auto e = co_await replace_stale(ts, endpoint, pool, connect, c); e) {
          if (!mc::is(e, errc::cancelled)) {
            it.finish(e);
            for (; next < items.size(); ++next) items[next]->finish(e);
          }
          co_return 0;
        }
        c.begin();
        r = co_await move_one(ts, endpoint, *c, it);
        if (r) c.keep();
      }
      first_on_conn = false;
      if (!r) {
        c.discard();
        if (mc::is(r.error(), errc::cancelled)) co_return 0;
        it.finish(r.error());
        for (; next < items.size(); ++next) items[next]->finish(r.error());
        co_return 0;
      }
    }
    co_return 0;
  }

  /// Replaces `c`, a pooled connection that failed on first use, by a fresh
  /// one (the idle ones to that peer are dropped too: as stale). The error
  /// when none can be had: the peer was reachable a moment ago, so its
  /// socket vanishing means it died (transfer_fail, not unsupported), unless
  /// it is now known not to be on this host.
  task<std::error_code> replace_stale(thread_state& ts, const std::string& endpoint, peer_pool<unix_socket>& pool,
                                      const peer_pool<unix_socket>::connect_fn& connect, lease& c) {
    c.discard();
    pool.drop_idle();
    auto again = co_await pool.acquire(connect, true);
    if (!again || !*again) {
      auto e = again ? make_error_code(errc::transfer_fail) : again.error();
      if (mc::is(e, errc::unsupported) && !refused(ts, endpoint)) e = make_error_code(errc::transfer_fail);
      co_return e;
    }
    c = std::move(*again);
    co_return std::error_code{};
  }

  /// Finishes a window's unfinished items and every item after it with `e`.
  static void fail_rest(const std::vector<transfer_item*>& win, std::span<transfer_item*> items, std::size_t& next,
                        std::error_code e) {
    for (auto* it : win)
      if (!it->done) it->finish(e);
    for (; next < items.size(); ++next) items[next]->finish(e);
  }

  /// Grant, copy (chunked, leased), release; again for the rest when a lease
  /// ends first. An error result means the connection is unusable; a refusal
  /// finishes the item and returns success.
  task<result<void>> move_one(thread_state& ts, const std::string& endpoint, pooled_conn<unix_socket>& c,
                              transfer_item& it) {
    if (it.instance != 0 && it.instance != c.peer_instance) refuse(ts, endpoint, "another engine instance");
    if (refused(ts, endpoint)) {
      it.finish(make_error_code(errc::unsupported));
      co_return result<void>{};
    }
    std::uint64_t done = 0;
    int dead_grants = 0;  // in a row: grants that moved nothing (max_dead_grants)
    while (done < it.length) {
      if (++dead_grants > max_dead_grants) co_return fail(errc::transfer_fail);
      std::array<std::byte, grant_request_size> out{};
      const auto id = c.next_id++;
      encode_grant(out.data(), id, it, done);
      if (auto s = co_await send_after_deferred(c, out.data(), out.size()); !s) co_return s.error();
      auto resp = co_await recv_header(c.sock);
      if (!resp) co_return resp.error();
      if (resp->op != wire_op::shm_grant_resp || resp->request_id != id) co_return fail(errc::transfer_fail);
      if (resp->status != 0) {
        it.finish(status_to_error(resp->status));
        co_return result<void>{};
      }
      auto mapped = co_await mapping_for(eng_, ts, c, *resp);
      if (!mapped) co_return mapped.error();
      const auto before = done;
      auto copied = co_await copy_item(eng_, static_cast<pid_t>(c.peer_pid), it, done,
                                       std::min(resp->token, to_monotonic_ns(it.deadline)), mapped->get());
      if (done != before) dead_grants = 0;
      header rel;
      rel.op = wire_op::shm_release;
      rel.request_id = id;
      if (copied == copy_end::cancelled) co_return fail(errc::cancelled);  // closing the connection releases
      auto s = co_await send_header(c.sock, rel);
      if (copied == copy_end::refused) {
        refuse(ts, endpoint, "the kernel refuses cross-memory attach");
        it.finish(make_error_code(errc::unsupported));
      } else if (copied == copy_end::failed) {
        it.finish(make_error_code(errc::transfer_fail));
      }
      if (!s) co_return s.error();
      if (copied == copy_end::refused || copied == copy_end::failed) co_return result<void>{};
      // copy_end::lease_over: ask again for the rest (the deadline still bounds it)
    }
    it.finish({});
    co_return result<void>{};
  }

  /// Grants in a row whose lease was over before anything moved, at most.
  /// On a loaded host the answer can wait longer than a short lease (a
  /// test's 3 ms lease under 4 sanitizer processes on 2 cores: 4 in 10
  /// grants dead, up to 9 in a row), so asking again is right; the bound
  /// caps what a peer handing out dead leases costs (that many round trips,
  /// then transfer_fail).
  static constexpr int max_dead_grants = 32;

  /// Items a window takes at most (the target's bound on outstanding grants
  /// per connection), the largest item it takes, and its bytes at most (one
  /// round trip for this many; copied max_copy_chunk per system call).
  static constexpr std::size_t window_items = max_grants_per_conn;
  static constexpr std::uint64_t window_item_max = 4u << 20;
  static constexpr std::uint64_t window_bytes = 32u << 20;

  /// The next items of one direction that are small enough for a window of
  /// at most `most` items (the target's bound on live grants, <= window_items
  /// as the hello clamps it).
  static void take_window(std::span<transfer_item*> items, std::size_t& next, std::vector<transfer_item*>& win,
                          std::size_t most) {
    std::uint64_t bytes = 0;
    while (next < items.size() && win.size() < most) {
      auto* it = items[next];
      if (it->done) {
        ++next;
        continue;
      }
      if (it->length > window_item_max || bytes + it->length > window_bytes ||
          (!win.empty() && it->op != win.front()->op))
        break;
      bytes += it->length;
      win.push_back(it);
      ++next;
    }
  }

  /// Grants, one gathered copy and releases for a window of small items. An
  /// error result means the connection is unusable (the caller fails the
  /// window's unfinished items); refusals finish their item. Items the
  /// gathered copy did not complete (a lease over, a fault) go through
  /// move_one, which tells their errors apart.
  task<result<void>> move_window(thread_state& ts, const std::string& endpoint, pooled_conn<unix_socket>& c,
                                 std::span<transfer_item* const> win, bool& unanswered) {
    unanswered = false;
    std::array<transfer_item*, window_items> asked{};  // the items asked for, in order
    std::size_t ni = 0;
    for (auto* it : win) {
      if (it->done) continue;  // (a window again after a stale connection: refused the first time)
      if (it->instance != 0 && it->instance != c.peer_instance) refuse(ts, endpoint, "another engine instance");
      if (refused(ts, endpoint)) {
        it->finish(make_error_code(errc::unsupported));
        continue;
      }
      asked[ni++] = it;
    }
    if (ni == 0) co_return result<void>{};
    // One request per run of consecutive items under one token (the pieces
    // of a value: one grant_ranges request of up to max_ranges_per_grant
    // when the peer serves them), else one per item. A run's request is
    // never longer than its items' single requests would be.
    struct ask {
      std::uint64_t id;
      std::size_t first, count;  // asked[first, first + count)
    };
    std::array<ask, window_items> asks{};
    std::size_t na = 0, out_len = 0;
    std::array<std::byte, window_items * grant_request_size> out{};
    for (std::size_t i = 0; i < ni;) {
      std::size_t j = i + 1;
      if (c.peer_grant_ranges)
        while (j < ni && j - i < max_ranges_per_grant && asked[j]->token == asked[i]->token) ++j;
      const auto id = c.next_id++;
      out_len += j - i == 1 ? encode_grant(out.data() + out_len, id, *asked[i], 0)
                            : encode_grant_ranges(out.data() + out_len, id, std::span(asked).subspan(i, j - i));
      asks[na++] = {id, i, j - i};
      i = j;
    }
    // Answers in order, received together (the target answers a window in
    // one send); keep the granted items. A failure before they came: no
    // item was copied (the caller may try the window on a fresh connection).
    std::array<std::byte, window_items * header_size> answers;
    auto sent = co_await send_after_deferred(c, out.data(), out_len);
    if (sent) sent = co_await recv_all(c.sock, answers.data(), na * header_size);
    if (!sent) {
      unanswered = true;
      co_return sent.error();
    }
    std::array<transfer_item*, window_items> granted{};
    std::array<header, window_items> answer{};         // the granted items' answers (a run's items share one)
    std::array<std::uint64_t, window_items> held{};    // the granted requests' ids (releases)
    std::array<transfer_item*, window_items> again{};  // items of refused runs: one by one below
    std::size_t g = 0, nh = 0, nagain = 0;
    std::uint64_t lease_end = UINT64_MAX, total = 0;
    // The items' deadlines in CLOCK_MONOTONIC ns: converted once per
    // distinct deadline (a batch's items share one; two clock reads each).
    std::optional<std::chrono::steady_clock::time_point> converted;
    std::uint64_t converted_ns = 0;
    for (std::size_t k = 0; k < na; ++k) {
      header_bytes hb;
      std::memcpy(hb.data(), answers.data() + k * header_size, header_size);
      auto resp = decode(hb);
      if (!resp) co_return resp.error();
      if (resp->op != wire_op::shm_grant_resp || resp->request_id != asks[k].id) co_return fail(errc::transfer_fail);
      const auto run = std::span(asked).subspan(asks[k].first, asks[k].count);
      if (resp->status != 0) {
        if (run.size() == 1) {
          run.front()->finish(status_to_error(resp->status));
        } else {
          // One refusal for the run: which piece is "not yours" is told
          // item by item.
          for (auto* it : run) again[nagain++] = it;
        }
        continue;
      }
      held[nh++] = resp->request_id;
      for (auto* it : run) {
        granted[g] = it;
        answer[g] = *resp;
        if (converted != it->deadline) {
          converted = it->deadline;
          converted_ns = to_monotonic_ns(it->deadline);
        }
        lease_end = std::min({lease_end, resp->token, converted_ns});
        total += it->length;
        ++g;
      }
    }
    // Items inside the peer's shared memory (mapped here): memcpy, the lease
    // checked before each and the runtime thread yielded after every ~1 MiB.
    // The others: gathered process_vm_* calls of at most max_copy_chunk each,
    // in item order, the lease checked before each. `whole`: the items of
    // `rest` wholly copied; a short copy or a fault ends the copies.
    bool stopped = false;                       // cancelled while yielding between copies
    std::array<bool, window_items> finished{};  // wholly copied (through a mapping, or in `rest` below `whole`)
    std::array<std::size_t, window_items> rest{};
    std::array<iovec, window_items> l{}, r{};
    std::size_t nrest = 0, since_yield = 0;
    // The items of a run share one answer, hence one mapping: asked for once
    // per run (a vLLM window is 256 pieces in 4 runs), not per item.
    std::shared_ptr<peer_mapping> mapped;
    const header* mapped_for = nullptr;
    for (std::size_t i = 0; i < g && !stopped; ++i) {
      auto* it = granted[i];
      if (!names_mapping(answer[i])) {
        mapped = nullptr;
        mapped_for = nullptr;
      } else if (!mapped_for || mapped_for->length != answer[i].length || mapped_for->address != answer[i].address) {
        auto m = co_await mapping_for(eng_, ts, c, answer[i]);
        if (!m) co_return m.error();
        mapped = std::move(*m);
        mapped_for = &answer[i];
      }
      std::byte* p = mapped ? mapped->at(it->address, it->length) : nullptr;
      if (p != nullptr && monotonic_ns() < lease_end) {
        copy_mapped(eng_, *mapped, it->op, it->local, p, static_cast<std::size_t>(it->length));
        finished[i] = true;
        since_yield += it->length;
        if (since_yield >= max_copy_chunk) {
          since_yield = 0;
          if (!co_await yield_to_runtime()) stopped = true;
        }
        continue;
      }
      if (p != nullptr) continue;  // the lease is over: move_one below asks again
      rest[nrest] = i;
      l[nrest] = {it->local, static_cast<std::size_t>(it->length)};
      r[nrest] = {reinterpret_cast<void*>(static_cast<std::uintptr_t>(it->address)),
                  static_cast<std::size_t>(it->length)};
      ++nrest;
    }
    std::size_t whole = 0;
    const auto pid = static_cast<pid_t>(c.peer_pid);
    while (!stopped && whole < nrest && !eng_.refuse_cma_for_tests_) {
      if (monotonic_ns() >= lease_end) break;
      std::size_t e = whole;
      std::uint64_t bytes = 0;
      while (e < nrest && (e == whole || bytes + l[e].iov_len <= max_copy_chunk)) bytes += l[e++].iov_len;
      const auto cnt = static_cast<unsigned long>(e - whole);
      ssize_t copied;
      do {
        copied = win.front()->op == op_kind::read
                     ? ::process_vm_readv(pid, l.data() + whole, cnt, r.data() + whole, cnt, 0)
                     : ::process_vm_writev(pid, l.data() + whole, cnt, r.data() + whole, cnt, 0);
      } while (copied < 0 && errno == EINTR);
      auto left = copied > 0 ? static_cast<std::uint64_t>(copied) : 0;
      while (whole < e && left >= l[whole].iov_len) left -= l[whole++].iov_len;
      if (whole < e) break;  // short: the rest one by one below
      if (whole < nrest && !co_await yield_to_runtime()) {
        stopped = true;
        break;
      }
    }
    for (std::size_t j = 0; j < whole; ++j) finished[rest[j]] = true;
    // Releases for every grant, in one send. A window of a spread batch
    // wholly copied keeps them for the front of the connection's next
    // request (one wake-up of the peer's grant thread per window, not two);
    // the claimer's flush_deferred sends what is left when it ends.
    bool defer = nh > 0 && !stopped && nagain == 0;
    for (std::size_t i = 0; defer && i < g; ++i) defer = finished[i] && granted[i]->more_follow;
    std::array<std::byte, window_items * header_size> rel{};
    for (std::size_t i = 0; i < nh; ++i) {
      header h;
      h.op = wire_op::shm_release;
      h.request_id = held[i];
      header_bytes hb;
      encode(h, hb);
      std::memcpy(rel.data() + i * header_size, hb.data(), header_size);
    }
    if (defer) {
      c.deferred.assign(rel.data(), rel.data() + nh * header_size);  // empty before: sent with this window's grants
      bump(eng_.counters_.releases_deferred, nh);
    } else if (nh > 0) {
      if (auto s = co_await send_all(c.sock, rel.data(), nh * header_size); !s) co_return s.error();
    }
    for (std::size_t i = 0; i < g; ++i)
      if (finished[i]) granted[i]->finish({});
    if (stopped) co_return fail(errc::cancelled);  // the rest stays unfinished
    // Not (wholly) copied: again one by one (grant, chunked copy, release),
    // which tells their errors apart.
    for (std::size_t i = 0; i < g; ++i)
      if (!finished[i])
        if (auto one = co_await move_one(ts, endpoint, c, *granted[i]); !one) co_return one;
    for (std::size_t i = 0; i < nagain; ++i)
      if (auto one = co_await move_one(ts, endpoint, c, *again[i]); !one) co_return one;
    if (total > 0 && !co_await yield_to_runtime()) co_return fail(errc::cancelled);
    co_return result<void>{};
  }

  /// Connects to the peer's control socket and checks who is behind it.
  /// unsupported (remembered per peer): no socket, or not "same host".
  task<result<std::unique_ptr<pooled_conn<unix_socket>>>> connect(thread_state& ts, std::string endpoint) {
    unix_socket s(ts.ex);
    auto [ec] = co_await s.async_connect(abstract_endpoint("mooncake-p2p.transfer/" + endpoint),
                                         asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::operation_aborted) co_return fail(errc::cancelled);
    if (ec) {
      ts.not_same_host.put(endpoint, same_host_verdict::no_socket, std::chrono::steady_clock::now() + no_socket_ttl);
      co_return fail(errc::unsupported);
    }
    boost::system::error_code ig;
    s.non_blocking(true, ig);
    auto cred = peer_cred_of(s);
    if (!cred || cred->pid <= 0 || cred->uid != ::geteuid()) {
      refuse(ts, endpoint,
             !cred || cred->pid <= 0 ? "the peer process is not visible in our pid namespace"
                                     : "the peer runs as another user");
      co_return fail(errc::unsupported);
    }
    auto c = std::make_unique<pooled_conn<unix_socket>>(std::move(s), ts.live, nullptr);
    header h;
    h.op = wire_op::shm_hello;
    h.length = shm_identity_size;  // revision 2: ask for the identity
    if (auto r = co_await send_header(c->sock, h); !r) co_return r.error();
    auto resp = co_await recv_header(c->sock);
    if (!resp) co_return resp.error();
    if (resp->op != wire_op::shm_hello_resp || resp->status != 0) co_return fail(errc::transfer_fail);
    if (resp->length != shm_identity_size) {
      refuse(ts, endpoint, "the peer does not tell its identity (older version)");
      co_return fail(errc::unsupported);
    }
    std::array<std::byte, shm_identity_size> id;
    if (auto r = co_await recv_all(c->sock, id.data(), id.size()); !r) co_return r.error();
    const std::pair<std::uint64_t, std::uint64_t> ns{get_u64(id.data()), get_u64(id.data() + 8)};
    const auto instance = get_u64(id.data() + 16);
    if (ns != eng_.pid_ns_ || ns.second == 0 || instance == 0) {
      refuse(ts, endpoint, "the peer lives in another pid namespace");
      co_return fail(errc::unsupported);
    }
    c->peer_pid = cred->pid;  // from the kernel, never from the peer's message
    c->peer_instance = instance;
    // Its bound on our live grants (0 from older targets: theirs was 64) and,
    // above it, what it serves.
    const std::uint64_t bound = resp->token & ((1ull << hello_caps_shift) - 1);
    c->peer_max_grants =
        bound == 0 ? legacy_grants_per_conn : static_cast<std::size_t>(std::min<std::uint64_t>(bound, window_items));
    c->peer_grant_ranges = ((resp->token >> hello_caps_shift) & cap_grant_ranges) != 0;
    co_return c;
  }

  engine_impl& eng_;
};

}  // namespace

std::unique_ptr<transport> make_shm_transport(engine_impl& eng) { return std::make_unique<shm_transport>(eng); }

}  // namespace mc::transfer::detail
