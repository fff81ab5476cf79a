// TCP transport, initiator side: slices requests over a bounded pool of
// connections to the peer; each connection carries windows of pipelined
// requests (up to 16 slices / 4 MiB each, sent in one gathered send), two
// windows in flight so the connection does not idle between them. Runs of
// small items of one region (the pieces of a scattered value) travel as one
// scatter-gather request of up to 64 pieces / one slice (wire.hpp).
#include "engine_impl.hpp"
#include "io.hpp"
#include "wire.hpp"

#include "mc/runtime/endpoint.hpp"
#include "mc/runtime/when_all.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/socket_base.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <utility>

namespace mc::transfer::detail {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using lease = conn_lease<tcp_socket>;

/// One wire request: `count` == 1: bytes [offset, offset + length) of item
/// `item`; `count` > 1: items [item, item + count) whole (a scatter-gather
/// request; offset 0, length their sum).
struct slice {
  std::uint32_t item = 0;
  std::uint32_t count = 1;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

/// Outcome of one slice: error (if any) and whether the connection is still
/// in a known state (a refusal by the target leaves it usable).
struct slice_result {
  boost::system::error_code ec;
  bool conn_ok = true;
};

struct job {
  std::span<transfer_item*> items;
  template <class F>
  void each(const slice& s, F&& f) const {
    for (std::uint32_t i = s.item; i < s.item + s.count; ++i) f(*items[i]);
  }
  void fail(const slice& s, boost::system::error_code ec) const {
    each(s, [&](transfer_item& it) { it.finish(ec); });
  }
  std::vector<slice> slices;
  std::vector<std::uint64_t> remaining;  // slices left per item
  std::size_t next = 0;
  /// The items of scatter-gather requests the target refused, one plain
  /// request each (sent before the rest): a refusal names the request, and
  /// the result is per item.
  std::vector<slice> redo;
  bool pending() const noexcept { return !redo.empty() || next < slices.size(); }
  peer_pool<tcp_socket>* pool = nullptr;
  peer_pool<tcp_socket>::connect_fn connect;
};

class tcp_transport final : public transport {
 public:
  explicit tcp_transport(engine_impl& eng) : eng_(eng) {}
  transport_kind kind() const noexcept override { return transport_kind::tcp; }

  task<void> execute(thread_state& ts, const std::string& endpoint, std::span<transfer_item*> items) override {
    job j;
    j.items = items;
    j.remaining.resize(items.size());
    const std::uint64_t ss = eng_.opts_.slice_size;
    for (std::uint32_t i = 0; i < items.size(); ++i) {
      if (auto n = run_of_pieces(items, i, ss); n > 1) {  // one scatter-gather request
        std::uint64_t total = 0;
        for (std::uint32_t k = i; k < i + n; ++k) {
          total += items[k]->length;
          j.remaining[k] = 1;
        }
        j.slices.push_back({i, n, 0, total});
        i += n - 1;
        continue;
      }
      auto len = items[i]->length;
      for (std::uint64_t off = 0; off < len; off += ss) {
        j.slices.push_back({i, 1, off, std::min(ss, len - off)});
        ++j.remaining[i];
      }
    }
    j.pool = ts.tcp_pools.get(endpoint, ts.ex, eng_.opts_.connections_per_peer, eng_.opts_.max_peers, &ts.stopping);
    if (!j.pool) {
      for (auto* it : items) it->finish(make_error_code(errc::no_available_handle));
      co_return;
    }
    j.connect = [this, &ts, endpoint] { return connect(ts, endpoint); };
    auto workers = std::min<std::size_t>(j.slices.size(), eng_.opts_.connections_per_peer);
    if (workers == 1) {
      co_await worker(j, 0);
      co_return;
    }
    std::vector<task<int>> ws;
    for (std::size_t w = 0; w < workers; ++w) ws.push_back(worker(j, w));
    co_await mc::when_all(std::move(ws));
  }

 private:
  /// Requests one connection carries at once (pipelined: the target serves a
  /// connection's requests in order), and their bytes at most.
  static constexpr std::size_t max_window = 16;
  static constexpr std::uint64_t max_window_bytes = 4u << 20;
  /// iovecs of one window's gathered send at most (the kernel's UIO_MAXIOV).
  static constexpr std::size_t max_window_iov = 1024;

