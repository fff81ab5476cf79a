// Fuzz target `transfer_wire`: the TransferEngine's TCP protocol (lib/transfer
// src/wire.hpp, tcp_server.cpp, the RDMA control ops of rdma_serve.cpp) fed to
// a LIVE engine on 127.0.0.1 that has registrations over guarded memory
// (transfer_env.hpp). The input is the byte stream a peer sends on one
// connection: pipelined 48-byte headers with their payloads. Before it is
// sent, each header's token and address fields are rewritten through the
// env's tables (a small token value names a real, revoked or near-miss
// token; a small address names a region base + signed offset), so inputs hit
// real registrations with hostile offsets, lengths, ops and flags. Calls
// (op 18) reach the env's call handler (its reply: the request's bytes XOR
// 0x5A, cut to the room the header allows).
//
// A model of the target (written from the protocol description, not from
// the server code) walks the stream: which bytes are headers and payloads,
// which requests are served, refused (the uniform refusal: access_denied,
// address/length/token 0) or close the connection. Only the bytes up to that
// point are sent (then SHUT_WR), so the server consumes all of them and the
// outcome does not depend on timing; the replies are read until the server
// closes (it has then finished with the connection) and must equal the
// model's byte for byte, READ payloads included. After every input:
//   - each registered block equals its shadow, to which only the WRITEs the
//     model accepted (token, whole range inside the token's region, access)
//     were applied - a prefix for a payload cut short by the end of input;
//   - the canaries around every block are intact (and every block sits
//     between PROT_NONE pages: a read or write one byte outside faults);
//   - the engine counts no inbound connection any more, and its served_*
//     counters grew by exactly the requests served / refused.
// Seeds: gen_corpus.cpp (see README.md).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "mc/runtime/error.hpp"
#include "transfer_env.hpp"

namespace {

using namespace mc::fuzz::transfer;
using ra = mc::transfer::region_access;

constexpr auto denied = static_cast<std::int32_t>(mc::errc::access_denied);
constexpr auto unsupported = static_cast<std::int32_t>(mc::errc::unsupported);

/// Walks `in` (rewritten in place) and returns how many bytes the target
/// consumes before it closes; `expect` gets its replies.
/// What the target's served_* counters must grow by.
struct tally {
  std::uint64_t rejects = 0, read_ops = 0, read_bytes = 0, write_ops = 0, write_bytes = 0, calls = 0;
};

std::size_t model(env& e, std::vector<std::byte>& in, std::vector<std::byte>& expect, tally& t) {
  const std::size_t size = in.size();
  std::size_t pos = 0;
  while (size - pos >= 48) {
    const raw_header h = take_header(e, in.data() + pos);
    pos += 48;
    if (!h.structure_ok) return pos;  // protocol violation: closed after the header
    const std::size_t avail = size - pos;
    switch (h.op) {
      case 1: {  // read_req
        const auto* r = e.allowed(h.token, h.address, h.length, ra::remote_read);
        if (!r) {
          ++t.rejects;
          expect_header(expect, 2, denied, h.id);
          break;
        }
        ++t.read_ops;
        t.read_bytes += h.length;
        expect_header(expect, 2, 0, h.id, 0, h.length);
        const std::byte* src = e.shadow_of(h.address, h.length);
        expect.insert(expect.end(), src, src + h.length);
        break;
      }
      case 3: {  // write_req: `length` payload bytes follow, refused or not
        const auto* w = e.allowed(h.token, h.address, h.length, ra::remote_write);
        if (!w) {
          ++t.rejects;
          if (avail < h.length) return size;  // drained until the end of input, then closed
          pos += h.length;
          expect_header(expect, 4, denied, h.id);
          break;
        }
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(avail, h.length));
        std::memcpy(e.shadow_of(h.address, h.length), in.data() + pos, n);  // the prefix that arrived
        pos += n;
        if (n < h.length) return pos;
        ++t.write_ops;
        t.write_bytes += h.length;
        expect_header(expect, 4, 0, h.id);
        break;
      }
      case 10:  // rdma_connect: qp_info + announced endpoint; no device -> unsupported
#if MC_FUZZ_TRANSFER_RDMA
        if (h.length < 48 || h.length > 48 + 255) return pos;
#else
        if (h.length > 4096) return pos;
#endif
        if (avail < h.length) return size;
        pos += h.length;
        expect_header(expect, 11, unsupported, h.id);
        break;
      case 12: {  // rdma_check: the registry's answer, nothing else
        const auto* c = e.allowed(h.token, h.address, h.length, h.flags ? ra::remote_write : ra::remote_read);
        expect_header(expect, 13, c ? 0 : denied, h.id);
        break;
      }
      case 14:  // rdma_rkey: protocol "tcp" has no device
        if (h.length != 0) return pos;
        expect_header(expect, 15, unsupported, h.id);
        break;
      case 16:    // write_sg_req: a table of (address, length, token), then `length` payload bytes
      case 17: {  // read_sg_req: the table; answered by a read_resp with the segments' bytes in order
        const bool write = h.op == 16;
        if (h.address < 1 || h.address > 64 || h.token != 0) return pos;  // closed after the header
        const auto n = static_cast<std::size_t>(h.address);
        if (avail < n * 24) return size;  // the table cut short by the end of input
        std::vector<raw_segment> segs;
        std::uint64_t sum = 0;
        bool well_formed = true;
        for (std::size_t i = 0; i < n; ++i) {
          const auto sg = take_sg_entry(e, in.data() + pos + i * 24);
          segs.push_back(sg);
          if (!well_formed) continue;
          if (sg.length == 0 || sg.length > h.length - sum || sg.address > ~std::uint64_t{0} - sg.length)
            well_formed = false;
          else
            sum += sg.length;
        }
        pos += n * 24;
        if (!well_formed || sum != h.length) return pos;  // closed after the table
        bool granted = true;
        for (auto& sg : segs)
          granted = granted && e.allowed(sg.token, sg.address, sg.length, write ? ra::remote_write : ra::remote_read);
        if (!granted) {  // one refusal for the request
          ++t.rejects;
          if (write) {
            if (size - pos < h.length) return size;  // drained until the end of input, then closed
            pos += h.length;
          }
          expect_header(expect, write ? 4 : 2, denied, h.id);
          break;
        }
        if (!write) {
          ++t.read_ops;
          t.read_bytes += h.length;
          expect_header(expect, 2, 0, h.id, 0, h.length);
          for (auto& sg : segs) {
            const std::byte* src = e.shadow_of(sg.address, sg.length);
            expect.insert(expect.end(), src, src + sg.length);
          }
          break;
        }
        for (auto& sg : segs) {  // the payload fills the segments in table order
          const auto k = static_cast<std::size_t>(std::min<std::uint64_t>(size - pos, sg.length));
          std::memcpy(e.shadow_of(sg.address, sg.length), in.data() + pos, k);
          pos += k;
          if (k < sg.length) return pos;  // cut short: closed
        }
        ++t.write_ops;
        t.write_bytes += h.length;
        expect_header(expect, 4, 0, h.id);
        break;
      }
      case 18: {  // call_req: the payload, then the handler's reply (call_reply), after the answers before it
        if (h.token != 0 || h.length == 0 || h.length > mc::transfer::max_call_request_bytes || h.address == 0 ||
            h.address > mc::transfer::max_call_reply_bytes)
          return pos;                       // closed after the header
        if (avail < h.length) return size;  // the request cut short by the end of input: closed
        const auto reply = call_reply({in.data() + pos, static_cast<std::size_t>(h.length)}, h.address);
        pos += h.length;
        ++t.calls;
        expect_header(expect, 19, 0, h.id, 0, reply.size());
        expect.insert(expect.end(), reply.begin(), reply.end());
        break;
      }
      default:  // responses and same-host ops are not served on TCP
        return pos;
    }
  }
  return size;  // a partial header (or nothing) and then the end of input
}

