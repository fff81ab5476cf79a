// mc::store::client: what the client tells the master about its copies —
// versioned publishes, batched removal notices, superseded-copy drops and
// full re-publishes (resync). See "Consistency model" in the README.
#include "client_impl.hpp"
#include "mc/master/publish_call.hpp"
#include "mc/rpc/auth.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace mc::store {
namespace {
using std::memory_order::relaxed;
constexpr std::size_t republish_batch = 1024;
/// How long a master's publish call port that failed is left alone.
constexpr std::chrono::seconds publish_call_backoff{30};
/// The longest a publish call waits before the RPC takes over.
constexpr std::chrono::seconds publish_call_timeout{1};
}  // namespace

task<result<void>> client::impl::publish(const std::string& key, std::uint64_t size, std::uint64_t version,
                                         std::uint64_t tag) {
  std::vector<mc::master::publish_item> one{{key, size, version, tag}};
  auto r = co_await publish_many(std::move(one));
  co_return std::move(r.front());
}

task<std::vector<result<void>>> client::impl::publish_many(std::vector<mc::master::publish_item> items) {
  // Group commit: queue the items; whoever holds publish_flush sends every
  // queued item in one addReplicas. Concurrent puts (a batch) thus cost one
  // or two master calls, not one each; a batch's items wait as one.
  std::vector<std::shared_ptr<pending_publish>> mine;
  mine.reserve(items.size());
  {
    std::lock_guard lk(publish_mu);
    for (auto& it : items) {
      auto p = std::make_shared<pending_publish>();
      p->item = std::move(it);
      publish_queue.push_back(p);
      mine.push_back(std::move(p));
    }
  }
  std::vector<result<void>> out;
  out.reserve(mine.size());
  bool yielded = false;
  for (;;) {
    auto g = co_await publish_flush.lock();
    {
      std::lock_guard lk(publish_mu);
      const bool all = std::all_of(mine.begin(), mine.end(), [](const auto& p) { return p->outcome.has_value(); });
      if (all || !g) {
        for (auto& p : mine) out.push_back(p->outcome ? std::move(*p->outcome) : result<void>(g.error()));
        co_return out;
      }
    }
    if (!yielded) {
      // One turn of the runtime first: the commits that became runnable
      // with this one (the other items of a batch, started together) queue
      // their items before the queue is taken, so a batch publishes in one
      // master call instead of its first item alone and then the rest.
      yielded = true;
      co_await boost::asio::post(co_await boost::asio::this_coro::executor,
                                 boost::asio::as_tuple(boost::asio::use_awaitable));
    }
    co_await flush_publishes();
  }
}

