// Shared-memory registrations (engine::allocate_shared): every local
// transport moves their bytes; a same-host initiator maps the target's memfd
// once and copies with memcpy, only under a grant; the control server passes
// the memfd only for a live grant of the asking connection.
#include "transfer_fixture.hpp"

#include "shm_common.hpp"
#include "wire.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>
#include <random>
#include <cerrno>
#include <thread>
#include <optional>

using namespace mc::transfer;
using mc::transfer::test::bytes;
using mc::transfer::test::cbytes;
using mc::transfer::test::denied;
using mc::transfer::test::local_transports;
using mc::transfer::test::loopback_options;
using mc::transfer::test::two_engines;

namespace {

namespace wire = mc::transfer::detail;

/// A blocking client of an engine's same-host control socket, speaking the
/// protocol by hand (plain POSIX, receive timeout).
class raw_unix {
 public:
  explicit raw_unix(const std::string& endpoint) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    const std::string name = "mooncake-p2p.transfer/" + endpoint;
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    a.sun_path[0] = '\0';
    std::memcpy(a.sun_path + 1, name.data(), name.size());
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), len) == 0);
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~raw_unix() { ::close(fd_); }
  raw_unix(const raw_unix&) = delete;
  raw_unix& operator=(const raw_unix&) = delete;

  void send(const wire::header& h, const void* extra = nullptr, std::size_t n = 0) {
    wire::header_bytes hb;
    wire::encode(h, hb);
    std::vector<std::byte> out(hb.begin(), hb.end());
    if (n > 0) out.insert(out.end(), static_cast<const std::byte*>(extra), static_cast<const std::byte*>(extra) + n);
    REQUIRE(::send(fd_, out.data(), out.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(out.size()));
  }
  /// Whether the target closed the connection (EOF before any byte).
  bool closed() {
    std::byte b{};
    ssize_t r;
    while ((r = ::recv(fd_, &b, 1, 0)) < 0 && errno == EINTR) {}
    return r == 0;
  }
  /// Reads and drops `n` bytes (a payload after a header).
  void skip(std::size_t n) {
    std::vector<std::byte> b(n);
    for (std::size_t got = 0; got < n;) {
      const ssize_t r = ::recv(fd_, b.data() + got, n - got, 0);
      REQUIRE(r > 0);
      got += static_cast<std::size_t>(r);
    }
  }
  /// One header and the descriptor riding on it (-1: none).
  wire::header recv(int& fd) {
    fd = -1;
    wire::header_bytes hb;
    std::size_t got = 0;
    while (got < hb.size()) {
      iovec iov{hb.data() + got, hb.size() - got};
      alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int))> cbuf{};
      msghdr m{};
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      m.msg_control = cbuf.data();
      m.msg_controllen = cbuf.size();
      const ssize_t r = ::recvmsg(fd_, &m, MSG_CMSG_CLOEXEC);
      REQUIRE(r > 0);
      for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
      got += static_cast<std::size_t>(r);
    }
    auto h = wire::decode(hb);
    REQUIRE(h);
    return *h;
  }

 private:
  int fd_ = -1;
};

/// A leased grant request for [addr, addr + len) under `token`.
void send_grant(raw_unix& c, std::uint64_t id, std::uint64_t addr, std::uint64_t len, std::uint64_t token) {
  wire::header g;
  g.op = wire::wire_op::shm_grant;
  g.flags = wire::grant_lease;
  g.request_id = id;
  g.address = addr;
  g.length = len;
  g.token = token;
  std::array<std::byte, 8> lease{};
  wire::wire_le::store<std::uint64_t>(lease.data(), ~0ull);  // the target caps it (<= 1 s)
  c.send(g, lease.data(), lease.size());
}

std::uint64_t addr_of(const void* p) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)); }

