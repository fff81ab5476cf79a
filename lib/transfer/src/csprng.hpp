#pragma once
// Cheap unpredictable 64-bit values for region tokens (one per registration)
// without a getrandom() system call per draw: a per-thread ChaCha20 generator
// (RFC 8439 block function) keyed from getrandom() once per thread, with
// fast key erasure (every refill replaces the key with the first 32 bytes of
// its own output, so a later memory disclosure does not reveal earlier
// tokens) and a reseed in a forked child (pthread_atfork), so parent and
// child never share a stream.
#include <array>
#include <cstdint>

namespace mc::transfer::detail {

/// The ChaCha20 block function of RFC 8439 (section 2.3): 64 bytes of key
/// stream for `key` (8 little-endian words), block `counter` and `nonce` (3
/// little-endian words). Pure; exposed for the test vector.
std::array<std::uint8_t, 64> chacha20_block(const std::array<std::uint32_t, 8>& key, std::uint32_t counter,
                                            const std::array<std::uint32_t, 3>& nonce) noexcept;

/// 64 unpredictable bits from this thread's ChaCha20 generator. The first
/// call on a thread (and the first after a fork) reads 32 bytes from
/// getrandom(); later calls make no system call (one refill of 4 blocks per
/// 28 values). Thread-safe (per-thread state). Throws std::runtime_error only
/// when the kernel refuses getrandom at seeding.
std::uint64_t csprng_u64();

/// How many times this process seeded a generator from getrandom() (tests:
/// many draws on one thread seed once).
std::uint64_t csprng_seed_count() noexcept;

}  // namespace mc::transfer::detail
