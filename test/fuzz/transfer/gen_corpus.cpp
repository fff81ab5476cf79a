// Seed corpus generator of the transfer fuzz targets (README.md here):
//   build-asan/test/fuzz/transfer/transfer_fuzz_seeds test/fuzz/corpus
// transfer_wire and same_host_msgs: the bytes a REAL initiator engine sends.
// The fuzz targets' engine (transfer_env.hpp) serves behind a capturing
// proxy on 127.0.0.1 (TCP) and on the abstract socket the proxy's endpoint
// names (same-host control); a second engine in this process runs batches
// against descriptors naming the proxy (TCP forced, then same-host forced).
// Each batch's client-to-target bytes become one seed after the tokens and
// addresses in its headers are turned back into the env's table indexes
// (token i, address (i << 32) | offset from registration i's base), which is
// what the targets map them to again; same-host lease deadlines (already past
// when a seed is replayed) become ~0 (the longest lease).
// rdma_handshake and transfer_wire's RDMA control ops: the real encoders
// (wire.hpp encode, mc::verbs::encode_qp_info, rdma_hello.hpp encode_hello /
// encode_hello_reply) - a protocol "tcp" engine never sends them.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mc/verbs/device.hpp"
#include "rdma_hello.hpp"  // lib/rpc/src
#include "shm_common.hpp"  // lib/transfer/src
#include "transfer_env.hpp"
#include "wire.hpp"  // lib/transfer/src

