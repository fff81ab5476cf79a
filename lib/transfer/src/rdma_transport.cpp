// RDMA transport: RC queue pairs per peer (pooled, bounded, per runtime
// thread), handshake over the peer's TCP endpoint, RDMA READ / WRITE with
// signalled completions delivered through a completion channel whose fd the
// runtime awaits (no polling thread). Target side: rdma_serve.cpp.
//
// Several devices (multi-rail): each runtime thread has one "rail" per local
// device (completion channel + CQ + QP pools). Rail pairing: our device k
// talks to the target's device k only (rails are often separate fabrics), so
// with a target that has n devices we use our devices 0 .. min(ours, n)-1;
// the first handshake with a peer (always on device 0) learns n. The
// registry token carries device 0's rkey; rkeys on devices k > 0 are asked
// from the target (wire op rdma_rkey over the QP's TCP connection) and cached
// per (endpoint, device, token). A batch's slices are spread over the rails
// (worker w uses rail (start + w) % rails, start rotates per batch).
#include "engine_impl.hpp"
#include "io.hpp"
#include "rdma.hpp"
#include "rdma_thread.hpp"
#include "rdma_verbs.hpp"
#include "rdma_wire.hpp"
#include "wire.hpp"

#include "mc/runtime/when_all.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/socket_base.hpp>

#include <fcntl.h>
#include <sys/random.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <tuple>
#include <unordered_set>

namespace mc::transfer::detail {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

struct slice {
  std::uint32_t item = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint32_t tries = 0;
};

struct job {
  std::string endpoint;
  std::span<transfer_item*> items;
  std::vector<slice> slices;
  std::deque<std::uint32_t> queue;  // indices into slices still to post
  std::vector<std::uint64_t> remaining;
  std::size_t start = 0;         // first rail of this batch
  std::size_t chain = qp_depth;  // slices per chain (smaller: spread over the workers)
};

using lease = conn_lease<rdma_link>;

class rdma_transport final : public transport {
 public:
  explicit rdma_transport(engine_impl& eng) : eng_(eng) {}
  transport_kind kind() const noexcept override { return transport_kind::rdma; }

  task<void> execute(thread_state& ts, const std::string& endpoint, std::span<transfer_item*> items) override {
    auto thr = thread_of(eng_, ts);
    if (!thr) {
      for (auto* it : items) it->finish(thr.error());
      co_return;
    }
    rdma_thread& th = **thr;
    if (auto nr = th.no_rdma.find(endpoint); nr != th.no_rdma.end()) {
      if (std::chrono::steady_clock::now() - nr->second < no_rdma_ttl) {
        for (auto* it : items) it->finish(make_error_code(errc::unsupported));
        co_return;
      }
      th.no_rdma.erase(nr);
    }
    job j;
    j.endpoint = endpoint;
    j.items = items;
    j.remaining.resize(items.size());
    std::uint64_t ss = eng_.opts_.slice_size;
    for (std::size_t k = 0; k < th.rails.size(); ++k) ss = std::min<std::uint64_t>(ss, th.ctx->dev(k).max_msg_size());
    for (std::uint32_t i = 0; i < items.size(); ++i) {
      for (std::uint64_t off = 0; off < items[i]->length; off += ss) {
        j.queue.push_back(static_cast<std::uint32_t>(j.slices.size()));
        j.slices.push_back({i, off, std::min(ss, items[i]->length - off), 0});
        ++j.remaining[i];
      }
    }
    if (th.rails.size() > 1 && !th.remote_devs.contains(endpoint)) {
      // First contact with several local devices: one handshake on device 0
      // learns the target's device count (the connection stays pooled).
      co_await worker(j, ts, th, 0, true, true);
    }
    co_await run_workers(j, ts, th);
    if (std::any_of(items.begin(), items.end(),
                    [](transfer_item* it) { return it->done && mc::is(it->ec, errc::unsupported); }))
      th.no_rdma[endpoint] = std::chrono::steady_clock::now();
  }

