// Same-host transport, target side: the control server on a private service
// thread that answers hello, grant and release requests (see
// shm_transport.cpp for the protocol and the trust rules).
#include "shm_common.hpp"

#include <boost/asio/io_context.hpp>

#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>
#include <algorithm>
#include <vector>

namespace mc::transfer::detail {
namespace {

using namespace shm;

// ---- target side -------------------------------------------------------------

struct served_unix final : closable {
  served_unix(unix_socket s, std::unordered_set<closable*>& live) : sock(std::move(s)), reg(live, this) {}
  void close_now() noexcept override { interrupt_socket(sock); }
  unix_socket sock;
  live_registration reg;
};

}  // namespace

struct shm_server::state {
  explicit state(engine_impl& e) : eng(e), acceptor(ctx) {}
  engine_impl& eng;
  asio::io_context ctx{1};
  asio::local::stream_protocol::acceptor acceptor;
  std::unordered_set<closable*> live;  // service thread only
  bool stopping = false;               // service thread only
  std::size_t running = 0;             // accept loop + connection coroutines; service thread only
  asio::steady_timer stop_bound{ctx};  // stop(): run() ends after 2 s even if a coroutine never unwinds
  std::thread thread;
};

namespace {
/// Counts a coroutine of the service thread. stop() ends run() itself once the
/// last one has unwound: work that Asio 1.81's io_uring backend lost (see
/// interrupt_socket; epoll is used with that Boost now) must not keep the
/// thread, and stop(), waiting forever.
struct running_guard {
  explicit running_guard(shm_server::state* s) : st(s) { ++st->running; }
  ~running_guard() {
    if (--st->running == 0 && st->stopping) st->ctx.stop();
  }
  running_guard(const running_guard&) = delete;
  running_guard& operator=(const running_guard&) = delete;
  shm_server::state* st;
};
}  // namespace

namespace {

task<void> serve_unix(shm_server::state* st, unix_socket sock);

}  // namespace

shm_server::shm_server(engine_impl& eng) : s_(std::make_unique<state>(eng)) {}
shm_server::~shm_server() { stop(); }

mc::result<void> shm_server::listen(const std::string& name) {
  boost::system::error_code ec;
  auto ep = abstract_endpoint(name);
  s_->acceptor.open(ep.protocol(), ec);
  if (!ec) s_->acceptor.bind(ep, ec);
  if (!ec) s_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    s_->acceptor.close(ec);
    return fail(errc::io_error);
  }
  asio::co_spawn(
      s_->ctx,
      [](state* st) -> task<void> {
        running_guard counted(st);
        for (;;) {
          unix_socket s(st->ctx);
          auto [ec] = co_await st->acceptor.async_accept(s, asio::as_tuple(asio::use_awaitable));
          if (!st->acceptor.is_open() || st->stopping) {
            st->acceptor.close(ec);  // nothing is pending on it any more
            break;
          }
          if (ec) continue;
          asio::co_spawn(st->ctx, serve_unix(st, std::move(s)), asio::detached);
        }
      }(s_.get()),
      asio::detached);
  s_->thread = std::thread([st = s_.get()] {
    ::pthread_setname_np(::pthread_self(), "mc-shm-grants");  // top -H, perf
    st->ctx.run();
  });
  return {};
}

void shm_server::stop() noexcept {
  if (!s_->thread.joinable()) return;
  asio::post(s_->ctx, [st = s_.get()] {
    st->stopping = true;             // connections accepted but not yet started end at once
    interrupt_socket(st->acceptor);  // the accept loop wakes and closes it
    std::vector<closable*> all(st->live.begin(), st->live.end());
    for (auto* c : all) c->close_now();
    if (st->running == 0) st->ctx.stop();
    st->stop_bound.expires_after(std::chrono::seconds(2));
    st->stop_bound.async_wait([st](boost::system::error_code) { st->ctx.stop(); });
  });
  s_->thread.join();  // run() returns once every connection coroutine ended
}