/// A grant_ranges request for `ranges` under `token`; `count` (default: the
/// number of ranges) and `lease` can be made wrong on purpose.
void send_grant_ranges(raw_unix& c, std::uint64_t id,
                       const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges, std::uint64_t token,
                       std::optional<std::uint64_t> count = {}, bool lease = true) {
  wire::header g;
  g.op = wire::wire_op::shm_grant;
  g.flags = static_cast<std::uint16_t>((lease ? wire::grant_lease : 0) | wire::grant_ranges);
  g.request_id = id;
  g.address = ranges.front().first;
  g.length = ranges.front().second;
  g.token = token;
  std::vector<std::byte> rest(16 + 16 * (ranges.size() - 1));
  wire::wire_le::store<std::uint64_t>(rest.data(), ~0ull);  // the lease: the target caps it (<= 1 s)
  wire::wire_le::store<std::uint64_t>(rest.data() + 8, count.value_or(ranges.size()));
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    wire::wire_le::store<std::uint64_t>(rest.data() + 16 * i, ranges[i].first);
    wire::wire_le::store<std::uint64_t>(rest.data() + 16 * i + 8, ranges[i].second);
  }
  if (!lease) rest.erase(rest.begin(), rest.begin() + 8);
  c.send(g, rest.data(), rest.size());
}

}  // namespace