 private:
  task<void> run_workers(job& j, thread_state& ts, rdma_thread& th) {
    auto cs = co_await asio::this_coro::cancellation_state;
    auto live = [&] { return !j.queue.empty() && !th.stopping && cs.cancelled() == asio::cancellation_type::none; };
    if (j.queue.empty()) co_return;  // the probe failed: every item finished
    const std::size_t rails = th.rails_for(j.endpoint);
    j.start = th.next_rail++ % rails;
    const auto per_worker = (j.slices.size() + qp_depth - 1) / qp_depth;
    // One device: as before. Several: at least one worker per rail, and
    // chains short enough that every worker gets slices.
    const std::size_t least = rails > 1 ? std::min(rails, j.slices.size()) : 1;
    const auto workers =
        std::clamp<std::size_t>(per_worker, std::max<std::size_t>(least, 1), eng_.opts_.connections_per_peer * rails);
    if (rails > 1) j.chain = std::clamp<std::size_t>((j.slices.size() + workers - 1) / workers, 1, qp_depth);
    if (workers == 1) {
      co_await worker(j, ts, th, 0, false, false);
    } else {
      std::vector<task<int>> ws;
      for (std::size_t w = 0; w < workers; ++w) ws.push_back(worker(j, ts, th, w, false, false));
      co_await mc::when_all(std::move(ws));
    }
    // Slices requeued after the other workers left (or left by a rail k > 0
    // that could not connect): device 0 finishes them or fails them. Not
    // after a cancellation (deadline) or stop: the caller settles those.
    if (live()) co_await worker(j, ts, th, 0, true, false);
    if (live()) fail_rest(j, make_error_code(errc::transfer_fail));
  }

  /// Takes slices off the queue and runs them on QPs of one rail. `rail0`:
  /// device 0 regardless of w; `probe`: return after one connection was
  /// acquired (it goes back to the pool). Only device 0's connect errors fail
  /// items; a rail k > 0 that cannot connect leaves its work to device 0.
  task<int> worker(job& j, thread_state& ts, rdma_thread& th, std::size_t w, bool rail0, bool probe) {
    lease c;
    std::size_t rail = 0;
    for (;;) {
      while (!j.queue.empty() && j.items[j.slices[j.queue.front()].item]->done) j.queue.pop_front();
      if (j.queue.empty()) co_return 0;
      if (!c) {
        rail = rail0 ? 0 : (j.start + w) % th.rails_for(j.endpoint);
        auto* pool = th.rails[rail]->pools.get(j.endpoint, ts.ex, eng_.opts_.connections_per_peer, eng_.opts_.max_peers,
                                               &th.stopping);
        if (!pool) {
          if (rail == 0) fail_rest(j, make_error_code(errc::no_available_handle));
          co_return 0;
        }
        peer_pool<rdma_link>::connect_fn connect = [this, &ts, &th, ep = j.endpoint, rail] {
          return this->connect(ts, th, ep, rail);
        };
        auto got = co_await pool->acquire(connect, w == 0 || rail0);
        if (!got) {
          if (rail == 0 && !mc::is(got.error(), errc::cancelled)) fail_rest(j, got.error());
          co_return 0;
        }
        if (!*got) co_return 0;  // pool exhausted: the other workers do the work
        c = std::move(*got);
        if (probe) co_return 0;
      }
      if (j.queue.empty()) co_return 0;
      qp_state& q = *c->sock.s;
      c.begin();
      const bool ok = co_await run_chain(j, th, q);
      if (ok) c.keep();
      if (!ok) {
        c.discard();  // the QP is in error (or cancelled): rebuilt on the next acquire
        if (th.stopping) {
          fail_rest(j, make_error_code(errc::shutting_down));
          co_return 0;
        }
        auto cs = co_await asio::this_coro::cancellation_state;
        if (cs.cancelled() != asio::cancellation_type::none) co_return 0;
      }
    }
  }

  static void fail_rest(job& j, boost::system::error_code ec) {
    for (auto s : j.queue) j.items[j.slices[s].item]->finish(ec);
    j.queue.clear();
  }

  using rkey_key = std::tuple<std::string, std::size_t, std::uint64_t>;

