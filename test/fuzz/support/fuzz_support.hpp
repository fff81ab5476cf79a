// Shared by the libFuzzer targets (test/fuzz): memory a target hands to the
// code under test, laid out so that any access outside it is caught even
// where AddressSanitizer would not see it (a kernel copy such as
// process_vm_writev, or a write through a mapping ASan does not track).
//
// guarded_memory: the usable bytes end exactly at a PROT_NONE page and start
// right after another, so a read or write one byte past either end faults.
// canary_memory: bytes the code must never touch, filled with a pattern that
// intact() re-checks after each input.
// handler_stats: calls and outcomes per RPC method, printed at exit when the
// environment variable MC_FUZZ_STATS is set (test/fuzz/rpc/README.md).
//
// Thread-safety: none; each object belongs to one fuzz iteration's thread.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <span>
#include <string>

namespace mc::fuzz {

// Aborts (a fuzz finding) when the system refuses: a fuzz target has no
// caller to return an error to.
inline void require(bool ok, const char* what) {
  if (!ok) {
    ::perror(what);
    ::abort();
  }
}

class guarded_memory {
 public:
  explicit guarded_memory(std::size_t size) : size_(size) {
    const auto page = std::size_t(::sysconf(_SC_PAGESIZE));
    const std::size_t body = (size + page - 1) / page * page;
    map_len_ = body + 2 * page;
    void* m = ::mmap(nullptr, map_len_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    require(m != MAP_FAILED, "guarded_memory mmap");
    map_ = static_cast<std::byte*>(m);
    require(::mprotect(map_ + page, body, PROT_READ | PROT_WRITE) == 0, "guarded_memory mprotect");
    // Flush against the trailing guard page: an overrun faults at once.
    data_ = map_ + page + (body - size);
  }
  guarded_memory(const guarded_memory&) = delete;
  guarded_memory& operator=(const guarded_memory&) = delete;
  ~guarded_memory() { ::munmap(map_, map_len_); }

  std::byte* data() { return data_; }
  std::size_t size() const { return size_; }
  std::span<std::byte> span() { return {data_, size_}; }

 private:
  std::byte* map_ = nullptr;
  std::size_t map_len_ = 0;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

class canary_memory {
 public:
  explicit canary_memory(std::size_t size, std::uint8_t pattern = 0xa5) : mem_(size), pattern_(pattern) {
    std::memset(mem_.data(), pattern_, size);
  }
  std::byte* data() { return mem_.data(); }
  std::size_t size() const { return mem_.size(); }
  // True while no byte was written.
  bool intact() {
    for (std::size_t i = 0; i < mem_.size(); ++i)
      if (std::to_integer<std::uint8_t>(mem_.data()[i]) != pattern_) return false;
    return true;
  }

 private:
  guarded_memory mem_;
  std::uint8_t pattern_;
};

/// Calls and outcomes per handler; printed at exit with MC_FUZZ_STATS set.
class handler_stats {
 public:
  explicit handler_stats(const char* target) : target_(target) {}
  ~handler_stats() {
    if (!std::getenv("MC_FUZZ_STATS")) return;
    std::fprintf(stderr, "handler stats (%s): method calls reached ok\n", target_);
    for (auto& [name, c] : counts_)
      std::fprintf(stderr, "  %-22s %8llu %8llu %8llu\n", name.c_str(), static_cast<unsigned long long>(c.calls),
                   static_cast<unsigned long long>(c.reached), static_cast<unsigned long long>(c.ok));
  }
  /// A call was made; `reached`: it got past the early checks into the
  /// handler's work (the target decides what that means per method); `ok`:
  /// it succeeded.
  void record(const std::string& method, bool reached, bool ok) {
    auto& c = counts_[method];
    ++c.calls;
    c.reached += reached ? 1 : 0;
    c.ok += ok ? 1 : 0;
  }

 private:
  struct count {
    std::uint64_t calls = 0, reached = 0, ok = 0;
  };
  const char* target_;
  std::map<std::string, count> counts_;
};

}  // namespace mc::fuzz