  /// How many items from `i` on form one scatter-gather request: a run of
  /// nonempty items, each smaller than a slice, with the same op, at most
  /// max_sg_segments and one slice of bytes in all. 1: item i goes alone
  /// (plain requests).
  static std::uint32_t run_of_pieces(std::span<transfer_item*> items, std::uint32_t i, std::uint64_t ss) {
    const transfer_item& first = *items[i];
    if (first.length == 0 || first.length >= ss) return 1;
    std::uint64_t total = first.length;
    std::uint32_t n = 1;
    while (i + n < items.size() && n < max_sg_segments) {
      const transfer_item& next = *items[i + n];
      if (next.op != first.op || next.length == 0 || next.length > ss - total) break;
      total += next.length;
      ++n;
    }
    return n;
  }

  /// iovecs a slice takes in a gathered send (header and table in one).
  static std::size_t send_iov(const job& j, const slice& s) {
    return 1 + (j.items[s.item]->op == op_kind::write ? s.count : 0);
  }

  /// Buffers of one worker's sends (reused: a window is sent whole before
  /// the next is built).
  struct send_buffers {
    std::vector<std::byte> head;  // every slice's header (+ table)
    std::vector<iovec> iov;
  };

  /// Outcome of one window: slices [0, resolved) got their answer (success or
  /// a refusal, already applied to their items); the rest failed with `ec`.
  struct window_result {
    std::size_t resolved = 0;
    boost::system::error_code ec;
  };

  /// Takes the next slices for one window (skipping items already finished).
  static void take(job& j, std::vector<slice>& win) {
    std::uint64_t bytes = 0;
    std::size_t iovs = 0;
    while (j.pending() && win.size() < max_window) {
      const bool redo = !j.redo.empty();
      const slice s = redo ? j.redo.back() : j.slices[j.next];
      bool all_done = true;
      j.each(s, [&](const transfer_item& it) { all_done = all_done && it.done; });
      if (!all_done && !win.empty() && (bytes + s.length > max_window_bytes || iovs + send_iov(j, s) > max_window_iov))
        break;
      if (redo)
        j.redo.pop_back();
      else
        ++j.next;
      if (all_done) continue;
      bytes += s.length;
      iovs += send_iov(j, s);
      win.push_back(s);
    }
  }

  task<int> worker(job& j, std::size_t w) {
    lease c;
    bool first_on_conn = true;
    std::vector<slice> retry;  // windows to retry once on a fresh connection
    std::vector<slice> cur, nxt;
    send_buffers sb;
    for (;;) {
      if (retry.empty() && !j.pending()) co_return 0;
      if (!c) {
        auto got = co_await j.pool->acquire(j.connect, w == 0 || !retry.empty());
        if (!got) {
          if (!mc::is(got.error(), errc::cancelled)) {
            for (auto& s : retry) j.fail(s, got.error());
            fail_rest(j, got.error());
          }
          co_return 0;
        }
        if (!*got) co_return 0;  // pool exhausted: the other workers do the work
        c = std::move(*got);
        first_on_conn = true;
      }
      const bool is_retry = !retry.empty();
      cur.clear();
      nxt.clear();
      if (is_retry)
        cur.swap(retry);
      else
        take(j, cur);
      if (cur.empty()) continue;  // every slice left belonged to finished items
      // Two windows in flight: the next window's requests go out before the
      // current one's answers are read, so the connection never idles for a
      // round trip between windows. Safe from send/receive deadlock: one
      // direction of every window carries only headers (at most two windows'
      // worth, far below any socket buffer).
      c.begin();
      window_result r;
      bool sent_cur = false;
      for (;;) {
        if (!sent_cur) {
          if (auto s = co_await send_window(*c, j, cur, sb); !s) {
            r = window_result{0, s.error()};
            break;
          }
          sent_cur = true;
        }
        if (!is_retry) take(j, nxt);
        bool sent_nxt = false;
        if (!nxt.empty()) {
          if (auto s = co_await send_window(*c, j, nxt, sb); !s) {
            r = co_await read_window(*c, j, cur);  // still collect what answered
            if (r.resolved == cur.size()) r = window_result{cur.size(), s.error()};
            cur.insert(cur.end(), nxt.begin(), nxt.end());
            nxt.clear();
            break;
          }
          sent_nxt = true;
        }
        r = co_await read_window(*c, j, cur);
        if (r.resolved != cur.size()) {
          cur.insert(cur.end(), nxt.begin(), nxt.end());  // the next window is unresolved too
          nxt.clear();
          break;
        }
        if (!sent_nxt) break;  // nothing more for this connection: every window answered
        cur.swap(nxt);
        nxt.clear();
        first_on_conn = false;
      }
      if (r.resolved == cur.size() && !r.ec) {
        c.keep();  // every request and whole response done: reusable
        first_on_conn = false;
        continue;
      }
      if (mc::is(r.ec, errc::cancelled)) {
        c.discard();
        co_return 0;  // deadline / stop: the unresolved items stay unfinished
      }
      // Broken connection. A pooled connection that fails before its first
      // answer is probably stale (peer restarted): retry the windows once on a
      // fresh one (READ and WRITE are idempotent).
      const bool stale = c.reused() && first_on_conn && !is_retry && r.resolved == 0;
      c.discard();
      if (stale) {
        j.pool->drop_idle();
        retry.assign(cur.begin(), cur.end());
        continue;
      }
      for (std::size_t k = r.resolved; k < cur.size(); ++k) j.fail(cur[k], r.ec);
    }
  }

