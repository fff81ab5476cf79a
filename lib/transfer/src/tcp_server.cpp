// TCP transport, target side: serves READ/WRITE requests against registered
// regions. Every request is validated (structure, token, whole range inside
// one region) before a byte moves; a refused WRITE's payload is drained.
// Fewer system calls per small request: a WRITE's payload is received
// together with the start of the next request's header, and answers - header
// only (write acknowledgements, refusals) and READ answers with their payload
// straight from region memory - are queued and leave together in one gathered
// send when nothing more is readable, or when the queue is full.
#include "engine_impl.hpp"
#include "io.hpp"
#include "wire.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/socket_base.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <memory>
#include <vector>
#include <shared_mutex>

namespace mc::transfer::detail {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

/// Answers of a connection not sent yet, in request order: header-only
/// answers and READ answers (header + payload read from region memory at send
/// time). They leave in one gathered send when the connection has nothing
/// more to read for the moment, or when the queue is full (count or payload
/// bytes). Never held across a wait for input, so the initiator always gets
/// every answer to what it sent.
struct answer_queue {
  /// Entries: room for a scatter-gather READ answer (a header entry and one
  /// payload entry per segment) next to single answers.
  static constexpr std::size_t capacity = 2 * max_sg_segments;
  /// Payload bytes queued at most: past this the queue is sent, so that the
  /// initiator receives while later requests are served.
  static constexpr std::uint64_t max_payload = 2u << 20;
  std::array<header_bytes, capacity> q;
  /// Entry k is a header (q[k]) followed by its payload, or (`headless`) only
  /// payload: the next segment of the answer before it.
  std::array<bool, capacity> headless{};
  /// Payload of entry k (READ answers): its region, kept alive while queued;
  /// the bytes are read (and the region's revocation checked) at send time.
  std::array<std::shared_ptr<region_entry>, capacity> region;
  std::array<const std::byte*, capacity> data{};
  std::array<std::uint64_t, capacity> length{};
  std::size_t n = 0;
  std::uint64_t payload = 0;
  bool full() const noexcept { return n == capacity || payload >= max_payload; }
};

struct served_conn final : closable {
  served_conn(tcp_socket s, std::unordered_set<closable*>& live) : sock(std::move(s)), reg(live, this) {}
  void close_now() noexcept override { interrupt_socket(sock); }
  tcp_socket sock;
  live_registration reg;
  std::shared_ptr<void> rdma_qp;  // target-side QP of an rdma_connect, lives as long as the connection
  std::string peer_ip;            // the peer's address as the kernel reports it (for call handlers; "" unknown)
  answer_queue out;
  /// Received and not consumed yet: in[pos, end). Requests are received up
  /// to this many bytes at a time (a window of pipelined READ requests, or a
  /// call carrying a 4 KiB value - a small remote put - with its header, is
  /// one system call); a WRITE's payload is received straight into region
  /// memory together with whatever follows it, up to this much.
  static constexpr std::size_t in_size = 8192;
  std::array<std::byte, in_size> in;
  std::size_t pos = 0, end = 0;
  std::size_t buffered() const noexcept { return end - pos; }
  /// Takes up to n buffered bytes (copied to dst when not null).
  std::size_t take(std::byte* dst, std::size_t n) noexcept {
    n = std::min(n, buffered());
    if (dst && n > 0) std::memcpy(dst, in.data() + pos, n);
    pos += n;
    if (pos == end) pos = end = 0;
    return n;
  }
};

/// Shared locks on the access of up to N distinct regions, taken in address
/// order (a fixed order: two connections never wait on each other's
/// regions); false when one of them was unregistered.
template <std::size_t N>
class region_guards {
 public:
  /// Adds a region (null: ignored; one already added: counted once).
  void add(const region_entry* e) noexcept {
    if (e) entries_[count_++] = e;
  }
  /// Locks every region added; false when one is revoked.
  bool lock() {
    std::sort(entries_.begin(), entries_.begin() + count_);
    count_ = static_cast<std::size_t>(std::unique(entries_.begin(), entries_.begin() + count_) - entries_.begin());
    bool ok = true;
    for (std::size_t i = 0; i < count_; ++i) {
      locks_[i] = std::shared_lock<std::shared_mutex>(entries_[i]->access);
      if (entries_[i]->revoked) ok = false;
    }
    return ok;
  }

