#include "client_cache.hpp"

#include "mc/runtime/endpoint.hpp"
#include "negotiate.hpp"
#include "thread_context.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <capnp/message.h>
#include <kj/debug.h>

#include <cstdio>
#include <mutex>
#include <set>

namespace mc::rpc {

namespace {
std::mutex options_mutex;
client_options global_options;
}  // namespace

void set_client_options(const client_options& opts) {
  std::lock_guard lk(options_mutex);
  global_options = opts;
}

client_options get_client_options() {
  std::lock_guard lk(options_mutex);
  return global_options;
}

client_stats thread_client_stats() {
  auto* tc = detail::thread_context::find();
  auto* c = tc ? tc->clients_if_exists() : nullptr;
  return c ? c->stats() : client_stats{};
}

}  // namespace mc::rpc

namespace mc::rpc::detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

/// Resolves and connects; the socket belongs to the calling thread.
mc::task<mc::result<std::unique_ptr<tcp::socket>>> dial(std::string endpoint, std::string* message) {
  auto ex = co_await asio::this_coro::executor;
  std::string_view why;
  auto ep = mc::endpoint::parse(endpoint, &why);
  if (!ep) {
    *message = "bad endpoint '" + endpoint + "' (expected host:port): ";
    message->append(why);
    co_return mc::fail(mc::errc::rpc_fail);
  }
  boost::system::error_code ec;
  std::vector<tcp::endpoint> targets;
  auto addr = asio::ip::make_address(ep->host(), ec);
  if (!ec) {
    targets.emplace_back(addr, ep->port());
  } else {
    tcp::resolver resolver(ex);
    auto [rec, results] =
        co_await resolver.async_resolve(ep->host(), std::to_string(ep->port()), asio::as_tuple(asio::use_awaitable));
    if (rec) {
      *message = "resolve '" + ep->host() + "': " + rec.message();
      co_return mc::fail(mc::errc::rpc_fail);
    }
    for (auto& r : results) targets.push_back(r.endpoint());
  }
  for (auto& t : targets) {
    auto s = std::make_unique<tcp::socket>(ex);
    auto [cec] = co_await s->async_connect(t, asio::as_tuple(asio::use_awaitable));
    if (!cec) co_return std::move(s);
    ec = cec;
  }
  *message = "connect " + endpoint + ": " + (ec ? ec.message() : std::string("no address"));
  co_return mc::fail(ec == asio::error::operation_aborted ? mc::errc::cancelled : mc::errc::rpc_fail);
}

/// Once per endpoint and process: an RDMA client continues over TCP.
void warn_fallback(const std::string& endpoint, const std::string& why) {
  static std::mutex m;
  static std::set<std::string> warned;
  std::lock_guard lk(m);
  if (warned.size() > 4096 || !warned.insert(endpoint).second) return;
  std::fprintf(stderr, "mc::rpc: %s: %s; this connection continues over TCP\n", endpoint.c_str(), why.c_str());
}

}  // namespace

// ------------------------------------------------------------ connection

client_connection::client_connection(std::string ep)
    : endpoint(std::move(ep)), last_used(std::chrono::steady_clock::now()) {}

client_connection::~client_connection() { close(); }

void client_connection::close() noexcept {
  if (st == state::closed) return;
  st = state::closed;
  watch = nullptr;
  lookups.clear();
  services.clear();
  bootstrap = nullptr;
  rpc = nullptr;
  network = nullptr;
  messages = nullptr;
  stream = nullptr;
  wake_waiters();
}

void client_connection::wake_waiters() noexcept {
  mc::waiter_queue::wakeups w;
  auto lk = ready_waiters.lock();
  ready_waiters.grant_all(w, 0);
}

mc::time_point client_connection::idle_since() const noexcept {
  auto t = last_used;
  if (stream) t = std::max(t, stream->last_activity());
  return t;
}

// ----------------------------------------------------------------- cache

client_cache::client_cache(thread_context& tc, client_options opts)
    : tc_(tc), opts_(std::move(opts)), sweep_timer_(tc.io()) {
  if (opts_.max_connections == 0) opts_.max_connections = 1;
}

