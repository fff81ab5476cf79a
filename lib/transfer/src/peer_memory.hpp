#pragma once
// Bytes that a peer moves into or out of registered memory - the target's
// recv into a region, its send from one, the in-process copy - are ordered
// with the region owner's own accesses only through the network (the RPC
// reply that follows the transfer), which ThreadSanitizer cannot see: it would
// report every such transfer as a data race. In TSan builds these accesses
// are ignored, exactly as the kernel's own writes into a buffer are. The
// scope must never span a co_await. No effect in other builds.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#endif

namespace mc::transfer::detail {

class peer_memory_scope {
 public:
#if defined(__SANITIZE_THREAD__)
  peer_memory_scope() noexcept { __tsan_ignore_thread_begin(); }
  ~peer_memory_scope() { __tsan_ignore_thread_end(); }
#else
  // User-provided (not defaulted): a scope object is never "unused".
  peer_memory_scope() noexcept {}
  ~peer_memory_scope() {}
#endif
  peer_memory_scope(const peer_memory_scope&) = delete;
  peer_memory_scope& operator=(const peer_memory_scope&) = delete;
};

}  // namespace mc::transfer::detail