  static void fail_rest(job& j, boost::system::error_code ec) {
    for (auto& s : j.redo) j.fail(s, ec);
    j.redo.clear();
    for (; j.next < j.slices.size(); ++j.next) j.fail(j.slices[j.next], ec);
  }

  /// Sends every request of `win` (and the payload of its writes) in one
  /// gathered send; the request ids are the connection's next ones, in order.
  task<result<void>> send_window(pooled_conn<tcp_socket>& c, job& j, const std::vector<slice>& win, send_buffers& b) {
    std::size_t head = 0, iovs = 0;
    for (const slice& s : win) {
      head += header_size + (s.count > 1 ? s.count * sg_entry_size : 0);
      iovs += send_iov(j, s);
    }
    b.head.resize(head);
    b.iov.resize(iovs);
    std::byte* p = b.head.data();
    std::size_t n_iov = 0;
    for (const slice& s : win) {
      const transfer_item& it = *j.items[s.item];
      const bool write = it.op == op_kind::write;
      header h;
      h.request_id = c.next_id++;
      h.length = s.length;
      std::size_t len = header_size;
      if (s.count == 1) {
        h.op = write ? wire_op::write_req : wire_op::read_req;
        h.address = it.address + s.offset;
        h.token = it.token;
      } else {
        h.op = write ? wire_op::write_sg_req : wire_op::read_sg_req;
        h.address = s.count;
        j.each(s, [&](const transfer_item& piece) {
          encode_sg_entry({piece.address, piece.length, piece.token}, p + len);
          len += sg_entry_size;
        });
      }
      header_bytes hb;
      encode(h, hb);
      std::memcpy(p, hb.data(), header_size);
      b.iov[n_iov++] = {p, len};
      p += len;
      if (write) {
        if (s.count == 1)
          b.iov[n_iov++] = {it.local + s.offset, static_cast<std::size_t>(s.length)};
        else
          j.each(s, [&](const transfer_item& piece) {
            b.iov[n_iov++] = {piece.local, static_cast<std::size_t>(piece.length)};
          });
      }
    }
    co_return co_await send_all(c.sock, b.iov.data(), static_cast<int>(n_iov));
  }

