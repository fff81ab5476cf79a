// Same-host transport, initiator side: one item's bytes copied under a
// grant (process_vm_readv/writev, or memcpy through a mapping of the peer's
// shared memory), in chunks of at most 1 MiB with the lease checked before
// each (shm_transport.cpp has the protocol).
#include "shm_common.hpp"

#include <sys/uio.h>

#include <algorithm>

namespace mc::transfer::detail::shm {

void copy_mapped(engine_impl& eng, const peer_mapping& m, op_kind op, std::byte* local, std::byte* peer,
                 std::size_t n) {
  m.prepare(peer, n);
  if (op == op_kind::read)
    std::memcpy(local, peer, n);
  else
    std::memcpy(peer, local, n);
  bump(eng.counters_.shared_copies);
}

task<copy_end> copy_item(engine_impl& eng, pid_t pid, const transfer_item& it, std::uint64_t& done,
                         std::uint64_t lease_end_ns, const peer_mapping* m) {
  while (done < it.length) {
    // The lease is checked right before each chunk: a peer frozen between
    // this check and the system call is the documented residual window.
    if (monotonic_ns() >= lease_end_ns) co_return copy_end::lease_over;
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(max_copy_chunk, it.length - done));
    if (std::byte* p = m != nullptr ? m->at(it.address + done, want) : nullptr) {
      copy_mapped(eng, *m, it.op, it.local + done, p, want);
      done += want;
      if (done < it.length && !co_await yield_to_runtime()) co_return copy_end::cancelled;
      continue;
    }
    iovec l{it.local + done, want};
    iovec r{reinterpret_cast<void*>(static_cast<std::uintptr_t>(it.address + done)), want};
    ssize_t n = -1;
    if (eng.refuse_cma_for_tests_)
      errno = EPERM;
    else
      n = it.op == op_kind::read ? ::process_vm_readv(pid, &l, 1, &r, 1, 0) : ::process_vm_writev(pid, &l, 1, &r, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EPERM || errno == EACCES || errno == ENOSYS) co_return copy_end::refused;
      co_return copy_end::failed;  // ESRCH (peer gone), EFAULT
    }
    if (n == 0) co_return copy_end::failed;
    done += static_cast<std::uint64_t>(n);
    if (done < it.length && !co_await yield_to_runtime()) co_return copy_end::cancelled;
  }
  co_return copy_end::complete;
}

}  // namespace mc::transfer::detail::shm
