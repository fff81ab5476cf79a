// Shared by the TransferEngine fuzz targets (transfer_wire, same_host_msgs):
// one live engine on 127.0.0.1 (a one-thread runtime), created once and kept
// for the whole run, with a fixed set of registrations over guarded memory.
//
// Memory layout: five blocks, each a guarded_memory (PROT_NONE pages right
// before and right after its bytes, odd sizes) between two canary_memory
// blocks. Registrations (the token table, index = `tok_*`):
//   0 R0  block 0 whole, remote_read_write
//   1 R1  block 1 whole, remote_read
//   2 R2  block 2 whole, remote_write
//   3 R3  block 3 whole, local_only
//   4 C4  child of R0 [1000, 2500), remote_write
//   5 R5  block 4 whole, registered and unregistered (revoked token)
//   6 C6  child of R0 [2000, 2100), revoked
//   7 C7  child of R1 [10, 500), remote_read
//   8..15 never registered: 0, near misses of live tokens, ~0
// Every block has a shadow copy; a target applies to it exactly the writes
// the protocol accepted and compares after each input (check_memory()).
//
// Thread-safety: used from the fuzzing thread only (the engine serves on its
// own threads).
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <memory>
#include <vector>

#include "fuzz_support.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/transfer/engine.hpp"

namespace mc::fuzz::transfer {

namespace tr = mc::transfer;

inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "transfer fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

/// One guarded block between two canaries, with its shadow.
struct block {
  explicit block(std::size_t n) : before(4096), mem(n), after(4096), shadow(n) {}
  canary_memory before;
  guarded_memory mem;
  canary_memory after;
  std::vector<std::byte> shadow;
  std::uint64_t base() { return reinterpret_cast<std::uintptr_t>(mem.data()); }
};

/// What the model knows of a token.
struct token_info {
  std::uint64_t token = 0;
  std::uint64_t base = 0;
  std::uint64_t length = 0;
  tr::region_access access = tr::region_access::local_only;
  bool live = false;  // registered now (false: revoked or never registered)
};

inline constexpr std::size_t n_blocks = 5;
inline constexpr std::size_t n_tokens = 16;

/// The env's call handler's answer to `request` with `room` reply bytes allowed.
inline std::vector<std::byte> call_reply(std::span<const std::byte> request, std::uint64_t room) {
  std::vector<std::byte> out(
      request.begin(), request.begin() + static_cast<std::ptrdiff_t>(std::min<std::uint64_t>(request.size(), room)));
  for (auto& b : out) b ^= std::byte{0x5A};
  return out;
}

class env {
 public:
  static env& get() {
    static env* e = new env();  // never destroyed: the engine serves until exit
    return *e;
  }

  tr::engine& engine() { return *eng_; }
  std::uint16_t port() const { return port_; }
  const std::string& endpoint() const { return endpoint_; }
  const token_info& token(std::size_t i) const { return tokens_[i % n_tokens]; }
  block& blk(std::size_t i) { return *blocks_[i]; }

  /// The token a header's token field names: values below n_tokens index the
  /// table, anything else is sent as is.
  std::uint64_t map_token(std::uint64_t field) const { return field < n_tokens ? tokens_[field].token : field; }
  /// The address a header's address field names: (sel << 32 | offset) with
  /// sel < 16 is "anchor sel + (int32) offset" (anchors: the block and child
  /// bases, 0); anything else is sent as is.
  std::uint64_t map_address(std::uint64_t field) const {
    const std::uint64_t sel = field >> 32;
    if (sel >= 16) return field;
    const auto off = static_cast<std::int64_t>(static_cast<std::int32_t>(field & 0xffffffffu));
    return anchors_[sel % anchors_.size()] + static_cast<std::uint64_t>(off);
  }
  /// The live registration `token` names if [addr, addr + len) lies inside it
  /// and it grants `need` (the model of the registry's check).
  const token_info* allowed(std::uint64_t token, std::uint64_t addr, std::uint64_t len, tr::region_access need) const {
    if (len == 0 || token == 0) return nullptr;
    for (auto& t : tokens_) {
      if (t.token != token || !t.live) continue;
      if (addr < t.base || len > t.length || addr - t.base > t.length - len) return nullptr;
      return tr::grants(t.access, need) ? &t : nullptr;
    }
    return nullptr;
  }
  /// The shadow bytes of [addr, addr + len), which must lie in one block.
  std::byte* shadow_of(std::uint64_t addr, std::uint64_t len) {
    for (auto& b : blocks_)
      if (addr >= b->base() && len <= b->mem.size() && addr - b->base() <= b->mem.size() - len)
        return b->shadow.data() + (addr - b->base());
    check(false, "an accepted range outside every block");
    return nullptr;
  }