 private:
  std::array<const region_entry*, N> entries_{};
  std::array<std::shared_lock<std::shared_mutex>, N> locks_;
  std::size_t count_ = 0;
};

/// Sends every queued answer in gathered sends. Region bytes are read only
/// under their regions' access locks, one system call at a time; a region
/// unregistered before its answer is complete closes the connection (false,
/// `revoked` set): only closing can tell the initiator mid-payload.
task<bool> flush(served_conn& c, bool* revoked = nullptr) {
  auto& a = c.out;
  if (a.n == 0) co_return true;
  std::array<iovec, 2 * answer_queue::capacity> iov;
  std::array<std::size_t, 2 * answer_queue::capacity> owner;  // iov -> answer
  int cnt = 0;
  for (std::size_t k = 0; k < a.n; ++k) {
    if (!a.headless[k]) {
      iov[cnt] = {a.q[k].data(), header_size};
      owner[cnt++] = k;
    }
    if (a.length[k] > 0) {
      iov[cnt] = {const_cast<std::byte*>(a.data[k]), static_cast<std::size_t>(a.length[k])};
      owner[cnt++] = k;
    }
  }
  int at = 0;
  bool ok = true;
  while (at < cnt) {
    ssize_t r;
    int saved = 0;
    {
      region_guards<answer_queue::capacity> g;
      for (std::size_t k = owner[at]; k < a.n; ++k) g.add(a.region[k].get());
      if (!g.lock()) {
        if (revoked) *revoked = true;
        ok = false;
        break;
      }
      msghdr msg{};
      msg.msg_iov = iov.data() + at;
      msg.msg_iovlen = static_cast<std::size_t>(cnt - at);
      peer_memory_scope peer_bytes;  // see peer_memory.hpp
      r = ::sendmsg(c.sock.native_handle(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      saved = errno;
    }
    if (r < 0) {
      if (saved == EINTR) continue;
      if (saved != EAGAIN && saved != EWOULDBLOCK) {
        ok = false;
        break;
      }
      if (!co_await wait_ready(c.sock, tcp_socket::wait_write)) {
        ok = false;
        break;
      }
      continue;
    }
    auto left = static_cast<std::size_t>(r);
    while (at < cnt && left >= iov[at].iov_len) left -= iov[at++].iov_len;
    if (at < cnt) {
      iov[at].iov_base = static_cast<char*>(iov[at].iov_base) + left;
      iov[at].iov_len -= left;
    }
  }
  for (std::size_t k = 0; k < a.n; ++k) {
    a.region[k].reset();
    a.length[k] = 0;
    a.headless[k] = false;
  }
  a.n = 0;
  a.payload = 0;
  co_return ok;
}

/// Queues an answer (a READ answer's payload: `length` bytes of `region`
/// memory at `data`); sends the queue when it is full.
task<bool> answer(served_conn& c, wire_op op, std::uint64_t id, errc status,
                  std::shared_ptr<region_entry> region = nullptr, const std::byte* data = nullptr,
                  std::uint64_t length = 0, bool* revoked = nullptr) {
  header h;
  h.op = op;
  h.request_id = id;
  h.status = static_cast<std::int32_t>(status);
  h.length = length;
  auto& a = c.out;
  encode(h, a.q[a.n]);
  a.region[a.n] = std::move(region);
  a.data[a.n] = data;
  a.length[a.n] = length;
  a.payload += length;
  ++a.n;
  if (!a.full()) co_return true;
  const bool ok = co_await flush(c, revoked);
  co_return ok;
}

/// Queues the answer to a scatter-gather READ: a read_resp header with the
/// segments' total, then each segment's bytes (read from its region,
/// regions[k], at send time, like answer()'s). Sends what is queued first when the answer does
/// not fit in the queue's entries.
task<bool> answer_sg(served_conn& c, std::uint64_t id,
                     const std::array<std::shared_ptr<region_entry>, max_sg_segments>& regions,
                     std::span<const sg_segment> segs, std::uint64_t total, bool* revoked) {
  auto& a = c.out;
  if (a.n + 1 + segs.size() > answer_queue::capacity) {
    if (!co_await flush(c, revoked)) co_return false;
  }
  header h;
  h.op = wire_op::read_resp;
  h.request_id = id;
  h.length = total;
  encode(h, a.q[a.n]);
  ++a.n;  // the header entry carries no payload itself
  for (std::size_t k = 0; k < segs.size(); ++k) {
    a.headless[a.n] = true;
    a.region[a.n] = regions[k];
    a.data[a.n] = regions[k]->ptr(segs[k].address);
    a.length[a.n] = segs[k].length;
    ++a.n;
  }
  a.payload += total;
  if (!a.full()) co_return true;
  const bool ok = co_await flush(c, revoked);
  co_return ok;
}

/// Before a WRITE moves bytes into region memory: sends the queued READ
/// answers (their bytes are read at send time, and requests are served in
/// order: a READ pipelined before a WRITE of the same bytes must carry the
/// bytes from before it).
task<bool> flush_reads(served_conn& c) {
  if (c.out.payload == 0) co_return true;
  const bool ok = co_await flush(c);
  co_return ok;
}

/// Waits until the socket is readable, sending the queued answers first.
task<bool> wait_input(served_conn& c) {
  const bool flushed = co_await flush(c);
  if (!flushed) co_return false;
  auto r = co_await wait_ready(c.sock, tcp_socket::wait_read);
  co_return static_cast<bool>(r);
}

/// Receives n bytes into dst: those already buffered first, then the rest
/// from the socket (only as much as asked: nothing beyond is consumed).
task<bool> read_exact(served_conn& c, std::byte* dst, std::size_t n) {
  const auto got = c.take(dst, n);
  if (got == n) co_return true;
  const bool flushed = co_await flush(c);  // recv_all may wait for input
  if (!flushed) co_return false;
  auto r = co_await recv_all(c.sock, dst + got, n - got);
  co_return static_cast<bool>(r);
}

/// Drops n bytes of input (a refused WRITE's payload).
task<bool> skip(served_conn& c, std::uint64_t n) {
  n -= c.take(nullptr, static_cast<std::size_t>(std::min<std::uint64_t>(n, c.buffered())));
  if (n == 0) co_return true;
  const bool flushed = co_await flush(c);
  if (!flushed) co_return false;
  auto r = co_await discard(c.sock, n);
  co_return static_cast<bool>(r);
}

/// Receives the next request header into `out`, with as much of what
/// follows as has arrived (up to the input buffer).
task<bool> next_header(served_conn& c, header_bytes& out) {
  while (c.buffered() < header_size) {
    if (c.pos > 0) {
      std::memmove(c.in.data(), c.in.data() + c.pos, c.buffered());
      c.end -= c.pos;
      c.pos = 0;
    }
    if (c.out.n == 0) {
      // Nothing to send first: one receive that waits when it finds nothing
      // (recv_and_wait). Otherwise the try below lets answers of pipelined
      // requests leave together.
      auto got = co_await recv_and_wait(c.sock, c.in.data() + c.end, c.in.size() - c.end);
      if (!got) co_return false;
      c.end += *got;
      continue;
    }
    errc err{};
    ssize_t r = recv_once(c.sock.native_handle(), c.in.data() + c.end, c.in.size() - c.end, err);
    if (r < 0) co_return false;
    if (r == 0) {
      if (!co_await wait_input(c)) co_return false;
      continue;
    }
    c.end += static_cast<std::size_t>(r);
  }
  c.take(out.data(), header_size);
  co_return true;
}

/// Receives a WRITE's payload straight into region memory: seg[0..cnt) in
/// order (at most max_sg_segments), n bytes in all (what was already
/// buffered is copied), and in the same system calls as much of what follows
/// as has arrived. Every copy and system call that touches the regions runs
/// under their access locks; when one is revoked midway the rest is drained
/// (the connection stays usable) and `revoked` is returned. `seg` is consumed.
task<region_io> recv_payload(served_conn& c, std::span<const region_entry* const> regions, iovec* seg, int cnt,
                             std::uint64_t n) {
  auto guard = [&](region_guards<max_sg_segments>& g) {
    for (auto* e : regions) g.add(e);
    return g.lock();
  };
  if (c.buffered() > 0) {
    const auto k = static_cast<std::size_t>(std::min<std::uint64_t>(n, c.buffered()));
    bool taken = false;
    {
      region_guards<max_sg_segments> g;
      if (guard(g)) {
        peer_memory_scope peer_bytes;  // see peer_memory.hpp
        for (std::size_t left = k; left > 0;) {
          const auto part = std::min(left, seg->iov_len);
          c.take(static_cast<std::byte*>(seg->iov_base), part);
          advance_iov(seg, cnt, part);
          left -= part;
        }
        taken = true;
      }
    }
    if (!taken) {
      if (!co_await skip(c, n)) co_return region_io::failed;
      co_return region_io::revoked;
    }
    n -= k;
  }
  rcvlowat lowat(c.sock.native_handle());
  std::array<iovec, max_sg_segments + 1> iov;
  while (n > 0) {
    ssize_t r = 0;
    int saved = 0;
    bool revoked = false;
    {
      region_guards<max_sg_segments> g;
      revoked = !guard(g);
      if (!revoked) {  // never hold a region's lock across the wait in skip() below
        // The buffer is empty here (everything buffered was payload).
        const int m = std::min<int>(cnt, static_cast<int>(max_sg_segments));
        std::copy(seg, seg + m, iov.begin());
        iov[static_cast<std::size_t>(m)] = {c.in.data(), c.in.size()};
        msghdr msg{};
        msg.msg_iov = iov.data();
        // The tail buffer only after the last segment (never between two).
        msg.msg_iovlen = static_cast<std::size_t>(m == cnt ? m + 1 : m);
        peer_memory_scope peer_bytes;  // see peer_memory.hpp
        r = ::recvmsg(c.sock.native_handle(), &msg, MSG_DONTWAIT);
        saved = errno;
      }
    }
    if (revoked) {
      if (!co_await skip(c, n)) co_return region_io::failed;
      co_return region_io::revoked;
    }
    if (r == 0) co_return region_io::failed;  // orderly shutdown mid-payload
    if (r < 0) {
      if (saved == EINTR) continue;
      if (saved != EAGAIN && saved != EWOULDBLOCK) co_return region_io::failed;
      lowat.before_wait(n);
      if (!co_await wait_input(c)) co_return region_io::failed;
      continue;
    }
    const auto got = static_cast<std::uint64_t>(r);
    if (got > n) {
      c.pos = 0;
      c.end = static_cast<std::size_t>(got - n);
    }
    advance_iov(seg, cnt, static_cast<std::size_t>(std::min(got, n)));
    n -= std::min(got, n);
  }
  co_return region_io::ok;
}

/// Reads and checks the table of a scatter-gather request (header `h`) into
/// `segs`: false when the connection must be closed (cut short, or not well
/// formed: see wire.hpp).
task<bool> read_sg_table(served_conn& c, const header& h, std::array<sg_segment, max_sg_segments>& segs) {
  if (h.address < 1 || h.address > max_sg_segments || h.token != 0) co_return false;
  std::array<std::byte, max_sg_segments * sg_entry_size> table;
  const auto n = static_cast<std::size_t>(h.address);
  if (!co_await read_exact(c, table.data(), n * sg_entry_size)) co_return false;
  co_return decode_sg_table(table.data(), n, h.length, segs.data());
}

/// The region of every segment (its token's, which must contain the range
/// and grant `need`) into `out`; false (the uniform refusal) when any is not.
bool sg_regions(const registry& reg, std::span<const sg_segment> segs, region_access need,
                std::array<std::shared_ptr<region_entry>, max_sg_segments>& out) {
  for (std::size_t k = 0; k < segs.size(); ++k) {
    // Consecutive pieces of one request usually share a region: reuse it.
    if (k > 0 && segs[k].token == segs[k - 1].token && out[k - 1]->contains(segs[k].address, segs[k].length)) {
      out[k] = out[k - 1];
      continue;
    }
    auto e = reg.find(segs[k].address, segs[k].length, segs[k].token, need);
    if (!e) return false;
    out[k] = std::move(*e);
  }
  return true;
}

/// The rest of a granted WRITE (plain or scatter-gather): the queued READ
/// answers go first, then the payload into seg[0..cnt) under the regions'
/// locks, then the answer (a refusal when a region was revoked midway).
task<bool> serve_write(engine_impl& eng, served_conn& c, const header& h, std::span<const region_entry* const> regions,
                       iovec* seg, int cnt) {
  auto& ctr = eng.counters_;
  if (!co_await flush_reads(c)) co_return false;
  auto r = co_await recv_payload(c, regions, seg, cnt, h.length);
  if (r == region_io::failed) co_return false;
  if (r == region_io::revoked) {
    bump(ctr.served_rejects);
    co_return co_await answer(c, wire_op::write_resp, h.request_id, errc::access_denied);
  }
  bump(ctr.served_write_ops);
  bump(ctr.served_write_bytes, h.length);
  co_return co_await answer(c, wire_op::write_resp, h.request_id, errc::ok);
}

/// A call (call_req): its payload, then - after every answer queued before
/// it - the installed handler's reply or error. False when the connection
/// must be closed (a bound exceeded, I/O failure).
task<bool> serve_call(engine_impl& eng, served_conn& c, const header& h) {
  auto& ctr = eng.counters_;
  if (h.token != 0 || h.length == 0 || h.length > max_call_request || h.address == 0 || h.address > max_call_reply)
    co_return false;
  std::vector<std::byte> request(static_cast<std::size_t>(h.length));
  if (!co_await read_exact(c, request.data(), request.size())) co_return false;
  if (!co_await flush(c)) co_return false;
  header a;
  a.op = wire_op::call_resp;
  a.request_id = h.request_id;
  std::vector<std::byte> reply;
  auto handler = eng.call_handler_now();
  if (!handler) {
    a.status = static_cast<std::int32_t>(errc::unsupported);
  } else {
    call_request q{request, h.address, c.peer_ip};
    auto r = co_await (*handler)(std::move(q));
    if (r && r->size() > h.address) r = fail(errc::buffer_overflow);  // the handler's bug: never more than asked
    if (!r) {
      const auto e = mc::to_errc(r.error());
      a.status = static_cast<std::int32_t>(e == errc::ok ? errc::internal_error : e);
    } else {
      reply = std::move(*r);
      a.length = reply.size();
    }
  }
  bump(a.status == 0 ? ctr.served_calls : ctr.served_call_errors);
  header_bytes hb;
  encode(a, hb);
  std::array<iovec, 2> iov{iovec{hb.data(), header_size}, iovec{reply.data(), reply.size()}};
  auto sent = co_await send_all(c.sock, iov.data(), reply.empty() ? 1 : 2);
  co_return static_cast<bool>(sent);
}

/// One request; false when the connection must be closed.
task<bool> serve_one(engine_impl& eng, served_conn& c, const header& h) {
  auto& ctr = eng.counters_;
  if (h.op == wire_op::call_req) co_return co_await serve_call(eng, c, h);
  if (h.op == wire_op::read_req) {
    auto e = eng.registry_->find(h.address, h.length, h.token, region_access::remote_read);
    if (!e) {
      bump(ctr.served_rejects);
      co_return co_await answer(c, wire_op::read_resp, h.request_id, errc::access_denied);
    }
    // Queued: the bytes are read from the region when the queue is sent
    // (with the answers around it, in one system call).
    const std::byte* data = (*e)->ptr(h.address);
    bool revoked = false;
    if (!co_await answer(c, wire_op::read_resp, h.request_id, errc::ok, std::move(*e), data, h.length, &revoked)) {
      if (revoked) bump(ctr.served_rejects);
      co_return false;
    }
    bump(ctr.served_read_ops);
    bump(ctr.served_read_bytes, h.length);
    co_return true;
  }
  if (h.op == wire_op::write_req) {
    auto e = eng.registry_->find(h.address, h.length, h.token, region_access::remote_write);
    if (!e) {
      bump(ctr.served_rejects);
      if (!co_await skip(c, h.length)) co_return false;
      co_return co_await answer(c, wire_op::write_resp, h.request_id, errc::access_denied);
    }
    iovec one{(*e)->ptr(h.address), static_cast<std::size_t>(h.length)};
    const region_entry* region = e->get();
    co_return co_await serve_write(eng, c, h, std::span(&region, 1), &one, 1);
  }
  if (h.op == wire_op::write_sg_req || h.op == wire_op::read_sg_req) {
    const bool write = h.op == wire_op::write_sg_req;
    std::array<sg_segment, max_sg_segments> segs;
    if (!co_await read_sg_table(c, h, segs)) co_return false;
    const auto list = std::span<const sg_segment>(segs.data(), static_cast<std::size_t>(h.address));
    std::array<std::shared_ptr<region_entry>, max_sg_segments> regions;
    if (!sg_regions(*eng.registry_, list, write ? region_access::remote_write : region_access::remote_read, regions)) {
      bump(ctr.served_rejects);
      if (write && !co_await skip(c, h.length)) co_return false;
      co_return co_await answer(c, write ? wire_op::write_resp : wire_op::read_resp, h.request_id, errc::access_denied);
    }
    if (!write) {
      bool revoked = false;
      if (!co_await answer_sg(c, h.request_id, regions, list, h.length, &revoked)) {
        if (revoked) bump(ctr.served_rejects);
        co_return false;
      }
      bump(ctr.served_read_ops);
      bump(ctr.served_read_bytes, h.length);
      co_return true;
    }
    std::array<iovec, max_sg_segments> iov;
    std::array<const region_entry*, max_sg_segments> raw;
    for (std::size_t k = 0; k < list.size(); ++k) {
      iov[k] = {regions[k]->ptr(list[k].address), static_cast<std::size_t>(list[k].length)};
      raw[k] = regions[k].get();
    }
    co_return co_await serve_write(eng, c, h, std::span<const region_entry* const>(raw.data(), list.size()), iov.data(),
                                   static_cast<int>(list.size()));
  }
  co_return false;  // not a request this socket serves
}

}  // namespace

task<void> serve_tcp(engine_impl* eng, [[maybe_unused]] gate_holder g, tcp_socket sock) {
  auto& ts = eng->this_thread_state();
  served_conn c(std::move(sock), ts.live);
  if (ts.stopping) co_return;
  bump(eng->counters_.inbound);
  boost::system::error_code ig;
  c.sock.set_option(tcp::no_delay(true), ig);
  c.sock.set_option(asio::socket_base::keep_alive(true), ig);
  c.sock.non_blocking(true, ig);
  if (auto peer = c.sock.remote_endpoint(ig); !ig) c.peer_ip = peer.address().to_string();
  header_bytes hb;
  // An rdma_connect's payload (an initiator's qp_info and endpoint: far less).
  std::array<std::byte, max_rdma_payload> pb;
  for (;;) {
    if (!co_await next_header(c, hb)) break;  // EOF, reset, or stop
    auto h = decode(hb);
    if (!h) break;  // protocol violation: close
    if (h->op >= wire_op::rdma_connect && h->op <= wire_op::rdma_rkey_resp) {
      if (!co_await flush(c)) break;
      std::size_t plen = 0;
      if (h->op == wire_op::rdma_connect) {
        if (h->length > pb.size()) break;
        plen = static_cast<std::size_t>(h->length);
        if (!co_await read_exact(c, pb.data(), plen)) break;
      }
      if (!co_await rdma_serve(*eng, c.sock, *h, std::span<const std::byte>(pb.data(), plen), c.rdma_qp)) break;
      continue;
    }
    if (!co_await serve_one(*eng, c, *h)) break;
  }
  // The answers to every complete request before the end (EOF, a protocol
  // violation) still go out, as they would have one by one.
  co_await flush(c);
  eng->counters_.inbound.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace mc::transfer::detail
