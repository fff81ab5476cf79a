// Fuzz target `same_host_msgs`: the same-host transport's control protocol
// (lib/transfer src/shm_server.cpp: hello, grant, release on the abstract
// unix socket "mooncake-p2p.transfer/<endpoint>") against the LIVE engine of
// transfer_env.hpp, which serves it on its own service thread. The input is
// the byte stream of one control connection; headers get their token and
// address fields rewritten through the env's tables as in transfer_wire.
//
// The harness plays the initiator in lockstep: it sends one message, reads
// the answer the model says must come (release has none), and checks it:
//   - hello: our pid and, in the token field, the server's bound on live
//     grants; with length 24 exactly the engine's identity (pid namespace
//     st_dev/st_ino, instance id); anything else length 0;
//   - grant: granted exactly when the model grants it (token, whole range
//     inside the token's region, access, request id not already held, at most
//     max_grants_per_conn (256) held on the connection), else the uniform
//     refusal (access_denied, all
//     other fields 0); a granted lease lies between now and min(requested
//     deadline, now + 1 s); a grant_ranges request (flag 4, after its lease a
//     count of 2..64 and the ranges after the header's, their addresses
//     rewritten like a header's) is granted when every range is, as one
//     grant (one answer, one id to release), each range counted as an
//     operation;
//   - a malformed header, an unknown op, a truncated lease or range list,
//     ranges without a lease or a count outside 2..64 closes the
//     connection (EOF, nothing else).
// A granted range is then used as a peer would: process_vm_writev of a
// pattern into it (write grants; the shadow gets the same bytes) or
// process_vm_readv from it compared with the shadow (read grants) - a grant
// outside registered memory would hit the PROT_NONE guards (EFAULT) or a
// canary. Leases expire on the server's clock: the answer's token gives each
// grant's end; grants that end before a message was sent are gone for it
// (the server forgets expired grants on every message), and where a grant
// ends between the send and the answer, both outcomes are accepted (only
// under an extreme stall; the fuzzer's leases are either in the past or 1 s).
// After every input (the server has closed): blocks equal their shadows,
// canaries intact, the engine holds no grant any more and its served_*
// counters grew by exactly the grants given and refused.
// Seeds: gen_corpus.cpp (see README.md).
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <map>

#include "mc/runtime/error.hpp"
#include "shm_common.hpp"
#include "transfer_env.hpp"

namespace {

using namespace mc::fuzz::transfer;
using ra = mc::transfer::region_access;

constexpr auto denied = static_cast<std::int32_t>(mc::errc::access_denied);
constexpr std::uint64_t max_lease_ns = 1'000'000'000ull;
constexpr std::size_t max_grants = mc::transfer::detail::shm::max_grants_per_conn;  // the server's bound per connection

std::uint64_t mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000'000ull + std::uint64_t(ts.tv_nsec);
}

int connect_control(const std::string& endpoint) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  mc::fuzz::require(fd >= 0, "socket");
  const std::string name = "mooncake-p2p.transfer/" + endpoint;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), name.size());  // abstract: sun_path[0] = 0
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  connect_or_abort(fd, reinterpret_cast<sockaddr*>(&a), len);
  return fd;
}

void send_bytes(int fd, const std::byte* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    check(w > 0, "the control server closed while a message the model accepts was sent");
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

/// Reads exactly n bytes (aborts on EOF).
void recv_bytes(int fd, std::byte* p, std::size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    check(r > 0, "the control server closed instead of answering");
    p += r;
    n -= static_cast<std::size_t>(r);
  }
}

struct grant_model {
  std::map<std::uint64_t, std::uint64_t> held;  // request id -> lease end (server clock)
  // What the engine's served_* counters must grow by (from the answers).
  std::uint64_t rejects = 0, read_ops = 0, read_bytes = 0, write_ops = 0, write_bytes = 0;
  void forget_ended(std::uint64_t now) {
    std::erase_if(held, [&](auto& kv) { return kv.second <= now; });
  }
};