task<void> client::impl::flush_publishes() {
  std::vector<std::shared_ptr<pending_publish>> batch;
  {
    std::lock_guard lk(publish_mu);
    auto n = std::min(publish_queue.size(), publish_batch_max);
    batch.assign(publish_queue.begin(), publish_queue.begin() + static_cast<std::ptrdiff_t>(n));
    publish_queue.erase(publish_queue.begin(), publish_queue.begin() + static_cast<std::ptrdiff_t>(n));
  }
  if (batch.empty()) co_return;
  std::vector<mc::master::publish_item> items;
  items.reserve(batch.size());
  for (auto& p : batch) items.push_back(p->item);
  stats.publish_batches.fetch_add(1, relaxed);
  stats.publishes.fetch_add(batch.size(), relaxed);
  auto r = co_await publish_items(std::move(items));
  std::vector<result<void>> outcomes(batch.size());
  if (!r || r->size() != batch.size()) {
    stats.master_errors.fetch_add(1, relaxed);
    for (auto& o : outcomes) o = r ? make_error_code(errc::rpc_fail) : r.error();
  } else {
    bool reregister = false;
    for (std::size_t k = 0; k < batch.size(); ++k) {
      auto& one = (*r)[k];
      if (!one && mc::is(one.error(), errc::client_not_found)) {
        reregister = true;
      } else if (!one && (mc::is(one.error(), errc::invalid_version) || mc::is(one.error(), errc::superseded))) {
        // invalid_version: the master has a newer entry of ours (a later
        // put's publish overtook this one) or this copy was already
        // superseded: the put stands, overtaken. superseded: another holder
        // has a newer value (a later put, or this publish came after its
        // requester gave up): this put lost. Either way the copy stays
        // unroutable: drop it unless a newer local value replaced it.
        stats.stale_publishes.fetch_add(1, relaxed);
        (void)backend->drop_superseded(batch[k]->item.key, batch[k]->item.version);
        if (mc::is(one.error(), errc::superseded)) outcomes[k] = one;
      } else {
        outcomes[k] = one;
      }
    }
    if (reregister) {
      registered = false;
      auto reg = co_await register_with_master(true);  // republishes everything held, these included
      for (std::size_t k = 0; k < batch.size(); ++k)
        if (!(*r)[k] && mc::is((*r)[k].error(), errc::client_not_found)) outcomes[k] = reg;
    }
  }
  // A put whose publish failed returns that error, so its copy must not
  // outlive it: kept, it would come back with this node's next re-publish
  // (after a failover the new leader remembers no newer write or remove of
  // the key), long after later puts or a remove completed. If the master did
  // record it (the reply was lost), the drop's removal notice clears that.
  for (std::size_t k = 0; k < batch.size(); ++k) {
    if (outcomes[k] || mc::is(outcomes[k].error(), errc::superseded)) continue;  // superseded: dropped above
    stats.failed_publishes.fetch_add(1, relaxed);
    (void)backend->drop_superseded(batch[k]->item.key, batch[k]->item.version);
  }
  std::lock_guard lk(publish_mu);
  for (std::size_t k = 0; k < batch.size(); ++k) batch[k]->outcome = std::move(outcomes[k]);
}

task<result<std::vector<result<void>>>> client::impl::publish_items(std::vector<mc::master::publish_item> items) {
  // Calls carry no credentials: with RPC authentication on, the RPC.
  auto ep = engine && !mc::rpc::auth_enabled() ? master.publish_call_endpoint() : std::string{};
  if (!ep.empty() && (ep != publish_call_failed || std::chrono::steady_clock::now() >= publish_call_retry_at)) {
    auto req = mc::master::encode_publish_call(id, epoch.load(), mc::master::publish_kind::put, items);
    if (req) {
      std::vector<std::byte> reply(mc::master::publish_answer_size(items.size()));
      // At most publish_call_timeout: a port that does not answer (a
      // partition, a firewall dropping it) delays the put by that much
      // before the RPC, not by a whole rpc_timeout.
      auto n = co_await engine->call(ep, *req, reply, std::min<mc::duration>(opts.rpc_timeout, publish_call_timeout));
      if (n) {
        if (auto out = mc::master::decode_publish_answer(std::span(reply).first(*n), items.size())) {
          stats.publish_calls.fetch_add(1, relaxed);
          if (ep == publish_call_failed) publish_call_failed.clear();
          co_return out;
        }
      } else if (mc::is(n.error(), errc::cancelled) || mc::is(n.error(), errc::shutting_down)) {
        co_return n.error();
      } else if (!mc::is(n.error(), errc::unavailable_in_current_status)) {
        // Not "no longer the leader" (the RPC below finds the new one, and
        // the next registration tells its port): the port itself failed.
        publish_call_failed = ep;
        publish_call_retry_at = std::chrono::steady_clock::now() + publish_call_backoff;
      }
    }
  }
  co_return co_await master.add_replicas(id, std::move(items), mc::master::publish_kind::put, epoch.load());
}

void client::impl::on_removed(const std::string& key, std::uint64_t version, tiered::removal_reason why) {
  // remove(): the master was told first (removeKey); nothing to send.
  if (why == tiered::removal_reason::removed) return;
  forget_route(key);
  if (resync_needed.load()) return;  // the coming resync covers it
  bool wake = false;
  {
    std::lock_guard lk(notices_mu);
    if (notices.size() >= opts.eviction_notice_queue) {
      notices.clear();
      notices.shrink_to_fit();
      resync_needed = true;
      stats.notice_overflows.fetch_add(1, relaxed);
      return;
    }
    notices.push_back({key, version});
    wake = notices.size() == notice_batch;
  }
  if (wake) wake_notice_loop();
}