namespace {

using namespace mc::fuzz::transfer;
namespace fs = std::filesystem;
namespace tx = mc::transfer::detail;

std::mutex cap_m;
std::vector<std::byte> captured;  // client -> target bytes of every proxied connection

void pump(int from, int to, bool record) {
  std::byte buf[65536];
  for (;;) {
    ssize_t r = ::recv(from, buf, sizeof buf, 0);
    if (r <= 0) break;
    if (record) {
      std::lock_guard lk(cap_m);
      captured.insert(captured.end(), buf, buf + r);
    }
    for (ssize_t off = 0; off < r;) {
      ssize_t w = ::send(to, buf + off, static_cast<std::size_t>(r - off), MSG_NOSIGNAL);
      if (w <= 0) return;
      off += w;
    }
  }
  ::shutdown(to, SHUT_WR);
}

/// Accepts on `lfd` forever; each connection is piped to a fresh `dial()`.
template <class Dial>
void proxy(int lfd, Dial dial) {
  for (;;) {
    int c = ::accept(lfd, nullptr, nullptr);
    if (c < 0) continue;
    int s = dial();
    std::thread(pump, c, s, true).detach();
    std::thread(pump, s, c, false).detach();
  }
}

sockaddr_un abstract(const std::string& name, socklen_t& len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

std::vector<std::byte> take() {
  std::lock_guard lk(cap_m);
  return std::exchange(captured, {});
}

/// Turns real tokens and addresses in every header back into table indexes.
void to_placeholders(env& e, std::vector<std::byte>& s, bool shm) {
  for (std::size_t pos = 0; pos + 48 <= s.size();) {
    std::byte* h = s.data() + pos;
    const auto op = std::to_integer<std::uint8_t>(h[5]);
    const auto flags = get_le(h + 6, 2);
    const auto length = get_le(h + 32, 8);
    // Token at t, address at a: the token's table index, the address as an
    // offset from its registration's base.
    auto placeholders = [&](std::byte* t, std::byte* a) {
      const auto token = get_le(t, 8), address = get_le(a, 8);
      for (std::size_t i = 0; i < n_tokens; ++i)
        if (e.token(i).token == token && token != 0) {
          put_le(t, 8, i);
          const std::size_t anchor = i < 8 ? i : 0;  // unregistered tokens: offsets from registration 0
          const auto off = static_cast<std::int64_t>(address - e.token(anchor).base);
          if (off >= INT32_MIN && off <= INT32_MAX) put_le(a, 8, (std::uint64_t(anchor) << 32) | std::uint32_t(off));
          break;
        }
    };
    // scatter-gather: count and 0 stay, the table's entries map; a call's room and 0 stay
    const bool sg = !shm && (op == 16 || op == 17 || op == 18);
    if (!sg) placeholders(h + 40, h + 24);
    pos += 48;
    if (sg) {
      const auto n = get_le(h + 24, 8);
      for (std::uint64_t i = 0; i < n && pos + 24 <= s.size(); ++i, pos += 24)
        placeholders(s.data() + pos + 16, s.data() + pos);
    }
    if (!shm && (op == 3 || op == 16 || op == 18)) pos += length;  // write payload, call request
    if (shm && op == 7 && (flags & 2)) {
      if (pos + 8 <= s.size()) put_le(s.data() + pos, 8, ~0ull);  // lease: the longest
      pos += 8;
    }
  }
}

void write_seed(const fs::path& dir, const std::string& name, const std::vector<std::byte>& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::printf("%s: %zu bytes\n", (dir / name).c_str(), bytes.size());
}

mc::transfer::remote_buffer desc(const std::string& ep, env& e, std::size_t tok, std::int64_t off, std::uint64_t len,
                                 std::size_t base_of = 99) {
  const auto& t = e.token(tok);
  const auto base = e.token(base_of == 99 ? tok : base_of).base;
  return {ep, base + static_cast<std::uint64_t>(off), len, t.token, 0};
}

/// Runs the batches of one transport and writes one seed per batch.
void capture_batches(env& e, mc::transfer::engine& client, mc::runtime::runtime& rt, const std::string& ep,
                     const fs::path& dir, bool shm) {
  using mc::transfer::request;
  std::vector<std::byte> src(8192), dst(8192);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = std::byte(std::uint8_t(i * 29 + 3));
  auto S = [&](std::size_t off, std::size_t n) { return std::span<const std::byte>(src.data() + off, n); };
  auto D = [&](std::size_t off, std::size_t n) { return std::span<std::byte>(dst.data() + off, n); };
  struct scenario {
    const char* name;
    std::vector<request> reqs;
  };
  std::vector<scenario> all;
  all.push_back({"write_r0", {request::make_write(S(0, 333), desc(ep, e, 0, 17, 333))}});
  all.push_back({"read_r0_whole", {request::make_read(D(0, 4093), desc(ep, e, 0, 0, 4093))}});
  {
    scenario w{"window_writes_child", {}};
    for (std::size_t i = 0; i < 8; ++i)
      w.reqs.push_back(request::make_write(S(i * 100, 64 + i * 19), desc(ep, e, 4, i * 150, 64 + i * 19)));
    all.push_back(std::move(w));
  }
  {
    scenario r{"window_reads_16", {}};
    for (std::size_t i = 0; i < 16; ++i)
      r.reqs.push_back(request::make_read(D(i * 200, 100 + i), desc(ep, e, i % 2 ? 7 : 1, i * 25, 100 + i)));
    all.push_back(std::move(r));
  }
  all.push_back(
      {"mixed",
       {request::make_read(D(0, 490), desc(ep, e, 7, 0, 490)), request::make_write(S(0, 777), desc(ep, e, 2, 0, 777)),
        request::make_read(D(1000, 1), desc(ep, e, 0, 4092, 1))}});
  all.push_back({"refused",
                 {request::make_write(S(0, 10), desc(ep, e, 1, 0, 10)),          // read-only region
                  request::make_write(S(0, 778), desc(ep, e, 2, 0, 778)),        // one byte past the end
                  request::make_read(D(0, 10), desc(ep, e, 3, 0, 10)),           // local_only
                  request::make_read(D(0, 10), desc(ep, e, 5, 0, 10)),           // unregistered
                  request::make_write(S(0, 10), desc(ep, e, 6, 0, 10)),          // revoked child
                  request::make_write(S(0, 10), desc(ep, e, 9, 0, 10, 0)),       // wrong token
                  request::make_read(D(0, 600), desc(ep, e, 7, -1, 600, 7))}});  // one byte before the child
  {
    // Scattered pieces (the initiator sends scatter-gather requests): a
    // gather into the child and the writable block, a scatter back out, and
    // one with a refused piece (asked again piece by piece).
    scenario g{"sg_write_pieces", {}};
    for (std::size_t i = 0; i < 6; ++i)
      g.reqs.push_back(
          request::make_write(S(i * 300, 40 + i * 7), desc(ep, e, i % 2 ? 2 : 4, 500 - i * 60, 40 + i * 7)));
    all.push_back(std::move(g));
    scenario r{"sg_read_pieces", {}};
    for (std::size_t i = 0; i < 6; ++i)
      r.reqs.push_back(request::make_read(D(i * 300, 50 + i), desc(ep, e, i % 2 ? 7 : 0, 900 - i * 100, 50 + i)));
    all.push_back(std::move(r));
    scenario x{"sg_refused_piece", {}};
    for (std::size_t i = 0; i < 5; ++i)
      x.reqs.push_back(request::make_write(S(i * 10, 10), desc(ep, e, i == 2 ? 1 : 0, 3000 + i * 20, 10)));
    all.push_back(std::move(x));
  }
  all.push_back({"write_read_back",
                 {request::make_write(S(0, 4093), desc(ep, e, 0, 0, 4093)),
                  request::make_read(D(0, 4093), desc(ep, e, 0, 0, 4093))}});
  for (auto& sc : all) {
    take();
    auto res = rt.block_on(client.batch(std::move(sc.reqs), std::chrono::seconds(10)));
    std::size_t ok = 0;
    for (auto& r : res) ok += static_cast<bool>(r);
    // Same-host releases may still be on their way through the proxy when the
    // batch returns: let them arrive (a generator, not a test: no assertion
    // depends on this pause, only which bytes end up in the seed).
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto bytes = take();
    to_placeholders(e, bytes, shm);
    std::printf("%s (%zu of %zu requests ok) ", sc.name, ok, res.size());
    write_seed(dir, sc.name, bytes);
  }
}

void put_header(std::vector<std::byte>& out, const tx::header& h) {
  tx::header_bytes hb;
  tx::encode(h, hb);
  out.insert(out.end(), hb.begin(), hb.end());
}

mc::verbs::qp_info sample_qp() {
  mc::verbs::qp_info q;
  q.qpn = 0x11;
  q.psn = 0x123456;
  q.lid = 0;
  q.mtu = IBV_MTU_1024;
  q.link_layer = IBV_LINK_LAYER_ETHERNET;
  q.max_rd_atomic = 16;
  q.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
  return q;
}

void encoder_seeds(const fs::path& root) {
  using tx::wire_op;
  const auto q = sample_qp();
  std::byte qb[mc::verbs::qp_info_size];
  mc::verbs::encode_qp_info(q, qb);
  const std::string me = "127.0.0.1:50052";
  // transfer_wire: the RDMA control ops a verbs initiator sends (token /
  // address fields as table indexes, see the header comment).
  {
    std::vector<std::byte> s;
    tx::header h;
    h.op = wire_op::rdma_connect;
    h.request_id = 1;
    h.length = sizeof qb + me.size();
    put_header(s, h);
    s.insert(s.end(), qb, qb + sizeof qb);
    for (char c : me) s.push_back(std::byte(c));
    h = {};
    h.op = wire_op::rdma_rkey;
    h.request_id = 2;
    h.address = 1;  // device index
    h.token = 0;    // registration 0
    put_header(s, h);
    h = {};
    h.op = wire_op::rdma_check;
    h.flags = tx::grant_write;
    h.request_id = 3;
    h.address = 4ull << 32;
    h.length = 1500;
    h.token = 4;  // the remote_write child
    put_header(s, h);
    h.flags = 0;
    h.request_id = 4;
    put_header(s, h);  // READ check of a write-only child: refused
    write_seed(root / "transfer_wire", "rdma_ops", s);
  }
  // transfer_wire: calls (the env's handler answers each with its request's
  // bytes XOR 0x5A, cut to the room), around a READ of registration 0.
  {
    std::vector<std::byte> s;
    tx::header h;
    h.op = wire_op::call_req;
    h.request_id = 1;
    h.address = 100;  // reply room
    h.length = 24;
    put_header(s, h);
    for (int i = 0; i < 24; ++i) s.push_back(std::byte(i * 7 + 1));
    h = {};
    h.op = wire_op::read_req;
    h.request_id = 2;
    h.length = 10;  // registration 0, offset 0 (table indexes)
    put_header(s, h);
    h = {};
    h.op = wire_op::call_req;
    h.request_id = 3;
    h.address = 8;  // less room than the request: the reply is cut
    h.length = 40;
    put_header(s, h);
    for (int i = 0; i < 40; ++i) s.push_back(std::byte(i * 3 + 5));
    write_seed(root / "transfer_wire", "calls", s);
  }
  // same_host_msgs: the per-connection grant bounds, which a real initiator
  // never reaches (it keeps at most the bound the hello answer tells,
  // max_grants_per_conn, and never repeats an id): one grant more than the
  // bound outstanding (1 s each), then a repeated id after a release.
  {
    std::vector<std::byte> s;
    tx::header h;
    h.op = wire_op::shm_hello;
    h.length = tx::shm_identity_size;
    put_header(s, h);
    auto grant = [&](std::uint64_t id, std::uint64_t off) {
      tx::header g;
      g.op = wire_op::shm_grant;
      g.flags = tx::grant_lease;
      g.request_id = id;
      g.address = off;  // registration 0 + off
      g.length = 100;
      g.token = 0;  // registration 0 (read-write)
      put_header(s, g);
      std::byte lease[8];
      put_le(lease, 8, ~0ull);
      s.insert(s.end(), lease, lease + 8);
    };
    const std::uint64_t over = tx::shm::max_grants_per_conn + 1;
    for (std::uint64_t id = 1; id <= over; ++id) grant(id, id * 15);  // the last is refused
    grant(3, 0);                                                      // id 3 is held: refused
    h = {};
    h.op = wire_op::shm_release;
    h.request_id = 3;
    put_header(s, h);
    grant(3, 0);  // released: granted again
    write_seed(root / "same_host_msgs", "grant_bounds", s);
  }
  // rdma_handshake: first byte = which message (see rdma_handshake_fuzz.cpp).
  auto seed = [&](const char* name, std::uint8_t kind, const std::vector<std::byte>& msg) {
    std::vector<std::byte> s{std::byte{kind}};
    s.insert(s.end(), msg.begin(), msg.end());
    write_seed(root / "rdma_handshake", name, s);
  };
  seed("qp_info", 0, std::vector<std::byte>(qb, qb + sizeof qb));
  {
    std::vector<std::byte> s;
    tx::header h;
    h.op = wire_op::rdma_connect;
    h.request_id = 7;
    h.address = 1;
    h.length = sizeof qb + me.size();
    put_header(s, h);
    s.insert(s.end(), qb, qb + sizeof qb);
    for (char c : me) s.push_back(std::byte(c));
    seed("transfer_connect", 1, s);
  }
  for (int variant = 0; variant < 2; ++variant) {
    std::vector<std::byte> s;
    tx::header h;
    h.op = wire_op::rdma_connect_resp;
    h.request_id = 7;
    if (variant == 0) {
      h.length = sizeof qb;
      h.address = 1;
      h.token = 2;  // two devices
    } else {
      h.status = static_cast<std::int32_t>(mc::errc::unsupported);
    }
    put_header(s, h);
    std::byte id[8];
    put_le(id, 8, 7);
    s.insert(s.end(), id, id + 8);
    if (variant == 0) s.insert(s.end(), qb, qb + sizeof qb);
    seed(variant == 0 ? "transfer_connect_resp" : "transfer_connect_unsupported", 2, s);
  }
  {
    std::vector<std::byte> s(mc::rpc::detail::hello_size);
    mc::rpc::detail::encode_hello(s.data(), q);
    seed("rpc_hello", 3, s);
  }
  for (std::uint32_t status = 0; status < 3; ++status) {
    std::vector<std::byte> s(mc::rpc::detail::hello_reply_size);
    mc::rpc::detail::encode_hello_reply(s.data(), status, status == 0 ? &q : nullptr);
    seed(("rpc_reply_" + std::to_string(status)).c_str(), 4, s);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_ROOT (test/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  auto& e = env::get();
  // TCP proxy on 127.0.0.1 in front of the env's engine.
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  mc::fuzz::require(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(lfd, 16) == 0 &&
                        ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &alen) == 0,
                    "proxy listen");
  const std::string ep = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  std::thread([lfd, port = e.port()] {
    proxy(lfd, [port] {
      int s = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in t{};
      t.sin_family = AF_INET;
      t.sin_port = htons(port);
      t.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      mc::fuzz::require(::connect(s, reinterpret_cast<sockaddr*>(&t), sizeof t) == 0, "proxy dial");
      return s;
    });
  }).detach();
  // Same-host control proxy: the abstract name the proxy's endpoint implies.
  int ufd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  socklen_t ulen;
  sockaddr_un ua = abstract("mooncake-p2p.transfer/" + ep, ulen);
  mc::fuzz::require(::bind(ufd, reinterpret_cast<sockaddr*>(&ua), ulen) == 0 && ::listen(ufd, 16) == 0,
                    "control proxy listen");
  std::thread([ufd, target = "mooncake-p2p.transfer/" + e.endpoint()] {
    proxy(ufd, [target] {
      int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
      socklen_t l;
      sockaddr_un t = abstract(target, l);
      mc::fuzz::require(::connect(s, reinterpret_cast<sockaddr*>(&t), l) == 0, "control proxy dial");
      return s;
    });
  }).detach();

  mc::runtime::runtime rt(1);
  rt.start();
  for (bool shm : {false, true}) {
    mc::transfer::engine_options o;
    o.bind_host = "127.0.0.1";
    o.enable_in_process = false;
    o.enable_same_host = shm;
    o.force = shm ? mc::transfer::transport_kind::same_host : mc::transfer::transport_kind::tcp;
    o.connections_per_peer = 1;
    o.slice_size = 4096;
    mc::transfer::engine client(rt, o);
    mc::fuzz::require(static_cast<bool>(client.start()), "client engine start");
    capture_batches(e, client, rt, ep, root / (shm ? "same_host_msgs" : "transfer_wire"), shm);
    client.stop();
  }
  encoder_seeds(root);
  std::fflush(stdout);
  ::_exit(0);  // the proxies and the env's engine are not torn down
}
