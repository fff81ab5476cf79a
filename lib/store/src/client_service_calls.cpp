// Small-value reads that arrive as TransferEngine calls (lib/store README,
// "Small reads as TransferEngine calls"): the owner's side.
#include "service_state.hpp"
#include "small_read_wire.hpp"

#include "mc/runtime/deadline.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace mc::store::detail {

/// Small-value reads arriving as TransferEngine calls (small_read_wire.hpp):
/// admitted like the RPC's inline reads (per call, and per peer IP), read by
/// the same read_remote_batch, every found value within its key's bound
/// copied once into the reply.
task<result<std::vector<std::byte>>> serve_read_call(std::shared_ptr<shared_state> s, mc::transfer::call_request q) {
  namespace sr = detail::small_read;
  auto req = sr::decode_request(q.payload);
  if (!req || sr::reply_capacity(req->asks) > q.reply_capacity) co_return fail(errc::invalid_params);
  const auto deadline = clock::now() + clamp_timeout(*s, req->timeout_ms);
  auto& l = s->opts.limits;
  const std::string ip = q.peer_ip;
  load call_load;  // this call's items in flight (its connection's share)
  std::vector<admission> tickets;
  tickets.reserve(req->asks.size());
  std::vector<remote_read_item> batch;
  std::vector<std::size_t> index;
  std::vector<std::byte> reply(req->asks.size() * sr::result_bytes);
  auto set = [&](std::size_t k, std::int32_t code, std::uint64_t size) {
    std::byte* e = reply.data() + k * sr::result_bytes;
    for (std::size_t i = 0; i < 4; ++i) e[i] = static_cast<std::byte>(static_cast<std::uint32_t>(code) >> (8 * i));
    for (std::size_t i = 0; i < 8; ++i) e[4 + i] = static_cast<std::byte>(size >> (8 * i));
  };
  for (std::size_t k = 0; k < req->asks.size(); ++k) {
    const auto& a = req->asks[k];
    auto ticket = admit_on(*s, call_load, ip, std::min<std::uint64_t>(a.inline_max, l.max_inline_value_bytes));
    if (!ticket) {
      s->counters->overloaded.fetch_add(1, std::memory_order_relaxed);
      set(k, static_cast<std::int32_t>(errc::overloaded), 0);
      continue;
    }
    tickets.push_back(std::move(ticket));
    batch.push_back({std::string(a.key), {}, a.inline_max});
    index.push_back(k);
  }
  // Room for the values: the reply's entries are there already.
  const std::uint64_t budget = std::min<std::uint64_t>(l.max_inline_reply_bytes, q.reply_capacity - reply.size());
  auto out =
      co_await s->dm.read_remote_batch(std::move(batch), mc::time_left(deadline), l.max_inline_value_bytes, budget);
  std::uint64_t copied = 0;
  for (std::size_t j = 0; j < out.size(); ++j) {
    auto& o = out[j];
    const auto k = index[j];
    // Found but not within the key's bound (or the reply's room): an error
    // with the size, as the RPC answers it (the requester may read it another way).
    if (!o.value || !o.inline_value) {
      set(k, o.value ? static_cast<std::int32_t>(errc::invalid_params) : o.value.error().value(), o.size);
      continue;
    }
    const auto at = reply.size();
    reply.resize(at + o.size);
    auto r = co_await o.inline_value->read_into({reply.data() + at, static_cast<std::size_t>(o.size)});
    s->dm.count_read(r ? result<std::uint64_t>(o.size) : result<std::uint64_t>(r.error()));
    if (!r) {
      reply.resize(at);
      set(k, r.error().value(), 0);
      continue;
    }
    set(k, 0, o.size);
    copied += o.size;
    if (copied >= (1u << 20)) {  // never more than ~1 MiB of copies without yielding the thread
      copied = 0;
      co_await boost::asio::post(co_await boost::asio::this_coro::executor, boost::asio::use_awaitable);
    }
  }
  co_return reply;
}

}  // namespace mc::store::detail