  /// Resets every block and its shadow to the fixed pattern (each input
  /// starts from the same memory).
  void reset_memory() {
    for (std::size_t i = 0; i < n_blocks; ++i) {
      auto& b = *blocks_[i];
      for (std::size_t j = 0; j < b.mem.size(); ++j) b.shadow[j] = std::byte(std::uint8_t(j * 131 + i * 17 + 1));
      std::memcpy(b.mem.data(), b.shadow.data(), b.mem.size());
    }
  }
  /// Aborts unless every block equals its shadow and every canary is intact.
  void check_memory() {
    for (auto& b : blocks_) {
      check(b->before.intact() && b->after.intact(), "a canary next to a registered region was written");
      check(std::memcmp(b->mem.data(), b->shadow.data(), b->mem.size()) == 0,
            "region memory differs from the accepted writes (shadow)");
    }
  }

 private:
  env() {
    static const std::size_t sizes[n_blocks] = {4093, 1001, 777, 513, 301};
    for (auto n : sizes) blocks_.push_back(std::make_unique<block>(n));
    rt_.start();
    tr::engine_options o;
    o.bind_host = "127.0.0.1";
    o.port = 0;
    eng_ = std::make_unique<tr::engine>(rt_, o);
    check(static_cast<bool>(eng_->start()), "engine start");
    // Calls (op 18): the reply is the request's bytes, each XOR 0x5A, cut
    // to the reply room the caller allows (the model predicts it: call_reply).
    eng_->set_call_handler([](tr::call_request q) -> mc::task<mc::result<std::vector<std::byte>>> {
      co_return call_reply(q.payload, q.reply_capacity);
    });
    endpoint_ = eng_->endpoint();
    port_ = static_cast<std::uint16_t>(std::stoul(endpoint_.substr(endpoint_.rfind(':') + 1)));
    using ra = tr::region_access;
    auto reg = [&](std::size_t slot, block& b, ra a) {
      auto r = eng_->register_memory(b.mem.data(), b.mem.size(), a);
      check(static_cast<bool>(r), "register_memory");
      tokens_[slot] = {r->token(), b.base(), b.mem.size(), a, true};
      regions_.push_back(std::move(*r));
      return regions_.size() - 1;
    };
    auto child = [&](std::size_t slot, std::size_t parent, std::uint64_t off, std::uint64_t len, ra a) {
      auto r = eng_->register_within(regions_[parent], off, len, a);
      check(static_cast<bool>(r), "register_within");
      tokens_[slot] = {r->token(), tokens_[slot == 7 ? 1 : 0].base + off, len, a, true};
      regions_.push_back(std::move(*r));
      return regions_.size() - 1;
    };
    const auto r0 = reg(0, *blocks_[0], ra::remote_read_write);
    const auto r1 = reg(1, *blocks_[1], ra::remote_read);
    reg(2, *blocks_[2], ra::remote_write);
    reg(3, *blocks_[3], ra::local_only);
    child(4, r0, 1000, 1500, ra::remote_write);
    regions_[reg(5, *blocks_[4], ra::remote_read_write)].reset();
    tokens_[5].live = false;
    regions_[child(6, r0, 2000, 100, ra::remote_read_write)].reset();
    tokens_[6].live = false;
    child(7, r1, 10, 490, ra::remote_read);
    const auto t0 = tokens_[0].token;
    const std::uint64_t unknown[8] = {0,
                                      t0 ^ 1,
                                      t0 ^ (1ull << 63),
                                      tokens_[4].token ^ (1ull << 32),
                                      ~0ull,
                                      tokens_[2].token + 1,
                                      0x4d43584600000001ull,
                                      t0 ^ (1ull << 31)};
    for (std::size_t i = 0; i < 8; ++i) tokens_[8 + i] = {unknown[i], 0, 0, ra::local_only, false};
    for (std::size_t i = 0; i < 8; ++i) anchors_.push_back(tokens_[i].base ? tokens_[i].base : blocks_[4]->base());
    anchors_.push_back(0);
    reset_memory();
  }