  /// Device k > 0: makes sure the target's rkeys of the next slices' regions
  /// are cached (asked over the QP's TCP connection). A region the target
  /// does not know fails its item. False: the connection is unusable, or
  /// the peer does not serve rdma_rkey (it is then used on device 0 only).
  task<bool> resolve_rkeys(job& j, rdma_thread& th, qp_state& q) {
    std::vector<std::pair<std::uint64_t, transfer_item*>> need;
    std::size_t n = 0;
    for (auto si : j.queue) {
      if (n++ >= j.chain) break;
      transfer_item* it = j.items[j.slices[si].item];
      if (it->done || th.rkeys.contains(rkey_key{j.endpoint, q.dev, it->token})) continue;
      if (std::none_of(need.begin(), need.end(), [&](auto& p) { return p.second == it; }))
        need.emplace_back(it->token, it);
    }
    for (auto [token, it] : need) {
      header h;
      h.op = wire_op::rdma_rkey;
      h.request_id = q.next_id++;
      h.address = q.dev;
      h.token = token;
      header_bytes hb, rb;
      encode(h, hb);
      if (!co_await send_all(q.ctrl, hb.data(), hb.size()) || !co_await recv_all(q.ctrl, rb.data(), rb.size()))
        co_return false;
      auto r = decode(rb);
      if (!r || r->op != wire_op::rdma_rkey_resp || r->request_id != h.request_id) co_return false;
      if (r->status == static_cast<std::int32_t>(errc::unsupported)) {
        th.remote_devs[j.endpoint] = 1;
        co_return false;
      }
      if (r->status != 0) {
        if (!it->done) it->finish(status_to_error(r->status));
        continue;
      }
      if (th.rkeys.size() >= 65536) th.rkeys.clear();  // bounded; refetched on demand
      th.rkeys[rkey_key{j.endpoint, q.dev, token}] = static_cast<std::uint32_t>(r->token);
    }
    co_return true;
  }

  /// Derived tokens (derived_token_bit) name a sub-range of the target's
  /// region but carry its rkey, which is all the NIC checks. So before the
  /// first READ/WRITE with such a token on this QP the target confirms the
  /// item's whole range and access on the QP's control connection (rdma_check,
  /// pipelined, one per <= 256 MiB). A refusal fails the item (access_denied).
  /// A revoked derived region is refused here, and the target's fence kills
  /// the QPs that validated it earlier. False: the connection is unusable.
  task<bool> validate_derived(job& j, qp_state& q) {
    struct ask {
      transfer_item* it;
      std::uint64_t offset, length, id;
    };
    std::vector<ask> asks;
    std::size_t n = 0;
    for (auto si : j.queue) {
      if (n++ >= j.chain) break;
      transfer_item* it = j.items[j.slices[si].item];
      if (it->done || !(it->token & derived_token_bit) ||
          q.is_validated(it->token, it->address, it->length, it->op == op_kind::write) ||
          std::any_of(asks.begin(), asks.end(), [&](const ask& a) { return a.it == it; }))
        continue;
      for (std::uint64_t off = 0; off < it->length; off += max_wire_length)
        asks.push_back({it, off, std::min<std::uint64_t>(max_wire_length, it->length - off), q.next_id++});
    }
    if (asks.empty()) co_return true;
    std::vector<std::byte> out(asks.size() * header_size);
    for (std::size_t i = 0; i < asks.size(); ++i) {
      header h;
      h.op = wire_op::rdma_check;
      h.flags = asks[i].it->op == op_kind::write ? grant_write : 0;
      h.request_id = asks[i].id;
      h.address = asks[i].it->address + asks[i].offset;
      h.length = asks[i].length;
      h.token = asks[i].it->token;
      header_bytes hb;
      encode(h, hb);
      std::memcpy(out.data() + i * header_size, hb.data(), header_size);
    }
    if (!co_await send_all(q.ctrl, out.data(), out.size())) co_return false;
    for (const auto& a : asks) {
      header_bytes rb;
      if (!co_await recv_all(q.ctrl, rb.data(), rb.size())) co_return false;
      auto r = decode(rb);
      if (!r || r->op != wire_op::rdma_check_resp || r->request_id != a.id) co_return false;
      if (r->status != 0 && !a.it->done) a.it->finish(status_to_error(r->status));
    }
    for (const auto& a : asks) {
      if (a.offset != 0 || a.it->done) continue;  // one entry per item, only when every piece passed
      if (q.checked.size() >= qp_state::max_validated) q.checked.erase(q.checked.begin());
      q.checked.push_back({a.it->token, a.it->address, a.it->length, a.it->op == op_kind::write});
    }
    co_return true;
  }