client_cache::~client_cache() { close_all(); }

void client_cache::close_all() noexcept {
  closed_ = true;
  sweep_timer_.cancel();
  auto all = std::move(by_endpoint_);
  by_endpoint_.clear();
  lru_.clear();
  for (auto& [ep, c] : all) c->close();
}

client_stats client_cache::stats() const noexcept {
  auto s = stats_;
  s.cached = by_endpoint_.size();
  return s;
}

void client_cache::touch(client_connection& c) noexcept {
  c.last_used = std::chrono::steady_clock::now();
  lru_.splice(lru_.begin(), lru_, c.lru_pos);
}

void client_cache::erase(const std::shared_ptr<client_connection>& c) noexcept {
  auto it = by_endpoint_.find(c->endpoint);
  if (it == by_endpoint_.end() || it->second != c) return;
  lru_.erase(c->lru_pos);
  auto keep = std::move(it->second);
  by_endpoint_.erase(it);
  keep->close();
}

bool client_cache::make_room() noexcept {
  while (by_endpoint_.size() >= opts_.max_connections) {
    // Least recently used first, one no call waits on if there is one;
    // connections still being opened are skipped.
    client_connection* victim = nullptr;
    for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) {
      if ((*it)->st == client_connection::state::connecting) continue;
      if (!victim) victim = *it;  // the least recently used, busy or not
      if (!(*it)->busy()) {
        victim = *it;
        break;
      }
    }
    if (!victim) return false;
    if (victim->st == client_connection::state::ready) ++stats_.evicted;
    erase(by_endpoint_.at(victim->endpoint));
  }
  return true;
}

mc::task<mc::result<std::shared_ptr<client_connection>>> client_cache::acquire(std::string endpoint) {
  auto self = shared_from_this();
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (closed_) co_return mc::fail(mc::errc::shutting_down);
    auto it = by_endpoint_.find(endpoint);
    if (it != by_endpoint_.end()) {
      auto c = it->second;
      if (c->st == client_connection::state::ready) {
        touch(*c);
        co_return c;
      }
      if (c->st == client_connection::state::connecting) {
        // Bounded even if the opener never reports (its own connect and
        // handshake are bounded by connect_timeout each): a hung opener must
        // not hang every later call to this endpoint on this thread.
        auto woken = co_await c->ready_waiters.wait_for(c->ready_waiters.lock(), 0,
                                                        2 * opts_.connect_timeout + std::chrono::seconds(1));
        if (!woken) {
          if (mc::is(woken.error(), mc::errc::timeout))
            set_last_error("connect " + endpoint + ": timed out waiting for the connection being opened");
          co_return woken.error();  // cancelled or timed out while waiting
        }
        if (c->st == client_connection::state::ready) co_return c;
        if (c->connect_error) {
          set_last_error(c->connect_message);
          co_return c->connect_error;
        }
        continue;  // evicted or closed meanwhile: try again
      }
      erase(c);  // broken: reconnect below
    }
    if (!make_room()) {
      set_last_error("client connection cache full of connections being opened");
      co_return mc::fail(mc::errc::rpc_fail);
    }
    auto c = std::make_shared<client_connection>(endpoint);
    lru_.push_front(c.get());
    c->lru_pos = lru_.begin();
    by_endpoint_.emplace(endpoint, c);
    arm_sweep();
    mc::result<void> r;
    try {
      r = co_await open(c);
    } catch (...) {
      // Never leave the entry "connecting" with its waiters asleep.
      c->connect_error = mc::make_error_code(mc::errc::rpc_fail);
      erase(c);
      c->wake_waiters();
      throw;
    }
    if (closed_ || c->st == client_connection::state::closed) {
      co_return mc::fail(closed_ ? mc::errc::shutting_down : mc::errc::rpc_fail);
    }
    if (!r) {
      ++stats_.failed;
      c->connect_error = r.error();
      set_last_error(c->connect_message);
      erase(c);           // not cached: the next attempt reconnects
      c->wake_waiters();  // (erase already woke them unless c was replaced meanwhile)
      co_return r.error();
    }
    c->wake_waiters();
    co_return c;
  }
  co_return mc::fail(mc::errc::rpc_fail);
}

