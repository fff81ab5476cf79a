// mc::python::store_session: the embedded node and its calls (see session.hpp).
#include "session.hpp"

#include "mc/rpc/client.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/runtime/when_all.hpp"
#include "mc/store/attached_client.hpp"
#include "mc/store/data_manager.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/post.hpp>

#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <future>

namespace mc::python {

namespace {

std::atomic<std::uint64_t> g_fork_generation{1};
std::once_flag g_atfork_once;

void on_fork_child() noexcept { g_fork_generation.fetch_add(1, std::memory_order_relaxed); }

/// Our errc values are Mooncake's ErrorCode numbers (a system error is
/// INTERNAL_ERROR, asio's timeouts and aborts TIMEOUT / CANCELLED).
int code(const boost::system::error_code& ec) { return static_cast<int>(mc::to_errc(ec)); }

constexpr int e(errc c) { return static_cast<int>(c); }

}  // namespace

struct store_session::node {
  std::unique_ptr<mc::runtime::runtime> rt;
  std::unique_ptr<mc::store::client> client;             ///< setup(): the embedded node
  std::unique_ptr<mc::store::attached_client> attached;  ///< setup_dummy(): a node of this host
  bool pure_client = false;                              ///< global_segment_size 0: puts go to peers
  std::atomic<std::size_t> next_thread{0};

  // Calls in flight; close() waits for them after setting `closing`.
  std::mutex mu;
  std::condition_variable idle;
  std::size_t inflight = 0;
  bool closing = false;

  // register_buffer(): address -> registration.
  std::mutex regs_mu;
  std::map<std::uintptr_t, std::pair<std::size_t, mc::transfer::region>> regs;

