// TransferEngine calls (engine::call / set_call_handler): the handler
// registry and the initiator's entry point; the wire exchange is tcp_call
// (tcp_call.cpp), the target's side serve_call (tcp_server.cpp).
#include "engine_impl.hpp"
#include "mc/runtime/deadline.hpp"
#include "wire.hpp"

namespace mc::transfer {
namespace detail {

std::shared_ptr<const call_handler> engine_impl::call_handler_now() const {
  std::lock_guard lk(call_mu_);
  return call_handler_;
}

void engine_impl::set_call_handler(call_handler h) {
  auto p = h ? std::make_shared<const call_handler>(std::move(h)) : nullptr;
  std::lock_guard lk(call_mu_);
  call_handler_ = std::move(p);
}

task<mc::result<std::size_t>> engine_impl::run_call(std::string endpoint, std::span<const std::byte> request,
                                                    std::span<std::byte> reply,
                                                    std::chrono::steady_clock::duration timeout) {
  auto holder = gate_.try_enter();
  if (!holder || stopping_) co_return fail(errc::shutting_down);
  if (request.empty() || request.size() > max_call_request || reply.empty() || reply.size() > max_call_reply ||
      endpoint.empty())
    co_return fail(errc::invalid_params);
  auto& ts = this_thread_state();
  const auto now = std::chrono::steady_clock::now();
  const auto deadline = timeout >= mc::time_point::max() - now ? mc::time_point::max() : now + timeout;
  // On an idle connection: bounded by the thread's deadline queue. Else (a
  // connection to open or to wait for, or the idle one was stale): the
  // general race against a timer. timeout at the deadline; cancelled when
  // the caller is cancelled.
  auto out = co_await tcp_call_idle(*this, ts, endpoint, request, reply, deadline);
  if (!out) out = co_await mc::with_deadline_at(tcp_call(*this, ts, endpoint, request, reply), deadline);
  if (!*out && stopping_) *out = fail(errc::shutting_down);
  bump(*out ? counters_.initiated_calls : counters_.initiated_call_errors);
  co_return std::move(*out);
}

}  // namespace detail

void engine::set_call_handler(call_handler h) { impl_->set_call_handler(std::move(h)); }

mc::task<mc::result<std::size_t>> engine::call(std::string peer_endpoint, std::span<const std::byte> request,
                                               std::span<std::byte> reply,
                                               std::chrono::steady_clock::duration timeout) {
  auto impl = impl_;  // keeps the internals alive while this runs
  if (!impl->started_) co_return fail(errc::unavailable_in_current_status);
  if (impl->on_own_thread()) co_return co_await impl->run_call(std::move(peer_endpoint), request, reply, timeout);
  co_return co_await mc::run_on(impl->rt_.executor(0),
                                impl->run_call(std::move(peer_endpoint), request, reply, timeout));
}

}  // namespace mc::transfer