/// Uses a granted range as the peer would, through the kernel's
/// cross-memory attach on our own pid.
void use_grant(env& e, bool write, std::uint64_t addr, std::uint64_t len, std::uint64_t id) {
  std::vector<std::byte> local(len);
  iovec l{local.data(), len};
  iovec r{reinterpret_cast<void*>(static_cast<std::uintptr_t>(addr)), len};
  std::byte* shadow = e.shadow_of(addr, len);
  if (write) {
    for (std::size_t i = 0; i < len; ++i) local[i] = std::byte(std::uint8_t(id + i * 7));
    check(::process_vm_writev(::getpid(), &l, 1, &r, 1, 0) == static_cast<ssize_t>(len),
          "process_vm_writev into a granted range failed");
    std::memcpy(shadow, local.data(), len);
  } else {
    check(::process_vm_readv(::getpid(), &l, 1, &r, 1, 0) == static_cast<ssize_t>(len),
          "process_vm_readv from a granted range failed");
    check(std::memcmp(shadow, local.data(), len) == 0, "a granted range does not hold the shadow's bytes");
  }
}

/// One grant request `h` (its lease payload `requested`, if any, sent too;
/// `more`: the further ranges of a grant_ranges request, address and length).
void grant(env& e, int fd, const raw_header& h, bool has_lease, std::uint64_t requested,
           const std::vector<std::pair<std::uint64_t, std::uint64_t>>& more, std::uint64_t sent_at, grant_model& g) {
  std::byte rb[48];
  recv_bytes(fd, rb, sizeof rb);
  const std::uint64_t answered_at = mono_ns();
  const bool write = h.flags & 1;
  const auto need = write ? ra::remote_write : ra::remote_read;
  bool in_region = e.allowed(h.token, h.address, h.length, need);
  for (auto& [a, n] : more) in_region = in_region && n != 0 && e.allowed(h.token, a, n, need);
  // The server forgot every grant that ended at its clock T, sent_at <= T <= answered_at.
  std::size_t live_min = 0, live_max = 0;
  bool dup_min = false, dup_max = false;
  for (auto& [id, end] : g.held) {
    const bool surely_live = end > answered_at;  // else it may have ended at T
    ++live_max;
    live_min += surely_live;
    if (id == h.id) {
      dup_max = true;
      dup_min = surely_live;
    }
  }
  const bool may_grant = in_region && !dup_min && live_min < max_grants;
  const bool must_grant = in_region && !dup_max && live_max < max_grants;
  const auto status = static_cast<std::int32_t>(static_cast<std::uint32_t>(get_le(rb + 8, 4)));
  const std::uint64_t lease = get_le(rb + 40, 8);
  std::vector<std::byte> want;
  if (status == 0) {
    check(may_grant, "a grant the model refuses (token, range, access, duplicate id or over the bound)");
    check(lease >= sent_at && lease <= answered_at + max_lease_ns, "a lease beyond 1 s or in the past");
    check(!has_lease || lease <= std::max(requested, answered_at), "a lease beyond the requested deadline");
    expect_header(want, 8, 0, h.id, 0, 0, lease);
  } else {
    check(!must_grant, "a grant the model accepts was refused");
    expect_header(want, 8, denied, h.id);
  }
  check(std::memcmp(rb, want.data(), 48) == 0, "a grant answer that is not the exact expected header");
  if (status != 0) {
    ++g.rejects;
    return;
  }
  (write ? g.write_ops : g.read_ops) += 1 + more.size();
  (write ? g.write_bytes : g.read_bytes) += h.length;
  for (auto& r : more) (write ? g.write_bytes : g.read_bytes) += r.second;
  g.held[h.id] = lease;
  use_grant(e, write, h.address, h.length, h.id);
  for (auto& [a, n] : more) use_grant(e, write, a, n, h.id);
}