  mc::executor next_executor() {
    auto i = next_thread.fetch_add(1, std::memory_order_relaxed) % rt->size();
    return rt->executor(i);
  }
};

store_session::store_session() {
  std::call_once(g_atfork_once, [] { ::pthread_atfork(nullptr, nullptr, &on_fork_child); });
}

store_session::~store_session() { close(); }

int store_session::start_node(std::size_t threads, const std::function<int(node&, std::string*)>& start,
                              std::string* why) {
  std::lock_guard lk(mu_);
  if (node_ && generation_ == g_fork_generation.load(std::memory_order_relaxed) && !node_->closing) {
    if (why) *why = "the store is already set up (close() it first)";
    return e(errc::invalid_params);
  }
  if (node_ && generation_ != g_fork_generation.load(std::memory_order_relaxed)) {
    // Inherited across fork(): its threads do not exist here. Forget it.
    new std::shared_ptr<node>(std::move(node_));  // intentionally leaked
  }
  node_.reset();
  auto n = std::make_shared<node>();
  n->rt = std::make_unique<mc::runtime::runtime>(std::max<std::size_t>(2, threads));
  n->rt->start();
  if (int rc = start(*n, why); rc != 0) {
    mc::rpc::shutdown(*n->rt);
    n->rt->stop();
    return rc;
  }
  generation_ = g_fork_generation.load(std::memory_order_relaxed);
  node_ = std::move(n);
  return 0;
}

int store_session::setup(setup_config cfg, std::string* why) {
  auto threads = cfg.opts.rpc_thread_num;
  return start_node(
      threads,
      [&](node& n, std::string* why) {
        n.pure_client = cfg.global_segment_size == 0;
        std::string reason;
        auto c = mc::store::client::start(*n.rt, std::move(cfg.opts), &reason);
        if (!c) {
          if (why) *why = reason.empty() ? c.error().message() : reason;
          return code(c.error());
        }
        n.client = std::move(*c);
        hostname_ = cfg.hostname.empty() ? n.client->rpc_endpoint() : cfg.hostname;
        return 0;
      },
      why);
}

int store_session::setup_dummy(std::uint64_t local_buffer_size, std::string server_address, std::string* why) {
  return start_node(
      2,
      [&](node& n, std::string* why) {
        mc::store::attach_options o;
        o.local_buffer_bytes = local_buffer_size;
        std::string reason;
        auto a = mc::store::attached_client::connect(*n.rt, server_address, o, &reason);
        if (!a) {
          if (why) *why = reason.empty() ? a.error().message() : reason;
          return code(a.error());
        }
        n.attached = std::move(*a);
        hostname_ = server_address;
        return 0;
      },
      why);
}

int store_session::close() {
  std::shared_ptr<node> n;
  {
    std::lock_guard lk(mu_);
    n = std::move(node_);
    node_.reset();
    if (!n) return 0;
    if (generation_ != g_fork_generation.load(std::memory_order_relaxed)) {
      new std::shared_ptr<node>(std::move(n));  // inherited across fork(): intentionally leaked
      return 0;
    }
  }
  {
    std::unique_lock lk(n->mu);
    n->closing = true;
    n->idle.wait(lk, [&] { return n->inflight == 0; });
  }
  {
    std::lock_guard lk(n->regs_mu);
    n->regs.clear();
  }
  if (n->client) n->client->stop();
  if (n->attached) n->attached->stop();
  n->client.reset();
  n->attached.reset();
  mc::rpc::shutdown(*n->rt);
  n->rt->stop();
  return 0;
}

std::string store_session::hostname() const {
  auto* self = const_cast<store_session*>(this);
  std::lock_guard lk(self->mu_);
  return hostname_;
}

std::shared_ptr<store_session::node> store_session::enter() {
  std::shared_ptr<node> n;
  {
    std::lock_guard lk(mu_);
    if (!node_ || generation_ != g_fork_generation.load(std::memory_order_relaxed)) return nullptr;
    n = node_;
  }
  std::lock_guard lk(n->mu);
  if (n->closing) return nullptr;
  ++n->inflight;
  return n;
}

void store_session::leave(node& n) {
  std::lock_guard lk(n.mu);
  if (--n.inflight == 0 && n.closing) n.idle.notify_all();
}

int store_session::health_check() {
  auto n = enter();
  if (!n) return hc_not_initialized;
  // An attached session is healthy while its node answers (calls report
  // errors otherwise); an embedded node while it is registered.
  bool registered = n->attached || n->client->stats().registered;
  leave(*n);
  return registered ? hc_healthy : hc_master_unreachable;
}

bool store_session::run(const std::function<task<void>(node&)>& make) {
  auto n = enter();
  if (!n) return false;
  std::promise<void> done;
  auto fut = done.get_future();
  boost::asio::co_spawn(n->next_executor(), make(*n), [&done](std::exception_ptr ep) {
    if (ep)
      done.set_exception(ep);
    else
      done.set_value();
  });
  try {
    fut.get();
  } catch (...) {
    leave(*n);
    throw;
  }
  leave(*n);
  return true;
}

namespace {

class spawned_op final : public async_op {
 public:
  explicit spawned_op(mc::executor ex) : ex_(std::move(ex)) {}
  void cancel() override {
    // The signal belongs to the operation's thread: emit it there.
    boost::asio::post(ex_, [self = std::weak_ptr<spawned_op>(self_)] {
      if (auto s = self.lock(); s && !s->finished_) s->signal_.emit(boost::asio::cancellation_type::terminal);
    });
  }
  mc::executor ex_;
  boost::asio::cancellation_signal signal_;
  bool finished_ = false;  // touched on ex_'s thread only
  std::weak_ptr<spawned_op> self_;
};

}  // namespace

std::shared_ptr<async_op> store_session::spawn(const std::function<task<void>(node&)>& make,
                                               std::function<void()> done) {
  auto n = enter();
  if (!n) return nullptr;
  auto op = std::make_shared<spawned_op>(n->next_executor());
  op->self_ = op;
  auto t = make(*n);
  boost::asio::co_spawn(
      op->ex_, std::move(t),
      boost::asio::bind_cancellation_slot(
          op->signal_.slot(), [this_ = shared_from_this(), n, op, done = std::move(done)](std::exception_ptr) mutable {
            op->finished_ = true;
            done();
            this_->leave(*n);
          }));
  return op;
}

// ---- Operations ------------------------------------------------------------

namespace {

// The embedded node or the attached one (setup_dummy): the same calls.
using node = store_session::node;

task<std::vector<result<bool>>> exists_batch(node& n, std::vector<std::string> keys) {
  if (n.attached) co_return co_await n.attached->batch_exists(std::move(keys));
  co_return co_await n.client->batch_exists(std::move(keys));
}

task<std::vector<result<void>>> put_batch(node& n, std::vector<std::string> keys,
                                          std::vector<std::vector<std::span<const std::byte>>> values,
                                          mc::store::put_options opts) {
  if (n.attached) co_return co_await n.attached->batch_put_parts(std::move(keys), std::move(values));
  co_return co_await n.client->batch_put_parts(std::move(keys), std::move(values), std::move(opts));
}

task<std::vector<result<std::size_t>>> get_batch(node& n, std::vector<std::string> keys,
                                                 std::vector<std::vector<std::span<std::byte>>> pieces) {
  if (n.attached) co_return co_await n.attached->batch_get_parts(std::move(keys), std::move(pieces));
  co_return co_await n.client->batch_get_parts(std::move(keys), std::move(pieces));
}

task<result<void>> remove_one(node& n, std::string key) {
  if (n.attached) co_return co_await n.attached->remove(std::move(key));
  co_return co_await n.client->remove(std::move(key));
}

/// Mooncake's put keeps an existing key. The keys to write: those that do not
/// exist anywhere (a lookup error counts as absent: the put then decides).
task<std::vector<bool>> absent_keys(node& n, const std::vector<std::string>& keys) {
  std::vector<bool> absent(keys.size(), true);
  auto ex = co_await exists_batch(n, keys);
  for (std::size_t i = 0; i < keys.size() && i < ex.size(); ++i)
    if (ex[i] && *ex[i]) absent[i] = false;
  co_return absent;
}

mc::store::put_options put_opts(bool pure_client) {
  mc::store::put_options o;
  if (pure_client) o.where = mc::store::placement::remote;
  return o;
}

}  // namespace

task<int> store_session::op_put_parts(node& n, std::string key, std::vector<std::span<const std::byte>> pieces,
                                      put_how how) {
  // (Named vectors: gcc 12 destroys braced temporaries passed to a coroutine twice.)
  std::vector<std::string> keys;
  keys.push_back(std::move(key));
  std::vector<std::vector<std::span<const std::byte>>> values;
  values.push_back(std::move(pieces));
  auto results = co_await op_batch_put_parts(n, std::move(keys), std::move(values), how);
  co_return results.empty() ? e(errc::internal_error) : results[0];
}

task<std::vector<int>> store_session::op_batch_put_parts(node& n, std::vector<std::string> keys,
                                                         std::vector<std::vector<std::span<const std::byte>>> values,
                                                         put_how how) {
  std::vector<int> out(keys.size(), e(errc::invalid_params));
  if (keys.size() != values.size() || how.replicas == 0) co_return out;
  if (how.replicas > 1 && n.attached) {
    out.assign(keys.size(), e(errc::unsupported));
    co_return out;
  }
  std::vector<bool> todo(keys.size(), true);
  if (!how.upsert) todo = co_await absent_keys(n, keys);
  std::vector<std::size_t> idx;
  std::vector<std::string> k2;
  std::vector<std::vector<std::span<const std::byte>>> v2;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (!todo[i]) {
      out[i] = 0;  // kept: KV blocks are content-addressed
      continue;
    }
    idx.push_back(i);
    k2.push_back(std::move(keys[i]));
    v2.push_back(std::move(values[i]));
  }
  if (idx.empty()) co_return out;
  auto opts = put_opts(n.pure_client);
  opts.replicas = how.replicas;
  auto r = co_await put_batch(n, std::move(k2), std::move(v2), opts);
  for (std::size_t j = 0; j < idx.size() && j < r.size(); ++j) out[idx[j]] = r[j] ? 0 : code(r[j].error());
  co_return out;
}