TEST_SUITE("transfer_shared") {
  TEST_CASE("shared-memory registrations round-trip random payloads over every local transport; same-host maps once") {
    for (auto force : local_transports) {
      CAPTURE(to_string(force));
      two_engines t(loopback_options(force), loopback_options(force));
      const std::size_t size = (3u << 20) + 333;
      auto shared = t.b->allocate_shared(size);
      REQUIRE(shared);
      REQUIRE(shared->size() == size);
      CHECK(reinterpret_cast<std::uintptr_t>(shared->data()) % 4096 == 0);
      CHECK(std::all_of(shared->data(), shared->data() + size, [](std::byte b) { return b == std::byte{0}; }));
      std::uint64_t seed = 11;
      std::size_t off = 5;
      for (std::size_t n : {std::size_t(1), std::size_t(4095), std::size_t(65537), std::size_t((1u << 20) + 1),
                            std::size_t((2u << 20) - 7)}) {
        CAPTURE(n);
        // The whole registration and a derived one (the store's per-call tokens).
        auto child = t.b->register_within(*shared, off, n, region_access::remote_read_write);
        REQUIRE(child);
        for (const region* r : {&*shared, &*child}) {
          const auto at = r == &*shared ? off : 0;
          auto payload = mc::test::random_bytes(n, seed++);
          REQUIRE(t.rt.block_on(t.a->write(cbytes(payload), r->describe(at, n))).has_value());
          CHECK(mc::test::checksum(shared->data() + off, n) == mc::test::checksum(payload.data(), n));
          std::vector<std::uint8_t> back(n);
          REQUIRE(t.rt.block_on(t.a->read(bytes(back), r->describe(at, n))).has_value());
          CHECK(mc::test::checksum(back.data(), n) == mc::test::checksum(payload.data(), n));
        }
        off = (off + n + 11) % (size - (2u << 20));
      }
      auto sa = t.a->stats();
      auto sb = t.b->stats();
      if (force == transport_kind::same_host) {
        // One mapping per process, reused by every later grant on every
        // thread, derived tokens included (two threads that miss it at the
        // same moment may each map it once).
        CHECK(sa.shared_mappings >= 1);
        CHECK(sa.shared_mappings <= 2);
        CHECK(sb.shared_maps_served == sa.shared_mappings);
        CHECK(sa.shared_copies > 0);
      } else {
        CHECK(sa.shared_mappings == 0);
        CHECK(sb.shared_maps_served == 0);
        CHECK(sa.shared_copies == 0);
      }
    }
  }

  TEST_CASE("a batch of small pieces of a shared registration moves through the mapping, gaps untouched") {
    two_engines t(loopback_options(transport_kind::same_host), loopback_options(transport_kind::same_host));
    const std::size_t size = (4u << 20) + 77;
    auto shared = t.b->allocate_shared(size);
    REQUIRE(shared);
    std::mt19937_64 rng(5);
    std::vector<std::span<std::byte>> pieces;
    for (std::size_t at = 1; pieces.size() < 150;) {
      const std::size_t n = 1 + rng() % (40u << 10);
      if (at + n > size) break;
      pieces.push_back({shared->data() + at, n});
      at += n + 1 + rng() % 3000;  // a gap of at least one byte
    }
    auto scatter = t.b->register_pieces_within(pieces, region_access::remote_read_write);
    REQUIRE(scatter);
    std::shuffle(pieces.begin(), pieces.end(), rng);
    std::vector<std::vector<std::uint8_t>> payloads;
    std::vector<request> reqs;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      payloads.push_back(mc::test::random_bytes(pieces[i].size(), 100 + i));
      reqs.push_back(request::make_write(
          cbytes(payloads.back()),
          scatter->describe(static_cast<std::uint64_t>(pieces[i].data() - scatter->data()), pieces[i].size())));
    }
    auto rs = t.rt.block_on(t.a->batch(std::move(reqs)));
    for (auto& r : rs) REQUIRE(r.has_value());
    std::vector<char> inside(size, 0);
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      CHECK(mc::test::checksum(pieces[i].data(), pieces[i].size()) ==
            mc::test::checksum(payloads[i].data(), payloads[i].size()));
      std::fill_n(inside.begin() + (pieces[i].data() - shared->data()), pieces[i].size(), 1);
    }
    for (std::size_t i = 0; i < size; ++i)
      if (!inside[i]) REQUIRE(shared->data()[i] == std::byte{0});
    // Read back in one batch.
    std::vector<std::vector<std::uint8_t>> back;
    std::vector<request> reads;
    for (auto& p : pieces) {
      back.emplace_back(p.size());
      reads.push_back(request::make_read(
          bytes(back.back()), scatter->describe(static_cast<std::uint64_t>(p.data() - scatter->data()), p.size())));
    }
    rs = t.rt.block_on(t.a->batch(std::move(reads)));
    for (auto& r : rs) REQUIRE(r.has_value());
    for (std::size_t i = 0; i < pieces.size(); ++i)
      CHECK(mc::test::checksum(back[i].data(), back[i].size()) ==
            mc::test::checksum(payloads[i].data(), payloads[i].size()));
    CHECK(t.a->stats().shared_copies > 0);
    // A gap is refused although the initiator has the memory mapped.
    const auto* gap = pieces.front().data() + pieces.front().size();
    std::vector<std::uint8_t> one{0xAB};
    CHECK(denied(
        t.rt.block_on(t.a->write(cbytes(one), remote_buffer{t.b->endpoint(), addr_of(gap), 1, scatter->token()}))));
    CHECK(*gap == std::byte{0});
  }

  TEST_CASE("a large batch spread over the runtime threads copies through one shared mapping") {
    two_engines t(loopback_options(transport_kind::same_host), loopback_options(transport_kind::same_host));
    const std::size_t item = (1u << 20) - 3, n = 24;
    auto shared = t.b->allocate_shared(n * (item + 5) + 1);
    REQUIRE(shared);
    std::vector<std::uint8_t> src = mc::test::random_bytes(n * item, 77), back(n * item, 0);
    for (int round = 0; round < 3; ++round) {  // the later rounds find the mapping in the threads' caches
      std::vector<request> w, r;
      for (std::size_t i = 0; i < n; ++i) {
        auto d = shared->describe(i * (item + 5) + 1, item);
        w.push_back(request::make_write(std::span(reinterpret_cast<const std::byte*>(src.data()) + i * item, item), d));
        r.push_back(request::make_read(std::span(reinterpret_cast<std::byte*>(back.data()) + i * item, item), d));
      }
      for (auto& x : t.rt.block_on(t.a->batch(std::move(w)))) REQUIRE(x.has_value());
      for (auto& x : t.rt.block_on(t.a->batch(std::move(r)))) REQUIRE(x.has_value());
      CHECK(back == src);
      std::fill(back.begin(), back.end(), 0);
    }
    auto sa = t.a->stats();
    CHECK(sa.shared_mappings >= 1);
    CHECK(sa.shared_mappings <= 2);
    CHECK(sa.shared_copies >= 2 * 3 * n);
  }

  TEST_CASE("a revoked shared registration refuses late WRITEs although the initiator keeps it mapped") {
    two_engines t(loopback_options(transport_kind::same_host), loopback_options(transport_kind::same_host));
    auto shared = t.b->allocate_shared(1u << 20);
    REQUIRE(shared);
    auto child = t.b->register_within(*shared, 4096, 8192, region_access::remote_read_write);
    REQUIRE(child);
    auto payload = mc::test::random_bytes(8192, 3);
    REQUIRE(t.rt.block_on(t.a->write(cbytes(payload), child->describe())).has_value());
    CHECK(t.a->stats().shared_mappings >= 1);
    const auto desc = child->describe();
    child->reset();
    auto other = mc::test::random_bytes(8192, 4);
    CHECK(denied(t.rt.block_on(t.a->write(cbytes(other), desc))));
    CHECK(mc::test::checksum(shared->data() + 4096, 8192) == mc::test::checksum(payload.data(), payload.size()));
    // The parent still works, through the same mapping.
    REQUIRE(t.rt.block_on(t.a->write(cbytes(other), shared->describe(4096, 8192))).has_value());
    CHECK(mc::test::checksum(shared->data() + 4096, 8192) == mc::test::checksum(other.data(), other.size()));
  }

  TEST_CASE("the control server passes a memfd only for a live grant of the asking connection") {
    two_engines t(loopback_options(transport_kind::same_host), loopback_options(transport_kind::same_host));
    const std::size_t size = 256u << 10;
    auto shared = t.b->allocate_shared(size);
    REQUIRE(shared);
    std::vector<std::uint8_t> plain_mem(4096);
    auto plain = t.b->register_memory(plain_mem.data(), plain_mem.size());
    REQUIRE(plain);
    raw_unix c(t.b->endpoint());
    int fd = -1;
    auto ask_map = [&](std::uint64_t id, std::uint64_t grant, std::uint64_t shared_id) {
      wire::header m;
      m.op = wire::wire_op::shm_map;
      m.request_id = id;
      m.address = grant;
      m.token = shared_id;
      c.send(m);
      return c.recv(fd);
    };
    // A grant inside the shared registration names it (address, id).
    send_grant(c, 1, addr_of(shared->data()) + 100, 1000, shared->token());
    auto g = c.recv(fd);
    REQUIRE(g.op == wire::wire_op::shm_grant_resp);
    REQUIRE(g.status == 0);
    CHECK(fd == -1);
    CHECK(g.address == addr_of(shared->data()));
    const std::uint64_t shared_id = g.length;
    CHECK(shared_id != 0);
    // A plain registration's grant names nothing.
    send_grant(c, 2, addr_of(plain_mem.data()), 10, plain->token());
    auto p = c.recv(fd);
    REQUIRE(p.status == 0);
    CHECK(p.address == 0);
    CHECK(p.length == 0);
    // Refused: no such grant, the plain registration's grant, a wrong id.
    for (auto [grant, sid] :
         {std::pair<std::uint64_t, std::uint64_t>{99, shared_id}, {2, shared_id}, {1, shared_id ^ 1}}) {
      auto r = ask_map(10 + grant, grant, sid);
      CHECK(r.op == wire::wire_op::shm_map_resp);
      CHECK(r.status == static_cast<std::int32_t>(mc::errc::access_denied));
      CHECK(fd == -1);
    }
    // Granted: the memfd, sealed, its size, and it is the registration's memory.
    auto ok = ask_map(20, 1, shared_id);
    REQUIRE(ok.status == 0);
    REQUIRE(fd >= 0);
    CHECK(ok.address == addr_of(shared->data()));
    CHECK(ok.length == size);
    CHECK(ok.token == shared_id);
    struct stat st {};
    REQUIRE(::fstat(fd, &st) == 0);
    CHECK(static_cast<std::size_t>(st.st_size) == size);
    CHECK((::fcntl(fd, F_GET_SEALS) & F_SEAL_SHRINK) != 0);
    CHECK(::ftruncate(fd, 0) != 0);  // sealed: nobody can shrink it under a mapping
    std::array<std::byte, 3> probe{std::byte{1}, std::byte{2}, std::byte{3}};
    std::memcpy(shared->data() + 7, probe.data(), probe.size());
    std::array<std::byte, 3> seen{};
    REQUIRE(::pread(fd, seen.data(), seen.size(), 7) == 3);
    CHECK(seen == probe);
    ::close(fd);
    // Released: the memfd is no longer handed out for that grant.
    wire::header rel;
    rel.op = wire::wire_op::shm_release;
    rel.request_id = 1;
    c.send(rel);
    auto after = ask_map(30, 1, shared_id);
    CHECK(after.status == static_cast<std::int32_t>(mc::errc::access_denied));
    CHECK(fd == -1);
    CHECK(t.b->stats().shared_maps_served == 1);
  }

  TEST_CASE("the control server tells its bound on live grants and holds it; a release makes room at once") {
    two_engines t(loopback_options(transport_kind::same_host), loopback_options(transport_kind::same_host));
    std::vector<std::uint8_t> mem(4096);
    auto reg = t.b->register_memory(mem.data(), mem.size());
    REQUIRE(reg);
    raw_unix c(t.b->endpoint());
    int fd = -1;
    // The hello answer's token: the bound (an initiator's window); the identity follows.
    wire::header hello;
    hello.op = wire::wire_op::shm_hello;
    hello.length = wire::shm_identity_size;
    c.send(hello);
    auto hi = c.recv(fd);
    REQUIRE(hi.op == wire::wire_op::shm_hello_resp);
    REQUIRE(hi.length == wire::shm_identity_size);
    const auto bound = hi.token & 0xffffffffu;  // capabilities above it
    CHECK(bound == 256);
    CHECK((hi.token >> 32) == 1);  // grant_ranges served
    c.skip(wire::shm_identity_size);
    // `bound` grants at once: all granted; one more: refused.
    for (std::uint64_t id = 1; id <= bound; ++id) send_grant(c, id, addr_of(mem.data()) + id % 100, 10, reg->token());
    for (std::uint64_t id = 1; id <= bound; ++id) {
      auto a = c.recv(fd);
      REQUIRE(a.request_id == id);
      REQUIRE(a.status == 0);
    }
    CHECK(t.b->stats().same_host_grants_held == bound);
    send_grant(c, 1000, addr_of(mem.data()), 10, reg->token());
    CHECK(c.recv(fd).status == static_cast<std::int32_t>(mc::errc::access_denied));
    // Releases and new grants in one send: each release makes room for the
    // grant after it; a second release of an id and an unknown id change nothing.
    for (std::uint64_t k = 0; k < 40; ++k) {
      wire::header rel;
      rel.op = wire::wire_op::shm_release;
      rel.request_id = 1 + k;
      c.send(rel);
      c.send(rel);
      rel.request_id = 5000 + k;
      c.send(rel);
      send_grant(c, 2000 + k, addr_of(mem.data()), 10, reg->token());
    }
    for (std::uint64_t k = 0; k < 40; ++k) {
      auto a = c.recv(fd);
      REQUIRE(a.request_id == 2000 + k);
      CHECK(a.status == 0);
    }
    send_grant(c, 3000, addr_of(mem.data()), 10, reg->token());
    CHECK(c.recv(fd).status == static_cast<std::int32_t>(mc::errc::access_denied));
    // A released grant is gone for good: a grant id may be used again.
    send_grant(c, 1, addr_of(mem.data()), 10, reg->token());
    CHECK(c.recv(fd).status == static_cast<std::int32_t>(mc::errc::access_denied));  // still full
    wire::header rel;
    rel.op = wire::wire_op::shm_release;
    rel.request_id = 2000;
    c.send(rel);
    send_grant(c, 1, addr_of(mem.data()), 10, reg->token());
    CHECK(c.recv(fd).status == 0);
    CHECK(t.b->stats().same_host_grants_held == bound);
  }

  TEST_CASE("the control server grants a run of ranges under one token together, or refuses it together") {
    two_engines t(loopback_options(transport_kind::same_host), loopback_options(transport_kind::same_host));
    std::vector<std::uint8_t> mem(4096), other(4096);
    auto reg = t.b->register_memory(mem.data(), mem.size());
    auto reg2 = t.b->register_memory(other.data(), other.size());
    REQUIRE(reg);
    REQUIRE(reg2);
    const auto m = addr_of(mem.data());
    int fd = -1;
    const auto before = t.b->stats();
    {
      raw_unix c(t.b->endpoint());
      // Three ranges inside the region: one grant; each range counts as an operation.
      send_grant_ranges(c, 1, {{m, 10}, {m + 100, 20}, {m + 4000, 96}}, reg->token());
      auto a = c.recv(fd);
      REQUIRE(a.request_id == 1);
      CHECK(a.status == 0);
      CHECK(t.b->stats().same_host_grants_held == 1);
      CHECK(t.b->stats().same_host_range_grants == before.same_host_range_grants + 1);
      CHECK(t.b->stats().served_read_ops == before.served_read_ops + 3);
      CHECK(t.b->stats().served_read_bytes == before.served_read_bytes + 126);
      // One range past the region's end, of length 0, or in another region
      // (another token's): the whole run refused, nothing held.
      send_grant_ranges(c, 2, {{m, 10}, {m + 4090, 10}}, reg->token());
      send_grant_ranges(c, 3, {{m, 10}, {m + 20, 0}}, reg->token());
      send_grant_ranges(c, 4, {{m, 10}, {addr_of(other.data()), 10}}, reg->token());
      for (std::uint64_t id : {2, 3, 4}) {
        auto r = c.recv(fd);
        CHECK(r.request_id == id);
        CHECK(r.status == static_cast<std::int32_t>(mc::errc::access_denied));
      }
      CHECK(t.b->stats().same_host_grants_held == 1);
      CHECK(t.b->stats().served_rejects == before.served_rejects + 3);
      // The most ranges one request may name, then its release.
      std::vector<std::pair<std::uint64_t, std::uint64_t>> most;
      for (std::uint64_t i = 0; i < wire::shm::max_ranges_per_grant; ++i) most.push_back({m + 64 * i, 64});
      send_grant_ranges(c, 5, most, reg->token());
      CHECK(c.recv(fd).status == 0);
      CHECK(t.b->stats().same_host_grants_held == 2);
      wire::header rel;
      rel.op = wire::wire_op::shm_release;
      rel.request_id = 5;
      c.send(rel);
      rel.request_id = 1;
      c.send(rel);
      send_grant(c, 6, m, 10, reg->token());  // answered after both releases were read
      CHECK(c.recv(fd).status == 0);
      CHECK(t.b->stats().same_host_grants_held == 1);
    }
    // A count below 2 or above the bound, or ranges without a lease: the
    // connection is closed (a protocol violation), its grants dropped.
    for (int bad = 0; bad < 3; ++bad) {
      CAPTURE(bad);
      raw_unix c(t.b->endpoint());
      send_grant(c, 1, m, 10, reg->token());
      CHECK(c.recv(fd).status == 0);
      if (bad == 0) send_grant_ranges(c, 2, {{m, 10}, {m + 20, 10}}, reg->token(), 1);
      if (bad == 1) send_grant_ranges(c, 2, {{m, 10}, {m + 20, 10}}, reg->token(), wire::shm::max_ranges_per_grant + 1);
      if (bad == 2) send_grant_ranges(c, 2, {{m, 10}, {m + 20, 10}}, reg->token(), {}, false);
      CHECK(c.closed());
    }
    for (int i = 0; i < 200 && t.b->stats().same_host_grants_held != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(t.b->stats().same_host_grants_held == 0);
  }

  TEST_CASE(
      "memory from allocate_shared_memory registered later takes the shared path; freed, it lives while registered") {
    two_engines t(loopback_options(transport_kind::same_host), loopback_options(transport_kind::same_host));
    const std::size_t size = (2u << 20) + 91;
    auto mem = allocate_shared_memory(size);
    REQUIRE(mem);
    CHECK(std::all_of(mem->begin(), mem->end(), [](std::byte b) { return b == std::byte{0}; }));
    // A registration of a part of it (not from its start).
    auto reg = t.b->register_memory(mem->data() + 4096, size - 4096);
    REQUIRE(reg);
    auto payload = mc::test::random_bytes((1u << 20) + 7, 9);
    REQUIRE(t.rt.block_on(t.a->write(cbytes(payload), reg->describe(33, payload.size()))).has_value());
    CHECK(mc::test::checksum(mem->data() + 4096 + 33, payload.size()) ==
          mc::test::checksum(payload.data(), payload.size()));
    CHECK(t.a->stats().shared_copies > 0);
    CHECK(t.b->stats().shared_maps_served >= 1);
    // Freed while registered: the registration keeps it mapped and working.
    REQUIRE(free_shared_memory(mem->data()).has_value());
    std::vector<std::uint8_t> back(payload.size());
    REQUIRE(t.rt.block_on(t.a->read(bytes(back), reg->describe(33, back.size()))).has_value());
    CHECK(back == payload);
    reg->reset();
    // Not a live allocation (freed, or not its start): refused.
    auto again = free_shared_memory(mem->data());
    REQUIRE(!again);
    CHECK(mc::is(again.error(), mc::errc::invalid_params));
    auto other = allocate_shared_memory(8192);
    REQUIRE(other);
    CHECK(!free_shared_memory(other->data() + 1));
    CHECK(!allocate_shared_memory(0));
    // Ordinary memory registered next to nothing shared: no shared path.
    std::vector<std::uint8_t> plain(4096);
    auto preg = t.b->register_memory(plain.data(), plain.size());
    REQUIRE(preg);
    const auto copies = t.a->stats().shared_copies;
    auto small = mc::test::random_bytes(4000, 10);
    REQUIRE(t.rt.block_on(t.a->write(cbytes(small), preg->describe(0, small.size()))).has_value());
    CHECK(t.a->stats().shared_copies == copies);
    CHECK(free_shared_memory(other->data()).has_value());
  }

  TEST_CASE("allocate_shared refuses bad sizes and access") {
    two_engines t;
    auto zero = t.b->allocate_shared(0);
    REQUIRE(!zero);
    CHECK(mc::is(zero.error(), mc::errc::invalid_params));
    auto bad = t.b->allocate_shared(4096, static_cast<region_access>(9));
    REQUIRE(!bad);
    CHECK(mc::is(bad.error(), mc::errc::invalid_params));
    auto huge = t.b->allocate_shared(std::size_t(1) << 62);
    REQUIRE(!huge);
    CHECK(mc::is(huge.error(), mc::errc::no_available_handle));
    // Over TCP a shared registration is an ordinary one.
    auto ok = t.b->allocate_shared(10000);
    REQUIRE(ok);
    auto payload = mc::test::random_bytes(9999, 8);
    REQUIRE(t.rt.block_on(t.a->write(cbytes(payload), ok->describe(1, 9999))).has_value());
    CHECK(mc::test::checksum(ok->data() + 1, 9999) == mc::test::checksum(payload.data(), payload.size()));
  }
}