  /// Posts up to qp_depth slices on `q`, awaits their completions, finishes
  /// items. False when the QP is no longer usable.
  task<bool> run_chain(job& j, rdma_thread& th, qp_state& q) {
    if (q.dev > 0 && !co_await resolve_rkeys(j, th, q)) co_return false;
    if (!co_await validate_derived(j, q)) co_return false;
    std::vector<std::uint32_t> taken;
    ibv_send_wr wrs[qp_depth];
    ibv_sge sges[qp_depth];
    bool bounce_used = false;
    mc::verbs::device& dev = th.ctx->dev(q.dev);
    while (taken.size() < j.chain && !j.queue.empty()) {
      const auto si = j.queue.front();
      const slice& s = j.slices[si];
      transfer_item& it = *j.items[s.item];
      if (it.done) {
        j.queue.pop_front();
        continue;
      }
      if ((it.token & derived_token_bit) && !q.is_validated(it.token, it.address, it.length, it.op == op_kind::write))
        break;  // validated at the next chain
      std::uint32_t rkey = static_cast<std::uint32_t>(it.token & 0xffffffffu);
      if (q.dev > 0) {
        auto rk = th.rkeys.find(rkey_key{j.endpoint, q.dev, it.token});
        if (rk == th.rkeys.end()) break;  // resolved at the next chain
        rkey = rk->second;
      }
      std::byte* local = it.local + s.offset;
      auto lkey = th.ctx->local_lkey(q.dev, local, s.length);
      bool bounce = false;
      if (!lkey) {
        // The local buffer is not registered: go through the QP's registered
        // bounce buffer (one slice at a time).
        if (bounce_used) break;
        if (!q.bounce_mr) {
          const auto n = std::min<std::uint64_t>(eng_.opts_.slice_size, dev.max_msg_size());
          q.bounce = std::make_unique<std::byte[]>(n);
          auto mr = dev.reg_mr(q.bounce.get(), n, IBV_ACCESS_LOCAL_WRITE);  // initiator-only staging
          if (!mr) {
            q.bounce.reset();
            it.finish(mr.error());
            j.queue.pop_front();
            continue;
          }
          q.bounce_mr = *mr;
        }
        bounce = bounce_used = true;
        lkey = q.bounce_mr->lkey;
        if (it.op == op_kind::write) std::memcpy(q.bounce.get(), local, s.length);
        local = q.bounce.get();
      }
      j.queue.pop_front();
      const auto k = taken.size();
      auto& p = q.slots[k];
      p = posted_wr{&q, IBV_WC_SUCCESS, false, si, bounce};
      sges[k] = ibv_sge{reinterpret_cast<std::uintptr_t>(local), static_cast<std::uint32_t>(s.length), *lkey};
      auto& wr = wrs[k];
      wr = ibv_send_wr{};
      wr.wr_id = reinterpret_cast<std::uintptr_t>(&p);
      wr.sg_list = &sges[k];
      wr.num_sge = 1;
      wr.opcode = it.op == op_kind::write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.rdma.remote_addr = it.address + s.offset;
      wr.wr.rdma.rkey = rkey;
      if (k > 0) wrs[k - 1].next = &wr;
      taken.push_back(si);
    }
    if (taken.empty()) co_return true;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(q.qp, wrs, &bad) != 0) {
      // Nothing after `bad` was posted; what was posted completes normally.
      std::size_t posted = bad ? static_cast<std::size_t>(bad - wrs) : 0;
      for (std::size_t k = posted; k < taken.size(); ++k) {
        q.slots[k].done = true;
        q.slots[k].status = IBV_WC_WR_FLUSH_ERR;  // requeued below
      }
      q.outstanding = static_cast<std::uint32_t>(posted);
      q.to_error();
    } else {
      q.outstanding = static_cast<std::uint32_t>(taken.size());
    }
    if (q.outstanding > 0) {
      // The target-side QP lives as long as the control connection: when it
      // closes (the peer died or stopped) flush our QP at once instead of
      // waiting for the transport retries to run out.
      q.ctrl.async_wait(tcp_socket::wait_read, [qp = &q, alive = q.alive](boost::system::error_code ec) {
        if (ec || !*alive || qp->outstanding == 0) return;
        qp->peer_gone = true;
        qp->to_error();
      });
    }
    while (q.outstanding > 0) {
      co_await q.wake.async_wait(asio::as_tuple(asio::use_awaitable));
      auto cs = co_await asio::this_coro::cancellation_state;
      if (th.stopping || cs.cancelled() != asio::cancellation_type::none) {
        (void)q.drain();  // no byte may move after we return
        co_return false;
      }
    }
    {
      boost::system::error_code ig;
      q.ctrl.cancel(ig);  // the control-connection watch
    }
    bool conn_ok = true;
    auto& ctr = th.ctx->counters(q.dev);
    for (std::size_t k = 0; k < taken.size(); ++k) {
      const posted_wr& p = q.slots[k];
      slice& s = j.slices[p.slice];
      transfer_item& it = *j.items[s.item];
      if (it.done) continue;
      if (p.status == IBV_WC_SUCCESS) {
        if (p.bounce && it.op == op_kind::read) std::memcpy(it.local + s.offset, q.bounce.get(), s.length);
        ctr.ops.fetch_add(1, std::memory_order_relaxed);
        ctr.bytes.fetch_add(s.length, std::memory_order_relaxed);
        if (--j.remaining[s.item] == 0) it.finish({});
        continue;
      }
      conn_ok = false;
      if (p.status == IBV_WC_REM_ACCESS_ERR || p.status == IBV_WC_REM_INV_REQ_ERR) {
        if (q.dev > 0) th.rkeys.erase(rkey_key{j.endpoint, q.dev, it.token});  // maybe stale
        it.finish(co_await classify(q, it, s));
      } else if (p.status == IBV_WC_LOC_PROT_ERR || p.status == IBV_WC_LOC_ACCESS_ERR) {
        it.finish(make_error_code(errc::transfer_fail));  // local region unregistered meanwhile
      } else if (q.peer_gone) {
        it.finish(make_error_code(errc::transfer_fail));
      } else if (s.tries++ < 2) {
        j.queue.push_front(p.slice);  // flushed or transport error: retry on a fresh QP
      } else {
        it.finish(make_error_code(errc::transfer_fail));
      }
    }
    co_return conn_ok;
  }
  /// A remote access error does not say why: ask the target (over the QP's
  /// TCP connection) to validate the range exactly like a TCP request.
  task<boost::system::error_code> classify(qp_state& q, transfer_item& it, const slice& s) {
    header h;
    h.op = wire_op::rdma_check;
    h.flags = it.op == op_kind::write ? grant_write : 0;  // the access the target must grant
    h.request_id = q.next_id++;
    h.address = it.address + s.offset;
    h.length = s.length;
    h.token = it.token;
    header_bytes hb;
    encode(h, hb);
    auto fail_ec = make_error_code(errc::access_denied);  // what the NIC told us
    if (!co_await send_all(q.ctrl, hb.data(), hb.size())) co_return fail_ec;
    header_bytes rb;
    if (!co_await recv_all(q.ctrl, rb.data(), rb.size())) co_return fail_ec;
    auto r = decode(rb);
    if (!r || r->op != wire_op::rdma_check_resp || r->request_id != h.request_id) co_return fail_ec;
    if (r->status == 0) co_return make_error_code(errc::transfer_fail);  // valid now: a race with registration
    co_return status_to_error(r->status);
  }