  mc::runtime::runtime rt_{1};
  std::vector<std::unique_ptr<block>> blocks_;
  std::unique_ptr<tr::engine> eng_;
  std::vector<tr::region> regions_;
  std::array<token_info, n_tokens> tokens_{};
  std::vector<std::uint64_t> anchors_;
  std::string endpoint_;
  std::uint16_t port_ = 0;
};

/// connect() that survives EINTR (libFuzzer's -timeout alarm interrupts
/// system calls): an interrupted connect completes in the background, so
/// wait for writability and read its result.
inline void connect_or_abort(int fd, const sockaddr* a, socklen_t len) {
  if (::connect(fd, a, len) == 0) return;
  require(errno == EINTR || errno == EINPROGRESS, "connect to the engine");
  pollfd p{fd, POLLOUT, 0};
  while (::poll(&p, 1, -1) < 0) require(errno == EINTR, "poll for connect");
  int err = 0;
  socklen_t el = sizeof err;
  require(::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0, "connect to the engine (completion)");
}

/// Little-endian field access on a 48-byte header in a byte buffer.
inline std::uint64_t get_le(const std::byte* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= std::uint64_t(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return v;
}
inline void put_le(std::byte* p, std::size_t n, std::uint64_t v) {
  for (std::size_t i = 0; i < n; ++i) p[i] = std::byte(std::uint8_t(v >> (8 * i)));
}

/// The fields of a header as the model reads them (independently of wire.hpp).
struct raw_header {
  bool structure_ok = false;  // what the receiver's structural check must accept
  std::uint8_t op = 0;
  std::uint16_t flags = 0;
  std::int32_t status = 0;
  std::uint64_t id = 0, address = 0, length = 0, token = 0;
};

/// Reads the header at `p` after rewriting its token and address fields
/// through the env's tables (in place: the rewritten bytes are what is sent).
/// Scatter-gather requests (ops 16, 17) keep them as they are (the segment
/// count and 0): their table entries are mapped instead (take_sg_entry);
/// calls (op 18) too (the reply room and 0).
inline raw_header take_header(env& e, std::byte* p) {
  const auto op = std::to_integer<std::uint8_t>(p[5]);
  if (op != 16 && op != 17 && op != 18) {
    put_le(p + 40, 8, e.map_token(get_le(p + 40, 8)));
    put_le(p + 24, 8, e.map_address(get_le(p + 24, 8)));
  }
  raw_header h;
  h.op = op;
  h.flags = static_cast<std::uint16_t>(get_le(p + 6, 2));
  h.status = static_cast<std::int32_t>(static_cast<std::uint32_t>(get_le(p + 8, 4)));
  h.id = get_le(p + 16, 8);
  h.address = get_le(p + 24, 8);
  h.length = get_le(p + 32, 8);
  h.token = get_le(p + 40, 8);
  const bool grant_op = h.op == 7 || h.op == 8;
  h.structure_ok = std::memcmp(p, "MCXF", 4) == 0 && std::to_integer<std::uint8_t>(p[4]) == 1 && h.op >= 1 &&
                   h.op <= 19 && get_le(p + 12, 4) == 0 && (h.flags & ~7u) == 0 &&
                   (h.flags == 0 || h.op == 7 || (h.op == 12 && h.flags == 1)) &&
                   (h.length <= (256ull << 20) || grant_op) && h.status <= 0;
  return h;
}

/// One scatter-gather table entry (24 bytes: address, length, token) at `p`,
/// its address and token rewritten through the env's tables like a header's.
struct raw_segment {
  std::uint64_t address = 0, length = 0, token = 0;
};
inline raw_segment take_sg_entry(env& e, std::byte* p) {
  put_le(p, 8, e.map_address(get_le(p, 8)));
  put_le(p + 16, 8, e.map_token(get_le(p + 16, 8)));
  return {get_le(p, 8), get_le(p + 8, 8), get_le(p + 16, 8)};
}

/// A response header as the target must send it: op, status, id and the
/// other fields; the uniform refusal has address, length and token 0.
inline void expect_header(std::vector<std::byte>& out, std::uint8_t op, std::int32_t status, std::uint64_t id,
                          std::uint64_t address = 0, std::uint64_t length = 0, std::uint64_t token = 0) {
  std::byte h[48] = {};
  std::memcpy(h, "MCXF", 4);
  h[4] = std::byte{1};
  h[5] = std::byte{op};
  put_le(h + 8, 4, static_cast<std::uint32_t>(status));
  put_le(h + 16, 8, id);
  put_le(h + 24, 8, address);
  put_le(h + 32, 8, length);
  put_le(h + 40, 8, token);
  out.insert(out.end(), h, h + 48);
}

}  // namespace mc::fuzz::transfer