void client::impl::wake_notice_loop() {
  // The timer belongs to executor(0): cancel it there (asio timers are not
  // thread-safe). A cancelled wait makes notice_loop drain at once.
  boost::asio::post(rt.executor(0), [t = notice_timer] { t->cancel(); });
}

void client::impl::apply_drops(const std::vector<mc::master::key_version>& drops) {
  for (auto& d : drops) {
    if (!check_key(d.key)) continue;
    // Removed only if our copy is not newer; the observer then queues the
    // notice that clears the master's superseded entry.
    if (backend->drop_superseded(d.key, d.version)) stats.superseded_drops.fetch_add(1, relaxed);
  }
}

task<void> client::impl::notice_loop() {
  for (;;) {
    notice_timer->expires_after(opts.eviction_notice_interval);
    (void)co_await notice_timer->async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    if (stopped) co_return;  // unregister_client removes all our entries anyway
    co_await drain_notices();
  }
}

task<void> client::impl::drain_notices() {
  {
    std::lock_guard lk(notices_mu);
    if (notices.empty()) co_return;
  }
  if (!registered || resync_needed) co_return;  // kept; a resync clears them
  auto lock = co_await resync_mu.lock();
  if (!lock) co_return;
  for (;;) {
    std::vector<mc::master::key_version> batch;
    {
      std::lock_guard lk(notices_mu);
      if (notices.empty() || resync_needed) co_return;
      auto n = std::min(notices.size(), notice_batch);
      batch.assign(std::make_move_iterator(notices.begin()), std::make_move_iterator(notices.begin() + n));
      notices.erase(notices.begin(), notices.begin() + n);
    }
    auto count = batch.size();
    auto r = co_await master.remove_replicas(id, std::move(batch));
    if (!r) {
      // Lost: the master may keep routes to copies we no longer hold. Resync.
      stats.master_errors.fetch_add(1, relaxed);
      resync_needed = true;
      co_return;
    }
    stats.notices_sent.fetch_add(count, relaxed);
    stats.notice_batches.fetch_add(1, relaxed);
  }
}

task<result<void>> client::impl::republish_all() {
  auto lock = co_await resync_mu.lock();
  if (!lock) co_return lock.error();
  // Before the snapshot: later evictions are queued normally and sent after
  // this republish (resync_mu); earlier notices are covered by the snapshot.
  resync_needed = false;
  {
    std::lock_guard lk(notices_mu);
    notices.clear();
  }
  auto e = backend->issue_version();  // larger than any epoch we used before, even across restarts
  epoch = e;
  auto held = backend->keys();
  std::vector<mc::master::publish_item> batch;
  for (std::size_t i = 0; i < held.size(); ++i) {
    batch.push_back({std::move(held[i].key), held[i].size, held[i].version, held[i].tag});
    if (batch.size() < republish_batch && i + 1 < held.size()) continue;
    auto sent = std::exchange(batch, {});
    auto r = co_await master.add_replicas(id, sent, mc::master::publish_kind::republish, e);
    if (!r) {
      resync_needed = true;
      co_return r.error();
    }
    for (std::size_t j = 0; j < sent.size(); ++j) {
      auto& one = (*r)[j];
      if (one) continue;
      if (mc::is(one.error(), errc::client_not_found)) {
        registered = false;
        co_return one.error();
      }
      // Superseded by a newer write elsewhere while we were away: drop it.
      if ((mc::is(one.error(), errc::invalid_version) || mc::is(one.error(), errc::superseded)) &&
          backend->drop_superseded(sent[j].key, sent[j].version))
        stats.superseded_drops.fetch_add(1, relaxed);
    }
  }
  auto fin = co_await master.finish_republish(id, e);
  if (!fin) {
    resync_needed = true;
    co_return fin.error();
  }
  stats.resyncs.fetch_add(1, relaxed);
  co_return result<void>{};
}

}  // namespace mc::store