namespace {

struct held_grant {
  std::uint64_t request_id = 0;
  std::shared_ptr<region_entry> entry;  // keeps a revoked entry alive until the grant ends
  std::uint64_t lease_end = 0;          // CLOCK_MONOTONIC ns
};

/// A connection's grants: at most max_grants_per_conn live ones, in the
/// order they were given (releases usually come in that order), in storage
/// reserved once per connection (no allocation per grant). A release only
/// ends its grant (entry reset): the ended ones are dropped together once
/// per read (forget_expired), not one erase (a shift of the rest) each.
struct grant_list {
  std::vector<held_grant> held;  // live and ended, in grant order
  std::size_t ended = 0;         // of `held`, released since the last sweep
  std::size_t bound;             // live ones at most
  // Where the next release is looked for first: just after the previous
  // one (initiators release in grant order); a miss scans the list.
  std::size_t release_hint = 0;
  // The largest request id granted on this connection so far: a larger one
  // (an initiator numbers its requests upwards) is surely not held, no scan.
  std::uint64_t max_id = 0;
  bool any = false;  // max_id is set

  explicit grant_list(std::size_t most) : bound(most) { held.reserve(2 * most); }
  std::size_t live() const noexcept { return held.size() - ended; }
  std::vector<held_grant>::iterator end() noexcept { return held.end(); }
  bool surely_not_held(std::uint64_t request_id) const noexcept { return !any || request_id > max_id; }
};

/// The live grant `request_id` names, or grants.end(): where the hint
/// points, else by a scan (a peer's own order costs it the scan only).
std::vector<held_grant>::iterator find_grant(grant_list& grants, std::uint64_t request_id) {
  if (grants.surely_not_held(request_id)) return grants.end();
  if (grants.release_hint < grants.held.size()) {
    auto& g = grants.held[grants.release_hint];
    if (g.entry != nullptr && g.request_id == request_id)
      return grants.held.begin() + static_cast<std::ptrdiff_t>(grants.release_hint);
  }
  return std::find_if(grants.held.begin(), grants.held.end(),
                      [&](const held_grant& g) { return g.entry != nullptr && g.request_id == request_id; });
}

/// Answers a grant request `h` (its lease payload already read) for the
/// range in the header and, for a grant_ranges request, the `more` ranges
/// after it (16 bytes each: address, length): all inside the region of the
/// header's token with the access, or the whole request is refused. `last`:
/// the entry this connection's previous grant found (the pieces of a
/// scatter registration share a token: one registry lookup per run of
/// them). Reusing it is safe: a revoked entry refuses new grants
/// (try_grant), and range and access are checked here as find() does.
header grant(shm_server::state* st, const header& h, std::uint64_t requested_end, std::span<const std::byte> more,
             grant_list& grants, std::shared_ptr<region_entry>& last) {
  auto& ctr = st->eng.counters_;
  header resp;
  resp.op = wire_op::shm_grant_resp;
  resp.request_id = h.request_id;
  const bool w = h.flags & grant_write;
  const auto need = w ? region_access::remote_write : region_access::remote_read;
  const auto now = monotonic_ns();
  // The lease: at most max_lease_ns_ (1 s), never after the initiator's deadline.
  const auto lease_end = std::max(now, std::min(now + st->eng.max_lease_ns_, requested_end));
  bool granted = false;
  for (bool reuse = last && last->token == h.token && h.token != 0;; reuse = false) {
    if (!reuse) {
      auto found = st->eng.registry_->find(h.address, h.length, h.token, need);
      last = found ? std::move(*found) : nullptr;
    }
    granted = last && h.length != 0 && last->contains(h.address, h.length) && transfer::grants(last->rights, need) &&
              grants.live() < grants.bound && find_grant(grants, h.request_id) == grants.end();
    for (std::size_t at = 0; granted && at < more.size(); at += 16) {
      const auto a = get_u64(more.data() + at), n = get_u64(more.data() + at + 8);
      granted = n != 0 && last->contains(a, n);
    }
    granted = granted && last->try_grant(lease_end);
    // Refused with the entry of an earlier grant: it may have been revoked
    // since (its token even reused): look the token up once.
    if (granted || !reuse) break;
  }
  if (granted) {
    grants.held.push_back(held_grant{h.request_id, last, lease_end});
    grants.max_id = grants.any ? std::max(grants.max_id, h.request_id) : h.request_id;
    grants.any = true;
    bump(ctr.grants_held);
    resp.token = lease_end;
    if (last->shared) {  // the initiator may map it (shm_map) instead of process_vm_*
      resp.address = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(last->shared->addr));
      resp.length = last->shared->id;
    }
    // Counted per range, as if each had been a grant of its own.
    std::uint64_t bytes = h.length;
    for (std::size_t at = 0; at < more.size(); at += 16) bytes += get_u64(more.data() + at + 8);
    bump(w ? ctr.served_write_ops : ctr.served_read_ops, 1 + more.size() / 16);
    if (!more.empty()) bump(ctr.range_grants_served);
    bump(w ? ctr.served_write_bytes : ctr.served_read_bytes, bytes);
  } else {
    // One answer for every "not yours" (unknown token, outside, access, revoked).
    bump(ctr.served_rejects);
    resp.status = static_cast<std::int32_t>(errc::access_denied);
  }
  return resp;
}

