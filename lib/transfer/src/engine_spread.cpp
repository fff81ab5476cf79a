// TransferEngine: a large same-host or in-process batch to one peer cut into
// parts moved concurrently by several runtime threads (engine_options::
// spread_bytes; lib/transfer/README.md "Several cores per large same-host
// batch").
#include "engine_impl.hpp"
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/when_all.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <array>
#include <atomic>

namespace mc::transfer::detail {

std::size_t engine_impl::spread_parts(thread_state& ts, const std::string& endpoint,
                                      const std::vector<transfer_item*>& items) const {
  using tk = transport_kind;
  if (opts_.spread_bytes == 0 || threads_.size() < 2) return 1;
  // Only copies this process makes alone: same-host (process_vm_*) and
  // in-process. Over TCP the kernel's work is split between both ends
  // already, and a second sending thread only contended with the receiver
  // (loopback, 2 cores: sglang/vllm batches 7-25 % slower); RDMA is the
  // NIC's work. Auto mode: not towards a peer this thread knows is not
  // on this host.
  if (opts_.force) {
    if (*opts_.force != tk::same_host && *opts_.force != tk::in_process) return 1;
  } else {
    if (rdma_) return 1;
    const bool local = (opts_.enable_in_process && inproc_lookup(endpoint)) ||
                       (opts_.enable_same_host && !ts.not_same_host.get(endpoint, std::chrono::steady_clock::now()));
    if (!local) return 1;
  }
  std::uint64_t total = 0;
  for (auto* it : items) total += it->length;
  return static_cast<std::size_t>(std::min<std::uint64_t>(threads_.size(), total / opts_.spread_bytes));
}

task<void> engine_impl::run_group_spread(thread_state& ts, std::string endpoint, std::vector<transfer_item*> items) {
  const std::size_t n = spread_parts(ts, endpoint, items);
  if (n <= 1) {
    co_await run_group(ts, endpoint, std::move(items));
    co_return;
  }
  // The group's bytes in order, cut into chunks of about chunk bytes
  // (spread_chunk); an item across a cut becomes two sub-items (copies with
  // the offsets moved). origin[k][j]: the item chunk k's j-th sub-item
  // belongs to. The n threads, claimers_per_thread claimers each, claim
  // chunks in order until none is left, so a thread slowed down (a core
  // shared with the target's grant thread, a preemption) takes fewer: all
  // end together.
  std::uint64_t total = 0;
  for (auto* it : items) total += it->length;
  const std::uint64_t chunk = spread_chunk(opts_.spread_bytes, total, claimers_per_thread * n);
  const std::size_t count = static_cast<std::size_t>((total + chunk - 1) / chunk);
  std::vector<std::vector<transfer_item>> parts(count);
  std::vector<std::vector<std::size_t>> origin(count);
  for (std::size_t p = 0; p < count; ++p) {  // about this many each (one more per cut inside an item)
    parts[p].reserve(items.size() / count + 2);
    origin[p].reserve(items.size() / count + 2);
  }
  std::size_t k = 0;
  std::uint64_t in_part = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto* it = items[i];
    for (std::uint64_t off = 0; off < it->length;) {
      if (in_part >= chunk && k + 1 < count) {
        ++k;
        in_part = 0;
      }
      const auto take = k + 1 < count ? std::min(it->length - off, chunk - in_part) : it->length - off;
      transfer_item sub = *it;
      sub.local = it->local + off;
      sub.address = it->address + off;
      sub.length = take;
      sub.more_follow = true;
      parts[k].push_back(sub);
      origin[k].push_back(i);
      off += take;
      in_part += take;
    }
  }
  spread_claims claims;
  for (auto& part : parts) {
    if (part.empty()) continue;  // (not with chunks of >= spread_bytes >= 64 KiB; kept safe)
    auto& ptrs = claims.chunks.emplace_back();
    for (auto& sub : part) ptrs.push_back(&sub);
  }
  const auto here = static_cast<std::size_t>(mc::runtime::runtime::current_index());
  std::vector<task<int>> work;
  for (std::size_t j = 0; j < claimers_per_thread; ++j)
    work.push_back([](engine_impl* self, thread_state* t, std::string e, spread_claims* c) -> task<int> {
      co_await self->run_claims(*t, e, *c, nullptr);
      co_return 0;
    }(this, &ts, endpoint, &claims));
  for (std::size_t p = 1; p < n; ++p) work.push_back(run_part_on((here + p) % threads_.size(), endpoint, &claims));
  co_await mc::when_all(std::move(work));
  // An item succeeded when all its sub-items did; the first error of one
  // fails it; a sub-item left unfinished leaves it unfinished (the batch
  // then reports timeout / cancelled / shutting_down for it).
  enum : std::uint8_t { ok, unfinished, failed };
  std::vector<std::uint8_t> state(items.size(), ok);
  for (std::size_t p = 0; p < count; ++p)
    for (std::size_t j = 0; j < parts[p].size(); ++j) {
      const auto& sub = parts[p][j];
      auto* whole = items[origin[p][j]];
      auto& st = state[origin[p][j]];
      whole->via = sub.via;
      if (!sub.done || mc::is(sub.ec, errc::cancelled)) {
        if (st == ok) st = unfinished;
      } else if (sub.ec && st != failed) {
        st = failed;
        whole->ec = sub.ec;
      }
    }
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (state[i] == ok) items[i]->finish({});
    if (state[i] == failed) items[i]->done = true;  // ec set above
  }
}