  /// Reads the answers to `win`, sent by send_window, in order. A target's
  /// refusal finishes that item and keeps the stream in step; anything else
  /// unexpected breaks the connection. The answers of a window of writes are
  /// headers only: they are read with one receive.
  task<window_result> read_window(pooled_conn<tcp_socket>& c, job& j, const std::vector<slice>& win) {
    const bool all_writes =
        std::all_of(win.begin(), win.end(), [&](const slice& s) { return j.items[s.item]->op == op_kind::write; });
    std::array<header_bytes, max_window> answers;
    if (all_writes) {
      static_assert(sizeof(header_bytes) == header_size && sizeof(c.ahead) == header_size);
      std::memcpy(answers.data(), c.ahead.data(), c.ahead_have);
      const auto have = std::exchange(c.ahead_have, 0);
      if (auto r = co_await recv_all(c.sock, answers.data()->data() + have, win.size() * header_size - have); !r)
        co_return window_result{0, r.error()};
    }
    for (std::size_t k = 0; k < win.size(); ++k) {
      const slice& s = win[k];
      transfer_item& it = *j.items[s.item];
      header_bytes& rb = answers[k];
      if (!all_writes) {
        // Part of this header may have arrived with the previous payload.
        std::memcpy(rb.data(), c.ahead.data(), c.ahead_have);
        const auto have = std::exchange(c.ahead_have, 0);
        if (auto r = co_await recv_all(c.sock, rb.data() + have, rb.size() - have); !r)
          co_return window_result{k, r.error()};
      }
      auto resp = decode(rb);
      const auto expect = it.op == op_kind::write ? wire_op::write_resp : wire_op::read_resp;
      const std::uint64_t id = c.answered_id++;
      if (!resp || resp->op != expect || resp->request_id != id)
        co_return window_result{k, make_error_code(errc::transfer_fail)};
      if (resp->status != 0) {
        if (resp->length != 0) co_return window_result{k, make_error_code(errc::transfer_fail)};
        // Refused; the stream is still in step. A scatter-gather request
        // is asked again piece by piece: which pieces are refused is per item.
        if (s.count == 1) {
          j.fail(s, status_to_error(resp->status));
        } else {
          for (std::uint32_t i = s.item + s.count; i-- > s.item;)  // redo is taken from the back
            j.redo.push_back({i, 1, 0, j.items[i]->length});
        }
        continue;
      }
      if (it.op == op_kind::read) {
        if (resp->length != s.length) co_return window_result{k, make_error_code(errc::transfer_fail)};
        // The payload and, in the same system calls, whatever has arrived
        // of the next answer's header (answers to requests still in flight:
        // the connection is only kept once every request is answered, so
        // nothing read ahead can belong to another exchange).
        const bool more = c.answered_id < c.next_id;
        std::array<iovec, max_sg_segments> dst;
        int cnt = 0;
        if (s.count == 1)
          dst[cnt++] = {it.local + s.offset, static_cast<std::size_t>(s.length)};
        else
          j.each(s, [&](const transfer_item& piece) {
            dst[static_cast<std::size_t>(cnt++)] = {piece.local, static_cast<std::size_t>(piece.length)};
          });
        if (auto p = co_await recv_all_v_and_tail(c.sock, dst.data(), cnt, c.ahead.data(), more ? c.ahead.size() : 0,
                                                  &c.ahead_have);
            !p)
          co_return window_result{k, p.error()};
      } else if (resp->length != 0) {
        co_return window_result{k, make_error_code(errc::transfer_fail)};
      }
      for (std::uint32_t i = s.item; i < s.item + s.count; ++i)
        if (--j.remaining[i] == 0) j.items[i]->finish({});
    }
    co_return window_result{win.size(), {}};
  }

  task<result<std::unique_ptr<pooled_conn<tcp_socket>>>> connect(thread_state& ts, std::string endpoint) {
    auto s = co_await connect_tcp(ts.ex, std::move(endpoint));
    if (!s) co_return s.error();
    co_return std::make_unique<pooled_conn<tcp_socket>>(std::move(*s), ts.live, &eng_.counters_.outbound);
  }

  engine_impl& eng_;
};

}  // namespace

std::unique_ptr<transport> make_tcp_transport(engine_impl& eng) { return std::make_unique<tcp_transport>(eng); }

task<result<tcp_socket>> connect_tcp(mc::executor ex, std::string endpoint) {
  namespace asio = boost::asio;
  using tcp = asio::ip::tcp;
  auto ep = mc::endpoint::parse(endpoint);
  if (!ep) co_return fail(errc::invalid_params);
  const std::string& host = ep->host();
  const std::uint16_t port = ep->port();
  std::vector<tcp::endpoint> targets;
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (!ec) {
    targets.emplace_back(addr, port);
  } else {
    tcp::resolver res(ex);
    auto [rec, found] = co_await res.async_resolve(host, std::to_string(port), asio::as_tuple(asio::use_awaitable));
    if (rec) co_return fail(rec == asio::error::operation_aborted ? errc::cancelled : errc::transfer_fail);
    for (auto& e : found) targets.push_back(e.endpoint());
  }
  for (auto& t : targets) {
    tcp_socket s(ex);
    auto [cec] = co_await s.async_connect(t, asio::as_tuple(asio::use_awaitable));
    if (cec) {
      if (cec == asio::error::operation_aborted) co_return fail(errc::cancelled);
      continue;
    }
    boost::system::error_code ig;
    s.set_option(tcp::no_delay(true), ig);
    s.set_option(asio::socket_base::keep_alive(true), ig);
    s.non_blocking(true, ig);
    if (ig) continue;
    co_return std::move(s);
  }
  co_return fail(errc::transfer_fail);
}

}  // namespace mc::transfer::detail
