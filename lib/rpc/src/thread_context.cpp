#include "thread_context.hpp"

#include "mc/runtime/blocking.hpp"

#include "client_cache.hpp"
#include "message_stream.hpp"
#include "mc/rpc/client.hpp"
#include "mc/runtime/runtime.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <kj/debug.h>

#include <cstdio>
#include <stdexcept>

namespace mc::rpc::detail {

// ---------------------------------------------------------------- event port

struct event_port_core {
  explicit event_port_core(boost::asio::io_context& c) : io(c) {}
  boost::asio::io_context& io;
  kj::EventLoop* loop = nullptr;  // touched on the owning thread only
  bool scheduled = false;
  bool running = false;  // inside loop->run() on this thread
  int holding = 0;       // live kj_turn_here scopes: runs are not posted
};

namespace {
// Turns per run: small enough that asio handlers interleave with a busy KJ
// queue, large enough to amortise the post.
constexpr unsigned max_turns_per_run = 256;

void schedule(const std::shared_ptr<event_port_core>& c);

/// One bounded run of the loop; what remains is posted (run() only reports
/// transitions to the port, so work left after the turns would wait).
void run_loop(const std::shared_ptr<event_port_core>& c) {
  {
    c->running = true;
    struct reset {
      event_port_core& c;
      ~reset() { c.running = false; }
    } r{*c};
    c->loop->run(max_turns_per_run);
  }
  if (c->loop && c->loop->isRunnable()) schedule(c);
}

void schedule(const std::shared_ptr<event_port_core>& c) {
  if (c->scheduled || c->holding > 0 || !c->loop) return;
  c->scheduled = true;
  boost::asio::post(c->io, [c] {
    c->scheduled = false;
    if (c->loop && !c->running) run_loop(c);
  });
}
}  // namespace

asio_event_port::asio_event_port(boost::asio::io_context& io) : core_(std::make_shared<core>(io)) {}
asio_event_port::~asio_event_port() { detach(); }
void asio_event_port::attach(kj::EventLoop& loop) noexcept { core_->loop = &loop; }
void asio_event_port::detach() noexcept { core_->loop = nullptr; }

bool asio_event_port::wait() {
  // Blocking inside an asio handler would deadlock the thread: KJ's wait() is
  // not supported on an asio-hosted loop.
  KJ_FAIL_REQUIRE("mc::rpc: kj::Promise::wait() is not allowed on a runtime thread; co_await it");
}
bool asio_event_port::poll() { return false; }
void asio_event_port::setRunnable(bool runnable) {
  if (runnable) schedule(core_);
}
void asio_event_port::wake() const {
  // Cross-thread (kj::Executor); not used by mc::rpc but kept correct.
  boost::asio::post(core_->io, [c = core_] {
    if (c->loop && c->loop->isRunnable()) schedule(c);
  });
}

// ------------------------------------------------------------ kj_turn_here

kj_turn_here::kj_turn_here() noexcept {
  auto* tc = thread_context::find();
  if (!tc) return;
  const auto& c = tc->port().shared_core();
  if (!c->loop || c->running) return;  // inside the loop: its own run picks the work up
  core_ = c;
  ++core_->holding;
}

kj_turn_here::~kj_turn_here() {
  if (!core_) return;
  auto c = std::move(core_);
  if (--c->holding == 0 && c->loop && c->loop->isRunnable()) schedule(c);  // not run(): post, as before
}

void kj_turn_here::run() {
  if (!core_) return;
  auto c = std::move(core_);
  if (--c->holding > 0) return;  // an outer scope runs it
  if (c->loop && !c->running && c->loop->isRunnable()) run_loop(c);
}

// ------------------------------------------------------------ thread context

namespace {
thread_local thread_context* tls_context = nullptr;

// Last-resort cleanup if a thread exits without mc::rpc::shutdown().
struct exit_guard {
  ~exit_guard() {
    if (!tls_context) return;
    std::fprintf(stderr, "mc::rpc: runtime thread exited without mc::rpc::shutdown(); tearing down\n");
    thread_context::destroy_current();
  }
};
thread_local exit_guard tls_exit_guard;
}  // namespace

thread_context::thread_context(boost::asio::io_context& io)
    : io_(io), port_(io), loop_(port_), scope_(loop_), tasks_(kj::heap<kj::TaskSet>(*this)), deadline_timer_(io) {
  port_.attach(loop_);
}

thread_context::~thread_context() { teardown(); }

thread_context& thread_context::current() {
  if (tls_context) return *tls_context;
  auto* rt = mc::runtime::runtime::current();
  int idx = mc::runtime::runtime::current_index();
  if (!rt || idx < 0) throw std::logic_error("mc::rpc: RPC objects may only be used on a runtime thread");
  (void)&tls_exit_guard;  // make sure the guard exists on this thread
  tls_context = new thread_context(rt->context(static_cast<std::size_t>(idx)));
  return *tls_context;
}

thread_context* thread_context::find() noexcept { return tls_context; }

void thread_context::destroy_current() noexcept {
  auto* c = tls_context;
  if (!c) return;
  delete c;  // teardown() runs with tls_context still set (KJ code may look it up)
  tls_context = nullptr;
}

void thread_context::teardown() noexcept {
  try {
    auto hooks = std::move(hooks_);
    hooks_.clear();
    for (auto& [key, f] : hooks) f();
    close_clients();
    for (auto* c = calls_head_; c; c = c->next) c->release_kj();
    calls_head_ = nullptr;
    calls_ = 0;
    tasks_ = nullptr;  // pending awaits resume their coroutines with shutting_down
    for (int i = 0; i < 1000 && loop_.isRunnable(); ++i) loop_.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mc::rpc: error during thread teardown: %s\n", e.what());
  }
  port_.detach();
  deadlines_.clear();
  deadline_timer_.cancel();
  *alive_ = false;
  for (auto* t : idle_waiters_) t->cancel();
}

void thread_context::taskFailed(kj::Exception&& e) {
  // Task chains convert failures into outcomes; reaching here is a bug.
  KJ_LOG(ERROR, "mc::rpc: unexpected task failure", e);
}

client_cache& thread_context::clients() {
  if (!clients_) clients_ = std::make_shared<client_cache>(*this, get_client_options());
  return *clients_;
}

const std::shared_ptr<recv_pool>& thread_context::recv_buffers() {
  if (!recv_pool_) recv_pool_ = std::make_shared<recv_pool>();
  return recv_pool_;
}

void thread_context::close_clients() noexcept {
  if (!clients_) return;
  auto c = std::move(clients_);
  c->close_all();
}

bool thread_context::enter_call(serving_call* c) noexcept {
  if (draining_) return false;
  c->prev = nullptr;
  c->next = calls_head_;
  if (calls_head_) calls_head_->prev = c;
  calls_head_ = c;
  ++calls_;
  return true;
}

void thread_context::leave_call(serving_call* c) noexcept {
  if (c->prev)
    c->prev->next = c->next;
  else
    calls_head_ = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = c->next = nullptr;
  if (calls_ && --calls_ == 0) {
    for (auto* t : idle_waiters_) t->cancel();
  }
}

mc::task<bool> thread_context::wait_calls_idle(mc::time_point deadline) {
  auto alive = alive_;  // `this` may be torn down while we wait
  while (calls_ > 0 && std::chrono::steady_clock::now() < deadline) {
    boost::asio::steady_timer t(io_, deadline);
    idle_waiters_.push_back(&t);
    boost::system::error_code ec;
    co_await t.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    if (!*alive) co_return true;
    std::erase(idle_waiters_, &t);
  }
  co_return calls_ == 0;
}

void thread_context::add_teardown_hook(const void* key, std::function<void()> f) {
  hooks_.emplace_back(key, std::move(f));
}
void thread_context::remove_teardown_hook(const void* key) noexcept {
  std::erase_if(hooks_, [key](auto& h) { return h.first == key; });
}

deadline_token thread_context::add_deadline(mc::time_point when, std::weak_ptr<timed_op> op) {
  deadline_token t{when, ++next_deadline_id_};
  deadlines_.emplace(std::make_pair(t.when, t.id), std::move(op));
  if (when < deadline_armed_) arm_deadline_timer(when);
  return t;
}

void thread_context::cancel_deadline(const deadline_token& t) noexcept {
  // The asio timer stays armed; firing early with nothing due just re-arms.
  deadlines_.erase(std::make_pair(t.when, t.id));
}

void thread_context::arm_deadline_timer(mc::time_point when) {
  deadline_armed_ = when;
  deadline_timer_.expires_at(when);
  deadline_timer_.async_wait([this, alive = alive_](boost::system::error_code ec) {
    if (ec || !*alive) return;  // re-armed (aborted) or torn down
    deadline_armed_ = mc::time_point::max();
    fire_deadlines();
  });
}

void thread_context::fire_deadlines() {
  auto now = std::chrono::steady_clock::now();
  while (!deadlines_.empty() && deadlines_.begin()->first.first <= now) {
    auto op = deadlines_.begin()->second.lock();
    deadlines_.erase(deadlines_.begin());
    if (op) op->on_deadline();
  }
  if (!deadlines_.empty()) arm_deadline_timer(deadlines_.begin()->first.first);
}

// ------------------------------------------------------------------ bridge

kj::TaskSet& thread_tasks() { return thread_context::current().tasks(); }

deadline_token add_deadline(mc::time_point when, std::weak_ptr<timed_op> op) {
  return thread_context::current().add_deadline(when, std::move(op));
}

void cancel_deadline(const deadline_token& t) noexcept {
  if (auto* c = thread_context::find()) c->cancel_deadline(t);
}

}  // namespace mc::rpc::detail

// ------------------------------------------------------- public thread API

namespace mc::rpc {

mc::task<void> shutdown_this_thread() {
  auto* tc = detail::thread_context::find();
  if (!tc) co_return;
  auto ex = co_await boost::asio::this_coro::executor;
  tc->close_clients();
  // Calls cancelled by closed connections unwind quickly; bound the wait.
  co_await tc->wait_calls_idle(std::chrono::steady_clock::now() + std::chrono::seconds(1));
  // Let completions already posted (e.g. responses) reach their coroutines.
  for (int i = 0; i < 4; ++i) co_await boost::asio::post(ex, boost::asio::use_awaitable);
  detail::thread_context::destroy_current();
}

void shutdown(mc::runtime::runtime& rt) {
  mc::runtime::assert_may_block("mc::rpc::shutdown");
  if (mc::runtime::runtime::current()) throw std::logic_error("mc::rpc::shutdown: call from a non-runtime thread");
  for (std::size_t i = 0; i < rt.size(); ++i) rt.block_on(shutdown_this_thread(), i);
}

void close_thread_connections() {
  if (auto* tc = detail::thread_context::find()) tc->close_clients();
}

}  // namespace mc::rpc