mc::task<mc::result<void>> client_cache::open(std::shared_ptr<client_connection> c) {
  auto self = shared_from_this();
  auto sock = co_await mc::with_deadline(dial(c->endpoint, &c->connect_message), opts_.connect_timeout);
  if (!sock) {
    if (mc::is(sock.error(), mc::errc::timeout)) c->connect_message = "connect " + c->endpoint + ": timed out";
    co_return sock.error();
  }
  if (closed_ || c->st != client_connection::state::connecting) co_return mc::fail(mc::errc::rpc_fail);
  // TCP, or the RDMA handshake on the new connection (negotiate.hpp).
  bool fell_back = false;
  std::string why;
  auto stream =
      co_await mc::with_deadline(client_negotiate(std::move(**sock), &fell_back, &why), opts_.connect_timeout);
  if (!stream) {
    // The handshake is the auth frame, then (MC_RPC_PROTOCOL=rdma) the RDMA
    // hello: name neither transport, `why` says which step failed.
    c->connect_message = "RPC handshake with " + c->endpoint + ": " +
                         (mc::is(stream.error(), mc::errc::timeout) ? std::string("timed out") : why);
    co_return stream.error();
  }
  if (closed_ || c->st != client_connection::state::connecting) co_return mc::fail(mc::errc::rpc_fail);
  if (fell_back) warn_fallback(c->endpoint, why);
  note_connection(false, std::string_view((*stream)->transport()) == "rdma", fell_back);
  try {
    capnp::ReaderOptions ro;
    ro.traversalLimitInWords = std::max<std::size_t>(opts_.max_message_bytes / 8, 1024);
    c->stream = kj::mv(*stream);
    c->messages = kj::heap<pooled_message_stream>(*c->stream, tc_.recv_buffers(), true);
    c->network = kj::heap<capnp::TwoPartyVatNetwork>(*c->messages, capnp::rpc::twoparty::Side::CLIENT, ro);
    c->rpc = kj::heap<capnp::RpcSystem<capnp::rpc::twoparty::VatId>>(capnp::makeRpcClient(*c->network));
    capnp::word scratch[4] = {};
    capnp::MallocMessageBuilder message(scratch);
    auto vat = message.getRoot<capnp::rpc::twoparty::VatId>();
    vat.setSide(capnp::rpc::twoparty::Side::SERVER);
    c->bootstrap = c->rpc->bootstrap(vat);
    auto* raw = c.get();
    c->watch = c->network->onDisconnect()
                   .then([this, raw]() {
                     if (raw->st == client_connection::state::ready) {
                       raw->st = client_connection::state::broken;
                       ++stats_.broken;
                     }
                   })
                   .eagerlyEvaluate(nullptr);
  } catch (const std::exception& e) {
    c->connect_message = std::string("setting up RPC on ") + c->endpoint + ": " + e.what();
    co_return mc::fail(mc::errc::rpc_fail);
  }
  c->st = client_connection::state::ready;
  ++stats_.opened;
  co_return mc::result<void>{};
}

void client_cache::arm_sweep() {
  if (sweep_armed_ || closed_) return;
  sweep_armed_ = true;
  auto period = std::clamp<mc::duration>(opts_.idle_timeout / 4, std::chrono::milliseconds(5), std::chrono::seconds(1));
  sweep_timer_.expires_after(period);
  sweep_timer_.async_wait([w = weak_from_this()](boost::system::error_code ec) {
    if (ec) return;
    if (auto self = w.lock()) {
      self->sweep_armed_ = false;
      self->sweep();
    }
  });
}

void client_cache::sweep() {
  auto now = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<client_connection>> doomed;
  for (auto& [ep, c] : by_endpoint_) {
    if (c->st == client_connection::state::broken) {
      doomed.push_back(c);
    } else if (c->st == client_connection::state::ready && !c->busy() && now - c->idle_since() > opts_.idle_timeout) {
      ++stats_.idle_closed;
      doomed.push_back(c);
    }
  }
  for (auto& c : doomed) erase(c);
  if (!by_endpoint_.empty()) arm_sweep();
}

}  // namespace mc::rpc::detail