int connect_engine(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  mc::fuzz::require(fd >= 0, "socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  connect_or_abort(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/// Sends out[0..n), then SHUT_WR, while reading everything the peer sends
/// until it closes (no timeout: the server ends once it has read our EOF).
std::vector<std::byte> exchange(int fd, const std::byte* out, std::size_t n) {
  std::vector<std::byte> got;
  std::size_t sent = 0;
  bool shut = false;
  std::byte buf[65536];
  for (;;) {
    if (sent == n && !shut) {
      ::shutdown(fd, SHUT_WR);
      shut = true;
    }
    pollfd p{fd, static_cast<short>(POLLIN | (shut ? 0 : POLLOUT)), 0};
    if (::poll(&p, 1, -1) < 0) {
      mc::fuzz::require(errno == EINTR, "poll");
      continue;
    }
    if (!shut && (p.revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t w = ::send(fd, out + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) sent += static_cast<std::size_t>(w);
      // EPIPE / ECONNRESET: the server closed early; the comparison tells.
      else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        sent = n;
    }
    if (p.revents & (POLLIN | POLLERR | POLLHUP)) {
      ssize_t r = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (r > 0) {
        got.insert(got.end(), buf, buf + r);
      } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        return got;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto& e = env::get();
  e.reset_memory();
  std::vector<std::byte> in(reinterpret_cast<const std::byte*>(data), reinterpret_cast<const std::byte*>(data) + size);
  std::vector<std::byte> expect;
  tally t;
  const std::size_t consumed = model(e, in, expect, t);
  const auto before = e.engine().stats();
  const int fd = connect_engine(e.port());
  const auto got = exchange(fd, in.data(), consumed);
  ::close(fd);
  if (got != expect) {
    std::fprintf(stderr, "transfer_wire: replies differ from the model: got %zu bytes, expected %zu\n", got.size(),
                 expect.size());
    for (std::size_t i = 0; i < std::min(got.size(), expect.size()); ++i)
      if (got[i] != expect[i]) {
        std::fprintf(stderr, "  first difference at byte %zu (reply header %zu, byte %zu)\n", i, i / 48, i % 48);
        break;
      }
    std::abort();
  }
  e.check_memory();
  const auto after = e.engine().stats();
  check(after.inbound_connections == 0, "a served connection outlived its peer's close");
  check(after.served_rejects - before.served_rejects == t.rejects &&
            after.served_read_ops - before.served_read_ops == t.read_ops &&
            after.served_read_bytes - before.served_read_bytes == t.read_bytes &&
            after.served_write_ops - before.served_write_ops == t.write_ops &&
            after.served_write_bytes - before.served_write_bytes == t.write_bytes &&
            after.served_calls - before.served_calls == t.calls &&
            after.served_call_errors == before.served_call_errors,
        "served_* counters differ from the requests the model served and refused");
  return 0;
}
