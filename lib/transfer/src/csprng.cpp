#include "csprng.hpp"

#include <pthread.h>
#include <sys/random.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <stdexcept>

namespace mc::transfer::detail {
namespace {

constexpr std::uint32_t rotl(std::uint32_t v, int n) noexcept { return (v << n) | (v >> (32 - n)); }

inline void quarter(std::uint32_t& a, std::uint32_t& b, std::uint32_t& c, std::uint32_t& d) noexcept {
  a += b;
  d ^= a;
  d = rotl(d, 16);
  c += d;
  b ^= c;
  b = rotl(b, 12);
  a += b;
  d ^= a;
  d = rotl(d, 8);
  c += d;
  b ^= c;
  b = rotl(b, 7);
}

std::atomic<std::uint64_t> fork_generation{0};
std::atomic<std::uint64_t> seeds{0};

void on_fork_child() noexcept { fork_generation.fetch_add(1, std::memory_order_relaxed); }

/// One thread's generator: key, buffered output, the fork generation seeded in.
struct generator {
  static constexpr std::size_t blocks = 4;
  static constexpr std::size_t outputs = (blocks * 64 - 32) / 8;  // 28 values per refill
  std::array<std::uint32_t, 8> key{};
  std::array<std::uint64_t, outputs> out{};
  std::size_t left = 0;
  std::uint64_t generation = ~0ull;

  void seed() {
    static std::once_flag once;
    std::call_once(once, [] { ::pthread_atfork(nullptr, nullptr, on_fork_child); });
    std::uint8_t raw[32];
    std::size_t got = 0;
    while (got < sizeof raw) {
      auto n = ::getrandom(raw + got, sizeof raw - got, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw std::runtime_error("transfer: getrandom failed");
      }
      got += static_cast<std::size_t>(n);
    }
    std::memcpy(key.data(), raw, sizeof raw);
    std::memset(raw, 0, sizeof raw);
    generation = fork_generation.load(std::memory_order_relaxed);
    left = 0;
    seeds.fetch_add(1, std::memory_order_relaxed);
  }

  void refill() noexcept {
    std::array<std::uint8_t, blocks * 64> stream;
    for (std::uint32_t b = 0; b < blocks; ++b) {
      auto blk = chacha20_block(key, b, {0, 0, 0});
      std::memcpy(stream.data() + b * 64, blk.data(), 64);
    }
    // Fast key erasure: the next key is the first 32 bytes of this output.
    std::memcpy(key.data(), stream.data(), 32);
    std::memcpy(out.data(), stream.data() + 32, sizeof out);
    std::memset(stream.data(), 0, stream.size());
    left = outputs;
  }

  std::uint64_t next() {
    if (generation != fork_generation.load(std::memory_order_relaxed)) seed();
    if (left == 0) refill();
    auto& slot = out[outputs - left];
    const std::uint64_t v = slot;
    slot = 0;  // handed out values are not kept
    --left;
    return v;
  }
};

}  // namespace

std::array<std::uint8_t, 64> chacha20_block(const std::array<std::uint32_t, 8>& key, std::uint32_t counter,
                                            const std::array<std::uint32_t, 3>& nonce) noexcept {
  std::array<std::uint32_t, 16> in{0x61707865u, 0x3320646eu, 0x79622d32u, 0x6b206574u};
  for (int i = 0; i < 8; ++i) in[4 + i] = key[i];
  in[12] = counter;
  for (int i = 0; i < 3; ++i) in[13 + i] = nonce[i];
  auto x = in;
  for (int r = 0; r < 10; ++r) {
    quarter(x[0], x[4], x[8], x[12]);
    quarter(x[1], x[5], x[9], x[13]);
    quarter(x[2], x[6], x[10], x[14]);
    quarter(x[3], x[7], x[11], x[15]);
    quarter(x[0], x[5], x[10], x[15]);
    quarter(x[1], x[6], x[11], x[12]);
    quarter(x[2], x[7], x[8], x[13]);
    quarter(x[3], x[4], x[9], x[14]);
  }
  std::array<std::uint8_t, 64> out;
  for (int i = 0; i < 16; ++i) {
    const std::uint32_t v = x[i] + in[i];
    for (int b = 0; b < 4; ++b) out[4 * i + b] = static_cast<std::uint8_t>(v >> (8 * b));
  }
  return out;
}

std::uint64_t csprng_u64() {
  thread_local generator g;
  return g.next();
}

std::uint64_t csprng_seed_count() noexcept { return seeds.load(std::memory_order_relaxed); }

}  // namespace mc::transfer::detail