/// Plays `in` (rewritten in place) against the control server.
void play(env& e, int fd, std::vector<std::byte>& in, grant_model& g) {
  static const std::pair<std::uint64_t, std::uint64_t> pid_ns = [] {
    struct stat st {};
    mc::fuzz::require(::stat("/proc/self/ns/pid", &st) == 0, "stat /proc/self/ns/pid");
    return std::pair<std::uint64_t, std::uint64_t>(st.st_dev, st.st_ino);
  }();
  std::size_t pos = 0;
  const std::size_t size = in.size();
  while (size - pos >= 48) {
    std::byte* p = in.data() + pos;
    const raw_header h = take_header(e, p);
    pos += 48;
    if (!h.structure_ok || (h.op != 5 && h.op != 7 && h.op != 9)) {
      send_bytes(fd, p, 48);
      return;  // closed: the caller checks for EOF
    }
    const std::uint64_t sent_at = mono_ns();
    g.forget_ended(sent_at);  // the server forgets them on this message at the latest
    if (h.op == 5) {          // hello
      send_bytes(fd, p, 48);
      const bool identity = h.length == 24;
      std::vector<std::byte> want, got(identity ? 72 : 48);
      expect_header(want, 6, 0, h.id, static_cast<std::uint64_t>(::getpid()), identity ? 24 : 0,
                    max_grants | (mc::transfer::detail::shm::cap_grant_ranges << 32));
      if (identity) {
        want.resize(72);
        put_le(want.data() + 48, 8, pid_ns.first);
        put_le(want.data() + 56, 8, pid_ns.second);
        put_le(want.data() + 64, 8, e.engine().instance_id());
      }
      recv_bytes(fd, got.data(), got.size());
      check(got == want, "a hello answer that is not the engine's identity");
    } else if (h.op == 9) {  // release: no answer
      send_bytes(fd, p, 48);
      g.held.erase(h.id);
    } else {  // grant, with its 8-byte lease when flagged, then a range list when flagged
      const bool has_lease = h.flags & 2, ranged = h.flags & 4;
      if (ranged && !has_lease) {
        send_bytes(fd, p, 48);
        return;  // closed: a range list comes after a lease only
      }
      const std::size_t head = has_lease ? (ranged ? 16 : 8) : 0;
      if (size - pos < head) {
        send_bytes(fd, p, size - pos + 48);
        return;  // truncated: closed at EOF
      }
      std::vector<std::pair<std::uint64_t, std::uint64_t>> more;
      std::size_t body = head;
      if (ranged) {
        const std::uint64_t count = get_le(p + 56, 8);
        if (count < 2 || count > mc::transfer::detail::shm::max_ranges_per_grant) {
          send_bytes(fd, p, 48 + head);
          return;  // closed
        }
        if (size - pos < head + (count - 1) * 16) {
          send_bytes(fd, p, size - pos + 48);
          return;  // truncated: closed at EOF
        }
        for (std::uint64_t i = 1; i < count; ++i) {
          std::byte* r = p + 48 + head + (i - 1) * 16;
          put_le(r, 8, e.map_address(get_le(r, 8)));
          more.push_back({get_le(r, 8), get_le(r + 8, 8)});
        }
        body += static_cast<std::size_t>(count - 1) * 16;
      }
      const std::uint64_t requested = has_lease ? get_le(p + 48, 8) : 0;
      send_bytes(fd, p, 48 + body);
      pos += body;
      grant(e, fd, h, has_lease, requested, more, sent_at, g);
    }
  }
  send_bytes(fd, in.data() + pos, size - pos);  // a partial header, then EOF
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto& e = env::get();
  e.reset_memory();
  std::vector<std::byte> in(reinterpret_cast<const std::byte*>(data), reinterpret_cast<const std::byte*>(data) + size);
  const auto before = e.engine().stats();
  const int fd = connect_control(e.endpoint());
  grant_model g;
  play(e, fd, in, g);
  ::shutdown(fd, SHUT_WR);
  std::byte extra[64];
  ssize_t r;
  while ((r = ::recv(fd, extra, sizeof extra, 0)) < 0 && errno == EINTR) {}
  check(r == 0, "the control server sent more than the model expects (or reset)");
  ::close(fd);
  e.check_memory();
  const auto after = e.engine().stats();
  check(after.same_host_grants_held == 0, "grants outlived their connection");
  check(after.served_rejects - before.served_rejects == g.rejects &&
            after.served_read_ops - before.served_read_ops == g.read_ops &&
            after.served_read_bytes - before.served_read_bytes == g.read_bytes &&
            after.served_write_ops - before.served_write_ops == g.write_ops &&
            after.served_write_bytes - before.served_write_bytes == g.write_bytes,
        "served_* counters differ from the grants answered");
  return 0;
}