task<std::int64_t> store_session::op_get_parts(node& n, std::string key, std::vector<std::span<std::byte>> pieces) {
  if (n.client) {
    auto r = co_await n.client->get_parts(std::move(key), std::move(pieces));
    if (!r) co_return code(r.error());
    co_return static_cast<std::int64_t>(*r);
  }
  std::vector<std::string> keys;
  keys.push_back(std::move(key));
  std::vector<std::vector<std::span<std::byte>>> all;
  all.push_back(std::move(pieces));
  auto r = co_await get_batch(n, std::move(keys), std::move(all));
  if (r.empty()) co_return e(errc::internal_error);
  if (!r[0]) co_return code(r[0].error());
  co_return static_cast<std::int64_t>(*r[0]);
}

task<std::vector<std::int64_t>> store_session::op_batch_get_parts(
    node& n, std::vector<std::string> keys, std::vector<std::vector<std::span<std::byte>>> pieces) {
  std::vector<std::int64_t> out(keys.size(), e(errc::invalid_params));
  if (keys.size() != pieces.size()) co_return out;
  auto r = co_await get_batch(n, std::move(keys), std::move(pieces));
  for (std::size_t i = 0; i < out.size() && i < r.size(); ++i)
    out[i] = r[i] ? static_cast<std::int64_t>(*r[i]) : code(r[i].error());
  co_return out;
}