task<void> engine_impl::run_claims(thread_state& ts, const std::string& endpoint, spread_claims& c,
                                   std::size_t* current) {
  for (;;) {
    if (c.stop.load(std::memory_order_acquire)) break;
    const auto k = c.next.fetch_add(1, std::memory_order_relaxed);
    if (k >= c.chunks.size()) break;
    if (current) *current = k;
    co_await run_group(ts, endpoint, c.chunks[k]);
    // A chunk left unfinished (cancelled, the deadline, shutting down): no
    // thread claims another one.
    if (std::any_of(c.chunks[k].begin(), c.chunks[k].end(), [](const transfer_item* it) { return !it->done; })) {
      c.stop.store(true, std::memory_order_release);
      break;
    }
  }
  // The chunks' releases still held back for a next window (more_follow):
  // sent before the batch reports its results.
  if (shm_) co_await shm_->flush_deferred(ts, endpoint);
}

task<int> engine_impl::run_part_on(std::size_t thread, std::string endpoint, spread_claims* claims) {
  // On its own thread the claims are bounded by the batch's deadline: the
  // caller's cancellation is not forwarded across threads (the wait below
  // is bound to an empty cancellation slot), so the caller waits for it,
  // and the sub-items it points to stay alive until it has ended. The
  // caller's thread stops the others' claiming when it is cancelled.
  auto body = [](engine_impl* self, std::size_t t, std::string e, spread_claims* c) -> task<int> {
    const auto deadline = c->chunks.front().front()->deadline;
    std::array<std::size_t, claimers_per_thread> current;  // the chunks this thread's claimers are moving
    current.fill(c->chunks.size());
    auto run = [](engine_impl* s, thread_state* ts, std::string ep, spread_claims* cl,
                  std::size_t* cur) -> task<mc::result<void>> {
      std::vector<task<int>> claimers;
      for (std::size_t j = 0; j < claimers_per_thread; ++j)
        claimers.push_back([](engine_impl* s2, thread_state* t2, const std::string* ep2, spread_claims* c2,
                              std::size_t* cur2) -> task<int> {
          co_await s2->run_claims(*t2, *ep2, *c2, cur2);
          co_return 0;
        }(s, ts, &ep, cl, cur + j));
      co_await mc::when_all(std::move(claimers));
      co_return mc::result<void>{};
    };
    auto r =
        co_await mc::with_deadline_at(run(self, self->threads_[t].get(), std::move(e), c, current.data()), deadline);
    if (!r && mc::is(r.error(), errc::timeout)) {
      c->stop.store(true, std::memory_order_release);
      for (auto k : current)
        if (k < c->chunks.size())
          for (auto* it : c->chunks[k]) it->finish(make_error_code(errc::timeout));
    }
    co_return 0;
  };
  const int done = co_await boost::asio::co_spawn(
      rt_.executor(thread), body(this, thread, std::move(endpoint), claims),
      boost::asio::bind_cancellation_slot(boost::asio::cancellation_slot(), boost::asio::use_awaitable));
  co_return done;
}

}  // namespace mc::transfer::detail