  task<result<std::unique_ptr<pooled_conn<rdma_link>>>> connect(thread_state& ts, rdma_thread& th, std::string endpoint,
                                                                std::size_t rail) {
    auto s = co_await connect_tcp(ts.ex, endpoint);
    if (!s) co_return s.error();
    co_return co_await handshake(ts, th, std::move(*s), endpoint, rail);
  }

  task<result<std::unique_ptr<pooled_conn<rdma_link>>>> handshake(thread_state& ts, rdma_thread& th, tcp_socket s,
                                                                  const std::string& endpoint, std::size_t rail) {
    auto st = std::make_unique<qp_state>(th, std::move(s), rail);
    th.states.insert(st.get());
    mc::verbs::device& dev = th.ctx->dev(rail);
    st->qp = dev.create_qp(th.rails[rail]->cq, qp_depth);
    if (!st->qp) {
      std::fprintf(stderr, "transfer: rdma: ibv_create_qp failed: %s\n", std::strerror(errno));
      co_return fail(errc::transfer_fail);
    }
    const auto psn = random_psn();
    st->peer = endpoint;
    // The handshake announces our own endpoint: the target's fence(us) finds
    // this QP by it.
    const std::string& me = eng_.endpoint_;
    const std::size_t announce = me.size() <= max_announced_endpoint ? me.size() : 0;
    std::vector<std::byte> out(header_size + qp_info_size + announce);
    header h;
    h.op = wire_op::rdma_connect;
    h.request_id = st->next_id++;
    h.length = qp_info_size + announce;
    h.address = rail;  // the target builds its QP on its device `rail`
    header_bytes hb;
    encode(h, hb);
    std::memcpy(out.data(), hb.data(), header_size);
    encode_qp_info(dev.local_info(st->qp, psn), out.data() + header_size);
    std::memcpy(out.data() + header_size + qp_info_size, me.data(), announce);
    // A peer that does not speak RDMA (older version) closes the connection.
    // A peer that completed a handshake with this thread within no_rdma_ttl
    // speaks RDMA: a connection closed during the handshake means it died or
    // is stopping (transfer_fail, not a TCP fallback). Older ones: an older
    // version that closes unknown ops -> unsupported.
    auto closed = [&] {
      auto ok = th.rdma_ok.find(endpoint);
      const bool recent = ok != th.rdma_ok.end() && std::chrono::steady_clock::now() - ok->second < no_rdma_ttl;
      return recent ? fail(errc::transfer_fail) : fail(errc::unsupported);
    };
    if (!co_await send_all(st->ctrl, out.data(), out.size())) co_return closed();
    header_bytes rb;
    if (!co_await recv_all(st->ctrl, rb.data(), rb.size())) co_return closed();
    auto r = decode(rb);
    if (!r) co_return fail(errc::transfer_fail);
    auto devices = check_rdma_connect_resp(*r, h.request_id);  // older peers send 0 / 0: one device
    if (!devices) co_return devices.error();
    th.remote_devs[endpoint] = *devices;
    th.rdma_ok[endpoint] = std::chrono::steady_clock::now();
    if (r->address != rail) co_return fail(errc::transfer_fail);  // the peer has fewer devices now
    std::array<std::byte, qp_info_size> pb;
    if (!co_await recv_all(st->ctrl, pb.data(), pb.size())) co_return fail(errc::transfer_fail);
    auto peer_qp = mc::verbs::parse_qp_info(pb.data(), pb.size());
    if (!peer_qp) {
      std::fprintf(stderr, "transfer: rdma: the peer sent an invalid queue pair description\n");
      co_return fail(errc::transfer_fail);
    }
    if (!dev.connect_qp(st->qp, psn, *peer_qp)) {
      std::fprintf(stderr, "transfer: rdma: connecting QP to the peer failed: %s\n", std::strerror(errno));
      co_return fail(errc::transfer_fail);
    }
    co_return std::make_unique<pooled_conn<rdma_link>>(rdma_link{std::move(st)}, ts.live, nullptr);
  }

  engine_impl& eng_;
};

}  // namespace

std::unique_ptr<transport> make_rdma_transport(engine_impl& eng) { return std::make_unique<rdma_transport>(eng); }

}  // namespace mc::transfer::detail