task<std::int64_t> store_session::op_get_size(node& n, std::string key) {
  if (n.attached) {
    auto z = co_await n.attached->size_of(std::move(key));
    if (!z) co_return code(z.error());
    co_return static_cast<std::int64_t>(*z);
  }
  if (auto local = n.client->data().size_of(key); local) co_return static_cast<std::int64_t>(*local);
  auto q = co_await n.client->query(std::move(key));
  if (!q) co_return code(q.error());
  co_return static_cast<std::int64_t>(q->size);
}

task<std::vector<result<owned_buffer>>> store_session::op_batch_get_owned(node& n, std::vector<std::string> keys) {
  // Sizes first, all at once (local ones without a round trip; one after
  // the other they cost a round trip each, and a timeout each when owners
  // are cut off: found by the chaos soak, a batch of 5 keys taking 24 s),
  // then one batch read; a value that grew in between is read again once at
  // its new size.
  std::vector<result<owned_buffer>> out;
  out.reserve(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) out.emplace_back(fail(errc::object_not_found));
  std::vector<std::size_t> todo(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) todo[i] = i;
  for (int attempt = 0; attempt < 2 && !todo.empty(); ++attempt) {
    std::vector<std::string> k2;
    std::vector<std::vector<std::span<std::byte>>> bufs;
    std::vector<std::size_t> idx;
    std::vector<task<std::int64_t>> sizes;
    sizes.reserve(todo.size());
    for (auto i : todo) sizes.push_back(op_get_size(n, keys[i]));
    auto got = co_await mc::when_all(std::move(sizes));
    for (std::size_t t = 0; t < todo.size(); ++t) {
      const auto i = todo[t];
      const auto sz = t < got.size() ? got[t] : static_cast<std::int64_t>(e(errc::internal_error));
      if (sz < 0) {
        out[i] = fail(static_cast<errc>(sz));
        continue;
      }
      owned_buffer b;
      b.size = static_cast<std::size_t>(sz);
      b.data.reset(new std::byte[std::max<std::size_t>(b.size, 1)]);
      bufs.push_back({std::span<std::byte>(b.data.get(), b.size)});
      out[i] = std::move(b);
      idx.push_back(i);
      k2.push_back(keys[i]);
    }
    todo.clear();
    if (idx.empty()) break;
    auto r = co_await get_batch(n, std::move(k2), std::move(bufs));
    for (std::size_t j = 0; j < idx.size(); ++j) {
      auto i = idx[j];
      if (j >= r.size()) {
        out[i] = fail(errc::internal_error);
      } else if (r[j]) {
        out[i]->size = *r[j];  // a value that shrank meanwhile
      } else if (mc::is(r[j].error(), errc::buffer_overflow) && attempt == 0) {
        todo.push_back(i);
      } else {
        out[i] = r[j].error();
      }
    }
  }
  co_return out;
}