void end_grant(shm_server::state* st, const held_grant& g) {
  g.entry->release_grant();
  st->eng.counters_.grants_held.fetch_sub(1, std::memory_order_relaxed);
}

/// Drops the released grants and forgets those whose lease ended (the
/// initiator stops copying at its end).
void forget_expired(shm_server::state* st, grant_list& grants) {
  if (grants.held.empty()) return;
  const auto now = monotonic_ns();
  std::erase_if(grants.held, [&](const held_grant& g) {
    if (g.entry == nullptr) return true;  // released
    if (now < g.lease_end) return false;
    end_grant(st, g);
    return true;
  });
  grants.ended = 0;
  grants.release_hint = 0;  // positions moved: the oldest grant is released next
}

task<void> serve_unix(shm_server::state* st, unix_socket sock) {
  running_guard counted(st);
  served_unix c(std::move(sock), st->live);
  if (st->stopping) co_return;  // spawned before stop() swept `live`: would wait forever
  // Only processes of our own uid may ask (the kernel's view of the caller).
  auto cred = peer_cred_of(c.sock);
  if (!cred || cred->uid != ::geteuid()) {
    bump(st->eng.counters_.served_rejects);
    co_return;
  }
  boost::system::error_code ig;
  c.sock.non_blocking(true, ig);
  grant_list grants(st->eng.legacy_grants_for_tests_ ? legacy_grants_per_conn : max_grants_per_conn);
  std::shared_ptr<region_entry> last;  // the entry the previous grant found
  // Requests are read in bulk (whatever has arrived, up to `in`) and
  // answered in bulk: the answers to every complete request read so far go
  // out in one send before we wait for more. `in` holds a whole window
  // (max_grants_per_conn grants with their leases): a window then costs
  // this thread one or two recv and one send, not one per grant.
  // Both buffers are bounded: `out` holds the answers to the requests of
  // one fill of `in` (it is flushed before `in` is read again), each at most
  // header + identity, and a request takes at least a header's bytes.
  constexpr std::size_t in_bytes = max_grants_per_conn * (header_size + 8);  // a whole window of grants
  static_assert(in_bytes >= header_size + 16 + (max_ranges_per_grant - 1) * 16, "a grant_ranges request fits");
  std::array<std::byte, in_bytes> in;
  std::array<std::byte, (in_bytes / header_size + 1) * (header_size + shm_identity_size)> out;
  std::size_t begin = 0, end = 0, out_len = 0;
  for (;;) {
    if (end - begin >= header_size) {
      header_bytes hb;
      std::memcpy(hb.data(), in.data() + begin, header_size);
      auto h = decode(hb);
      if (!h) break;
      const bool leased = h->op == wire_op::shm_grant && (h->flags & grant_lease);
      const bool ranged = h->op == wire_op::shm_grant && (h->flags & grant_ranges);
      if (ranged && !leased) break;  // a range list comes after a lease only
      std::size_t need = header_size + (leased ? 8 : 0) + (ranged ? 8 : 0);
      std::size_t more = 0;  // bytes of the ranges after the header's
      if (ranged && end - begin >= need) {
        const auto n = get_u64(in.data() + begin + header_size + 8);
        if (n < 2 || n > max_ranges_per_grant) break;  // fits `in` within these bounds
        more = static_cast<std::size_t>(n - 1) * 16;
        need += more;
      }
      if (end - begin >= need) {
        const std::byte* payload = in.data() + begin + header_size;
        begin += need;
        std::byte* o = out.data() + out_len;
        std::size_t extra = 0;
        header resp;
        resp.request_id = h->request_id;
        if (h->op == wire_op::shm_hello) {
          resp.op = wire_op::shm_hello_resp;
          resp.address = static_cast<std::uint64_t>(::getpid());  // informational (older initiators compare it)
          // Our bound on live grants: the initiator's window (older initiators ignore it).
          resp.token = st->eng.legacy_grants_for_tests_ ? 0 : grants.bound | (cap_grant_ranges << hello_caps_shift);
          if (h->length == shm_identity_size) {  // revision 2: our identity follows
            resp.length = extra = shm_identity_size;
            put_u64(o + header_size, st->eng.pid_ns_.first);
            put_u64(o + header_size + 8, st->eng.pid_ns_.second);
            put_u64(o + header_size + 16, st->eng.instance_id_);
          }
        } else if (h->op == wire_op::shm_grant) {
          // Older initiators send no lease: the longest we give.
          const std::uint64_t requested = leased ? get_u64(payload) : monotonic_ns() + st->eng.max_lease_ns_;
          resp = grant(st, *h, requested, std::span<const std::byte>(payload + (ranged ? 16 : 0), more), grants, last);
        } else if (h->op == wire_op::shm_map) {
          // The memfd of the shared memory a live grant of this connection
          // lies in: only what the peer was granted a range of. The answers
          // queued before it go first (the descriptor rides on this one).
          resp.op = wire_op::shm_map_resp;
          auto g = find_grant(grants, h->address);
          const shared_memory* m = g != grants.end() ? g->entry->shared.get() : nullptr;
          if (m == nullptr || m->id != h->token) {
            bump(st->eng.counters_.served_rejects);
            resp.status = static_cast<std::int32_t>(errc::access_denied);
          } else {
            if (out_len > 0) {
              if (!co_await send_all(c.sock, out.data(), out_len)) break;
              out_len = 0;
            }
            resp.address = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(m->addr));
            resp.length = m->len;
            resp.token = m->id;
            auto keep = g->entry->shared;  // alive while the descriptor is sent
            if (!co_await send_header_fd(c.sock, resp, keep->fd)) break;
            bump(st->eng.counters_.shared_maps_served);
            continue;
          }
        } else if (h->op == wire_op::shm_release) {
          if (auto it = find_grant(grants, h->request_id); it != grants.end()) {  // unknown / expired: nothing to do
            end_grant(st, *it);
            it->entry.reset();
            ++grants.ended;
            grants.release_hint = static_cast<std::size_t>(it - grants.held.begin()) + 1;
          }
          continue;  // no response
        } else {
          break;
        }
        header_bytes rb;
        encode(resp, rb);
        std::memcpy(o, rb.data(), header_size);
        out_len += header_size + extra;
        continue;
      }
    }
    // No complete request left: answer what was asked, then read more.
    if (out_len > 0) {
      if (!co_await send_all(c.sock, out.data(), out_len)) break;
      out_len = 0;
    }
    if (begin > 0) {
      std::memmove(in.data(), in.data() + begin, end - begin);
      end -= begin;
      begin = 0;
    }
    errc err{};
    const ssize_t r = recv_once(c.sock.native_handle(), in.data() + end, in.size() - end, err);
    if (r < 0) break;
    if (r == 0) {
      if (!co_await wait_ready(c.sock, unix_socket::wait_read)) break;
      continue;
    }
    end += static_cast<std::size_t>(r);
    forget_expired(st, grants);  // once per read: the requests it brought may need the room
  }
  for (auto& g : grants.held)
    if (g.entry != nullptr) end_grant(st, g);  // peer gone: its copies are over
}

}  // namespace
}  // namespace mc::transfer::detail
