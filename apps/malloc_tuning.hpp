#pragma once
// glibc malloc settings of the node binaries (mooncake_client,
// mooncake_master); never of the library or the Python extension, whose
// host process owns its allocator (README "Benchmarks" says what an
// embedding process can set itself).
//
// Why: glibc's thresholds are dynamic. Until some large mmapped chunk has
// been freed, a freed block that leaves more than 128 KiB free at the top
// of a thread arena is handed back to the kernel (madvise(MADV_DONTNEED),
// a TLB flush across CPUs) and the next allocation of that size faults its
// pages in again. An owner serving 64 KiB values builds a ~64 KiB reply
// message per get (Cap'n Proto zeroes each new segment, so every page
// faults): in store_bench's full matrix (2026-12-05) 64 KiB gets at 8 and
// 32 in flight ran at ~4-5 k/s with the owner in that cycle (a fifth of
// its CPU in page faults under capnp's segment allocation) against ~20 k/s
// without. Whether a process falls into it depends on its allocation
// history. Fixed thresholds remove the cycle: blocks below
// `mmap_threshold` come from the arenas, and an arena keeps up to
// `trim_threshold` of free memory at its top (the tiers' memory is
// mmapped separately and not affected).
//
// A glibc.malloc setting in GLIBC_TUNABLES, or MALLOC_TRIM_THRESHOLD_ /
// MALLOC_MMAP_THRESHOLD_ in the environment, wins (nothing is changed).
#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace mc::apps {

inline constexpr int malloc_mmap_threshold = 32 * 1024 * 1024;  // glibc's largest (HEAP_MAX_SIZE / 2)
inline constexpr int malloc_trim_threshold = 128 * 1024 * 1024;

/// Call first thing in main(), before any thread starts. Does nothing when
/// the environment already sets glibc's malloc thresholds.
inline void tune_malloc() {
  if (const char* t = std::getenv("GLIBC_TUNABLES"); t && std::strstr(t, "glibc.malloc.")) return;
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") || std::getenv("MALLOC_MMAP_THRESHOLD_")) return;
  ::mallopt(M_MMAP_THRESHOLD, malloc_mmap_threshold);
  ::mallopt(M_TRIM_THRESHOLD, malloc_trim_threshold);
}

}  // namespace mc::apps