task<std::vector<int>> store_session::op_batch_exists(node& n, std::vector<std::string> keys) {
  auto r = co_await exists_batch(n, std::move(keys));
  std::vector<int> out;
  out.reserve(r.size());
  for (auto& x : r) out.push_back(x ? (*x ? 1 : 0) : code(x.error()));
  co_return out;
}

task<int> store_session::op_remove(node& n, std::string key) {
  auto r = co_await remove_one(n, std::move(key));
  co_return r ? 0 : code(r.error());
}

task<std::vector<int>> store_session::op_batch_remove(node& n, std::vector<std::string> keys) {
  std::vector<task<result<void>>> all;
  all.reserve(keys.size());
  for (auto& k : keys) all.push_back(remove_one(n, k));
  auto r = co_await mc::when_all(std::move(all));
  std::vector<int> out;
  out.reserve(r.size());
  for (auto& x : r) out.push_back(x ? 0 : code(x.error()));
  co_return out;
}

task<std::int64_t> store_session::op_remove_matching(node& n, std::string pattern, bool all) {
  if (n.attached) co_return e(errc::unsupported);  // standalone mode: see the README
  auto r = co_await n.client->remove_matching(std::move(pattern), all);
  if (!r) co_return code(r.error());
  co_return static_cast<std::int64_t>(*r);
}

task<int> store_session::op_remove_local(node& n, std::string key) {
  if (n.attached) co_return e(errc::unsupported);
  auto r = co_await n.client->remove_local(std::move(key));
  co_return r ? 0 : code(r.error());
}

task<std::int64_t> store_session::op_remove_all_local(node& n) {
  if (n.attached) co_return e(errc::unsupported);
  auto r = co_await n.client->remove_all_local();
  if (!r) co_return code(r.error());
  co_return static_cast<std::int64_t>(*r);
}

// ---- Registrations -----------------------------------------------------------

int store_session::register_buffer(std::uintptr_t ptr, std::size_t size) {
  if (ptr == 0 || size == 0 || ptr + size < ptr) return e(errc::invalid_params);
  auto n = enter();
  if (!n) return e(errc::unavailable_in_current_status);
  int rc = 0;
  {
    std::lock_guard lk(n->regs_mu);
    // Refuse an overlap with an existing registration (the next one at or
    // after ptr, and the one before it).
    auto after = n->regs.lower_bound(ptr);
    bool overlap = (after != n->regs.end() && after->first < ptr + size) ||
                   (after != n->regs.begin() && std::prev(after)->first + std::prev(after)->second.first > ptr);
    if (overlap) {
      rc = e(errc::invalid_params);
    } else {
      std::span<std::byte> mem{reinterpret_cast<std::byte*>(ptr), size};
      auto r = n->attached ? n->attached->register_buffer(mem) : n->client->register_buffer(mem);
      if (!r)
        rc = code(r.error());
      else
        n->regs.emplace(ptr, std::make_pair(size, std::move(*r)));
    }
  }
  leave(*n);
  return rc;
}

int store_session::unregister_buffer(std::uintptr_t ptr) {
  auto n = enter();
  if (!n) return e(errc::unavailable_in_current_status);
  int rc = 0;
  {
    std::lock_guard lk(n->regs_mu);
    auto it = n->regs.find(ptr);
    if (it == n->regs.end())
      rc = e(errc::invalid_params);
    else
      n->regs.erase(it);
  }
  leave(*n);
  return rc;
}

result<std::vector<std::span<std::byte>>> store_session::pieces_of(const std::vector<raw_span>& spans) {
  std::vector<std::span<std::byte>> out;
  out.reserve(spans.size());
  for (auto& s : spans) {
    if ((s.ptr == 0 && s.size != 0) || s.ptr + s.size < s.ptr) return fail(errc::invalid_params);
    out.emplace_back(reinterpret_cast<std::byte*>(s.ptr), s.size);
  }
  return out;
}

}  // namespace mc::python
