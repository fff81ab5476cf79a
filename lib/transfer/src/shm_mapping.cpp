// Same-host transport, initiator side: mappings of a peer's shared memory
// (one per process, cached per runtime thread; see shm_transport.cpp and
// lib/transfer/README.md "Shared memory").
#include "shm_common.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <memory>

namespace mc::transfer::detail::shm {
namespace {

/// Drops `u` from the thread's cache shared_map_ttl after `now` (unless
/// re-armed by a later use): a peer's memory that it freed is not kept
/// alive by us for longer (a copy in progress holds its mapping).
void arm_expiry(thread_state& ts, mapping_use& u, std::chrono::steady_clock::time_point now) {
  if (!ts.deadlines) ts.deadlines = mc::deadline_queue::make(ts.ex);
  u.expiry.remove();
  u.until = now + shared_map_ttl;
  ts.deadlines->add(
      u.expiry, u.until,
      [](void* arg) noexcept {
        auto* up = static_cast<mapping_use*>(arg);
        std::erase_if(up->owner->mappings, [&](const std::unique_ptr<mapping_use>& x) { return x.get() == up; });
      },
      &u);
}

/// Puts `m` into this thread's cache (the oldest entry goes when full).
std::shared_ptr<peer_mapping> use(thread_state& ts, std::shared_ptr<peer_mapping> m,
                                  std::chrono::steady_clock::time_point now) {
  if (ts.mappings.size() >= max_peer_mappings) ts.mappings.erase(ts.mappings.begin());
  auto& u = *ts.mappings.emplace_back(std::make_unique<mapping_use>());
  u.m = std::move(m);
  u.owner = &ts;
  arm_expiry(ts, u, now);
  return u.m;
}

}  // namespace

/// The mapping of the peer's shared memory a grant answer names (address
/// = its start there, length = its id; 0: none): from this thread's cache,
/// from another thread's (one mapping per process), or fetched now:
/// shm_map on this connection (the grant is live), the memfd it returns
/// checked (sealed against shrinking, as large as announced) and mapped.
/// Null: copy with process_vm_* (no shared memory, or the peer refused /
/// the mapping failed: not asked again for 30 s). An error: the
/// connection is unusable.
task<result<std::shared_ptr<peer_mapping>>> mapping_for(engine_impl& eng, thread_state& ts, pooled_conn<unix_socket>& c,
                                                        const header& grant) {
  using ptr = std::shared_ptr<peer_mapping>;
  const std::uint64_t id = grant.length, base = grant.address;
  if (!names_mapping(grant) || eng.refuse_cma_for_tests_) co_return ptr{};
  const auto now = std::chrono::steady_clock::now();
  auto same = [&](const peer_mapping& m) {
    return m.instance == c.peer_instance && m.id == id && m.remote_base == base;
  };
  // This thread's cache, else the process's mappings (another thread's).
  auto known = [&]() -> ptr {
    for (auto& u : ts.mappings)
      if (same(*u->m)) {
        // In use: kept for shared_map_ttl after its last use (re-armed at
        // most every ttl / 2).
        if (now + shared_map_ttl / 2 > u->until) arm_expiry(ts, *u, now);
        return u->m;
      }
    std::lock_guard lk(eng.shared_maps_m_);
    for (auto& w : eng.shared_maps_)
      if (auto m = w.lock(); m && same(*m)) return use(ts, std::move(m), now);
    return ptr{};
  };
  if (auto m = known()) co_return m;
  std::erase_if(ts.unmappable, [&](const auto& u) { return u.second <= now; });
  for (auto& u : ts.unmappable)
    if (u.first == std::pair{c.peer_instance, id}) co_return ptr{};
  auto give_up = [&] {
    if (ts.unmappable.size() >= max_peer_mappings) ts.unmappable.erase(ts.unmappable.begin());
    ts.unmappable.emplace_back(std::pair{c.peer_instance, id}, now + std::chrono::seconds(30));
    return ptr{};
  };
  header req;
  req.op = wire_op::shm_map;
  req.request_id = c.next_id++;
  req.address = grant.request_id;
  req.token = id;
  if (auto s = co_await send_header(c.sock, req); !s) co_return s.error();
  unique_fd fd;
  auto resp = co_await recv_header_fd(c.sock, fd);
  if (!resp) co_return resp.error();
  if (resp->op != wire_op::shm_map_resp || resp->request_id != req.request_id) co_return fail(errc::transfer_fail);
  if (resp->status != 0 || fd.get() < 0 || resp->token != id || resp->address != base || resp->length == 0)
    co_return give_up();
  // Sealed against shrinking (no SIGBUS for a copy through the mapping)
  // and as large as announced.
  struct stat st {};
  const int seals = ::fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK) || ::fstat(fd.get(), &st) != 0 ||
      static_cast<std::uint64_t>(st.st_size) < resp->length)
    co_return give_up();
  // Another claimer of this thread, or another thread, may have mapped it
  // while we waited for the descriptor: one mapping per process.
  if (auto m = known()) co_return m;
  const auto len = static_cast<std::size_t>(resp->length);
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) co_return give_up();
  auto m = std::make_shared<peer_mapping>();
  m->instance = c.peer_instance;
  m->id = id;
  m->remote_base = base;
  m->local = static_cast<std::byte*>(p);
  m->len = len;
  m->ready = std::make_unique<std::atomic<bool>[]>((len + peer_mapping::block - 1) / peer_mapping::block);
  bump(eng.counters_.shared_mappings);
  {
    std::lock_guard lk(eng.shared_maps_m_);
    std::erase_if(eng.shared_maps_, [](const std::weak_ptr<peer_mapping>& w) { return w.expired(); });
    eng.shared_maps_.push_back(m);
  }
  co_return use(ts, std::move(m), now);
}

}  // namespace mc::transfer::detail::shm
