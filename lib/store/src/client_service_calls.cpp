// Small-value reads and writes that arrive as TransferEngine calls
// (lib/store README, "Small values as TransferEngine calls"): the owner's side.
#include "service_state.hpp"
#include "small_read_wire.hpp"
#include "small_write_wire.hpp"

#include "mc/master/master_client.hpp"
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/when_all.hpp"

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

/// Small-value writes arriving as TransferEngine calls (small_write_wire.hpp):
/// each value admitted like the RPC's inline writes (per call, and per peer
/// IP), within the service's inline and write bounds, then stored by
/// data_manager::put_batch (commit and publish, as the RPC's inline writes:
/// the call's values in order, one publish for them all); a code per value
/// in the reply.
task<result<std::vector<std::byte>>> serve_write_call(std::shared_ptr<shared_state> s, mc::transfer::call_request q) {
  namespace sw = detail::small_write;
  auto req = sw::decode_request(q.payload);
  if (!req || sw::reply_bytes(req->values.size()) > q.reply_capacity) co_return fail(errc::invalid_params);
  const auto deadline = clock::now() + clamp_timeout(*s, req->timeout_ms);
  auto& l = s->opts.limits;
  const std::string ip = q.peer_ip;
  load call_load;
  const auto n = req->values.size();
  std::vector<std::int32_t> codes(n, 0);
  std::vector<admission> tickets;
  tickets.reserve(n);
  std::vector<data_manager::put_item> work;
  std::vector<std::size_t> index;
  for (std::size_t k = 0; k < n; ++k) {
    const auto& v = req->values[k];
    if (v.data.size() > l.max_inline_value_bytes || v.data.size() > l.max_remote_write_bytes) {
      codes[k] = static_cast<std::int32_t>(errc::invalid_params);
      continue;
    }
    auto ticket = admit_on(*s, call_load, ip, v.data.size());
    if (!ticket) {
      s->counters->overloaded.fetch_add(1, std::memory_order_relaxed);
      codes[k] = static_cast<std::int32_t>(errc::overloaded);
      continue;
    }
    tickets.push_back(std::move(ticket));
    // From a peer: the tag normalised; the version checked at the commit.
    work.push_back({std::string(v.key), v.data, mc::master::replication::of(v.tag).tag(), v.version});
    index.push_back(k);
  }
  // Admitted too late: the requester has answered TIMEOUT (see commit_batch).
  if (clock::now() >= deadline) {
    for (auto k : index) codes[k] = static_cast<std::int32_t>(errc::timeout);
    work.clear();
  }
  // (Not a conditional expression around co_await: GCC 12 destroys its
  // temporary twice.)
  std::vector<result<void>> done;
  if (!work.empty()) done = co_await s->dm.put_batch(std::move(work));
  for (std::size_t j = 0; j < done.size(); ++j) codes[index[j]] = done[j] ? 0 : done[j].error().value();
  std::vector<std::byte> reply;
  reply.reserve(static_cast<std::size_t>(sw::reply_bytes(n)));
  for (auto c : codes) sw::le::put<std::int32_t>(reply, c);
  co_return reply;
}

task<result<std::vector<std::byte>>> serve_call(std::shared_ptr<shared_state> s, mc::transfer::call_request q) {
  if (q.payload.empty()) co_return fail(errc::invalid_params);
  switch (std::to_integer<std::uint8_t>(q.payload[0])) {
    case small_read::kind_read:
      co_return co_await serve_read_call(std::move(s), std::move(q));
    case small_write::kind_write:
      co_return co_await serve_write_call(std::move(s), std::move(q));
    default:
      co_return fail(errc::invalid_params);
  }
}

}  // namespace mc::store::detail
