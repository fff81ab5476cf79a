#include "mc/store/peer_client.hpp"

#include "client_service.capnp.h"
#include "small_read_wire.hpp"
#include "small_write_wire.hpp"
#include "mc/rpc/capnp.hpp"
#include "mc/runtime/when_all.hpp"
#include "mc/store/client_service.hpp"
#include "mc/transfer/engine.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <cstring>
#include <memory>

namespace mc::store {
namespace {

void fill(RemoteBuffer::Builder b, const mc::transfer::remote_buffer& r) {
  b.setEndpoint(r.endpoint);
  b.setAddress(r.address);
  b.setLength(r.length);
  b.setToken(r.token);
}

std::uint64_t room_of(const std::vector<std::span<std::byte>>& local) {
  std::uint64_t n = 0;
  for (auto& l : local) n += l.size();
  return n;
}

/// Copies an inline answer into the caller's pieces (the caller checked the room).
void scatter(kj::ArrayPtr<const kj::byte> data, const std::vector<std::span<std::byte>>& local) {
  std::size_t at = 0;
  for (auto& l : local) {
    if (at == data.size()) break;
    auto n = std::min(l.size(), data.size() - at);
    std::memcpy(l.data(), data.begin() + at, n);
    at += n;
  }
}

// A read's reply: a transferred value only with exactly the length we asked
// for; an inline one only within what we allowed and have room for.
peer_read_result read_result(ItemResult::Reader r, const peer_read& asked) {
  peer_read_result out;
  out.size_hint = r.getSize();
  auto code = from_wire_code(r.getCode());
  if (!code) {
    out.value = code.error();
    return out;
  }
  if (r.hasData()) {
    auto data = r.getData();
    if (asked.inline_max == 0 || data.size() != r.getSize() || data.size() > asked.inline_max ||
        data.size() > room_of(asked.local)) {
      out.value = make_error_code(errc::rpc_fail);
      return out;
    }
    scatter(data, asked.local);
    out.value = data.size();
    out.inlined = true;
    return out;
  }
  std::uint64_t want = 0;
  for (auto& d : asked.dest) want += d.length;
  if (asked.dest.empty() || r.getSize() != want)
    out.value = make_error_code(errc::rpc_fail);
  else
    out.value = want;
  return out;
}

std::uint32_t timeout_ms(mc::duration d) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  return static_cast<std::uint32_t>(std::clamp<long long>(ms, 1, max_request_timeout_ms));
}

task<result<ClientService::Client>> connect_peer(const std::string& endpoint) {
  co_return co_await mc::rpc::connect<ClientService>(endpoint, client_service_name);
}

}  // namespace

result<void> from_wire_code(std::int32_t code) noexcept {
  if (code == 0) return {};
  auto e = errc_from_value(code);
  if (!e || *e == errc::ok) return make_error_code(errc::rpc_fail);
  return make_error_code(*e);
}

task<peer_read_result> peer_client::read_remote(std::string rpc_endpoint, std::string key,
                                                mc::transfer::remote_buffer dest) {
  std::vector<peer_read> one(1);
  one[0].key = std::move(key);
  one[0].dest.push_back(std::move(dest));
  auto r = co_await read_batch(std::move(rpc_endpoint), std::move(one));
  if (!r) co_return peer_read_result{r.error(), 0};
  co_return std::move(r->front());
}

task<result<void>> peer_client::write_remote(std::string rpc_endpoint, std::string key,
                                             mc::transfer::remote_buffer src) {
  std::vector<peer_write> one(1);
  one[0].key = std::move(key);
  one[0].src.push_back(std::move(src));
  auto r = co_await write_batch(std::move(rpc_endpoint), std::move(one));
  if (!r) co_return r.error();
  co_return std::move(r->front());
}

task<result<std::vector<peer_read_result>>> peer_client::batch_read_remote(std::string rpc_endpoint,
                                                                           std::vector<peer_item> items) {
  std::vector<peer_read> reads(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    reads[i].key = std::move(items[i].key);
    reads[i].dest.push_back(std::move(items[i].buffer));
  }
  co_return co_await read_batch(std::move(rpc_endpoint), std::move(reads));
}

task<result<std::vector<result<void>>>> peer_client::batch_write_remote(std::string rpc_endpoint,
                                                                        std::vector<peer_item> items) {
  std::vector<peer_write> writes(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    writes[i].key = std::move(items[i].key);
    writes[i].src.push_back(std::move(items[i].buffer));
  }
  co_return co_await write_batch(std::move(rpc_endpoint), std::move(writes));
}

task<result<std::vector<peer_read_result>>> peer_client::read_batch(std::string rpc_endpoint,
                                                                    std::vector<peer_read> items) {
  if (items.empty()) co_return std::vector<peer_read_result>{};
  if (items.size() > max_batch_items) co_return fail(errc::invalid_params);
  auto c = co_await connect_peer(rpc_endpoint);
  if (!c) co_return c.error();
  auto req = c->batchReadRemoteDataRequest();
  auto list = req.initItems(static_cast<unsigned>(items.size()));
  for (unsigned i = 0; i < items.size(); ++i) {
    auto& it = items[i];
    list[i].setKey(it.key);
    list[i].setClientId(requester_id_);
    list[i].setInlineMax(it.inline_max);
    if (it.dest.size() == 1) {
      fill(list[i].initDest(), it.dest[0]);
    } else if (!it.dest.empty()) {
      auto pieces = list[i].initPieces(static_cast<unsigned>(it.dest.size()));
      for (unsigned k = 0; k < it.dest.size(); ++k) fill(pieces[k], it.dest[k]);
    }
  }
  req.setTimeoutMs(timeout_ms(timeout_));
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return r.error();
  auto results = r->getResults();
  if (results.size() != items.size()) co_return fail(errc::rpc_fail);  // checked before use
  std::vector<peer_read_result> out;
  out.reserve(items.size());
  std::uint64_t copied = 0;
  for (unsigned i = 0; i < results.size(); ++i) {
    out.push_back(read_result(results[i], items[i]));
    if (out.back().inlined) copied += *out.back().value;
    if (copied >= (1u << 20)) {  // inline copies: never more than ~1 MiB without yielding the thread
      copied = 0;
      co_await boost::asio::post(co_await boost::asio::this_coro::executor, boost::asio::use_awaitable);
    }
  }
  co_return out;
}

namespace {

/// Whether `items` can travel as one call: inline-only, within the keys',
/// the request's and the reply's bounds (checked without building anything).
bool fits_call(const std::vector<peer_read>& items) {
  namespace sr = detail::small_read;
  if (items.empty() || items.size() > sr::max_keys) return false;
  std::size_t request_bytes = sr::header_bytes;
  std::uint64_t reply_bytes = 0;
  for (auto& it : items) {
    if (!it.dest.empty() || it.inline_max == 0 || it.inline_max > sr::max_inline || it.inline_max > room_of(it.local) ||
        it.key.empty() || it.key.size() > max_key_bytes)
      return false;
    request_bytes += sr::key_entry_bytes + it.key.size();
    reply_bytes += sr::result_bytes + it.inline_max;
  }
  return request_bytes <= mc::transfer::max_call_request_bytes && reply_bytes <= mc::transfer::max_call_reply_bytes;
}

/// Reply buffers of read calls, reused on each thread: at most 4 kept, each
/// at most 256 KiB (larger replies get a buffer of their own).
class reply_buffers {
 public:
  struct buffer {
    std::unique_ptr<std::byte[]> data;
    std::size_t capacity = 0;
  };
  buffer take(std::size_t n) {
    for (auto it = spare_.begin(); it != spare_.end(); ++it)
      if (it->capacity >= n) {
        buffer b = std::move(*it);
        spare_.erase(it);
        return b;
      }
    return {std::unique_ptr<std::byte[]>(new std::byte[n]), n};  // not zeroed: the reply overwrites what is read
  }
  void give(buffer b) {
    if (b.capacity > max_kept_bytes || spare_.size() >= max_kept) return;
    spare_.push_back(std::move(b));
  }

 private:
  static constexpr std::size_t max_kept = 4;
  static constexpr std::size_t max_kept_bytes = 256u << 10;
  std::vector<buffer> spare_;
};

thread_local reply_buffers tl_reply_buffers;

}  // namespace

bool peer_client::call_eligible(const std::vector<peer_read>& items) { return fits_call(items); }

task<result<std::vector<peer_read_result>>> peer_client::read_batch_call(mc::transfer::engine& engine,
                                                                         std::string transfer_endpoint,
                                                                         const std::vector<peer_read>& items) {
  namespace sr = detail::small_read;
  if (items.empty()) co_return std::vector<peer_read_result>{};
  if (!fits_call(items) || transfer_endpoint.empty()) co_return fail(errc::unsupported);
  std::vector<sr::key_ask> asks;
  asks.reserve(items.size());
  for (auto& it : items) asks.push_back({it.key, static_cast<std::uint32_t>(it.inline_max)});
  auto req = sr::encode_request(asks, timeout_ms(timeout_));
  const auto capacity = sr::reply_capacity(asks);
  if (!req) co_return fail(errc::unsupported);
  auto buf = tl_reply_buffers.take(static_cast<std::size_t>(capacity));
  struct give_back {
    reply_buffers::buffer& b;
    ~give_back() { tl_reply_buffers.give(std::move(b)); }
  } keep{buf};
  const std::span<std::byte> reply(buf.data.get(), static_cast<std::size_t>(capacity));
  auto n = co_await engine.call(std::move(transfer_endpoint), *req, reply, timeout_);
  if (!n) co_return n.error();
  auto answers = sr::decode_reply(std::span<const std::byte>(reply).first(*n), asks);
  if (!answers) co_return fail(errc::rpc_fail);
  std::vector<peer_read_result> out(items.size());
  for (std::size_t k = 0; k < items.size(); ++k) {
    auto& a = (*answers)[k];
    out[k].size_hint = a.size;
    if (auto code = from_wire_code(a.code); !code) {
      out[k].value = code.error();
      continue;
    }
    scatter(kj::arrayPtr(reinterpret_cast<const kj::byte*>(a.value.data()), a.value.size()), items[k].local);
    out[k].value = a.value.size();
    out[k].inlined = true;
  }
  co_return out;
}

namespace {

std::uint64_t data_bytes(const peer_write& w) {
  std::uint64_t n = 0;
  for (auto& d : w.data) n += d.size();
  return n;
}

/// Whether a write can travel in a write call (inline, within the bounds).
bool fits_write_call(const peer_write& w) {
  namespace sw = detail::small_write;
  return w.src.empty() && sw::value_ok(w.key, data_bytes(w), w.version) &&
         sw::header_bytes + sw::value_entry_bytes + w.key.size() + data_bytes(w) <=
             mc::transfer::max_call_request_bytes;
}

}  // namespace

bool peer_client::write_call_eligible(const std::vector<peer_write>& items) {
  if (items.empty() || items.size() > max_batch_items) return false;
  return std::all_of(items.begin(), items.end(), fits_write_call);
}

task<result<std::vector<result<void>>>> peer_client::write_batch_call(mc::transfer::engine& engine,
                                                                      std::string transfer_endpoint,
                                                                      const std::vector<peer_write>& items) {
  namespace sw = detail::small_write;
  if (items.empty()) co_return std::vector<result<void>>{};
  if (!write_call_eligible(items) || transfer_endpoint.empty()) co_return fail(errc::unsupported);
  // Consecutive items in calls of at most max_keys values and the engine's
  // request bound, sent concurrently.
  std::vector<sw::value_out> values;
  values.reserve(items.size());
  for (auto& w : items) values.push_back({w.key, w.data, data_bytes(w), w.replication, w.version});
  std::vector<std::pair<std::size_t, std::size_t>> groups;  // [first, last)
  for (std::size_t first = 0; first < values.size();) {
    std::size_t last = first;
    std::uint64_t bytes = sw::header_bytes;
    while (last < values.size() && last - first < sw::max_keys) {
      const auto one = sw::value_entry_bytes + values[last].key.size() + values[last].size;
      if (bytes + one > mc::transfer::max_call_request_bytes) break;
      bytes += one;
      ++last;
    }
    groups.emplace_back(first, last);  // never empty: each value fits alone (fits_write_call)
    first = last;
  }
  const auto ms = timeout_ms(timeout_);
  auto one_call = [](mc::transfer::engine& e, std::string ep, std::span<const sw::value_out> vs, std::uint32_t ms,
                     mc::duration timeout) -> task<result<std::vector<std::int32_t>>> {
    auto req = sw::encode_request(vs, ms);
    if (!req) co_return fail(errc::unsupported);
    std::vector<std::byte> reply(static_cast<std::size_t>(sw::reply_bytes(vs.size())));
    auto n = co_await e.call(std::move(ep), *req, reply, timeout);
    if (!n) co_return n.error();
    auto codes = sw::decode_reply(std::span<const std::byte>(reply).first(*n), vs.size());
    if (!codes) co_return fail(errc::rpc_fail);
    co_return std::move(*codes);
  };
  std::vector<task<result<std::vector<std::int32_t>>>> work;
  work.reserve(groups.size());
  for (auto [first, last] : groups)
    work.push_back(one_call(engine, transfer_endpoint,
                            std::span<const sw::value_out>(values).subspan(first, last - first), ms, timeout_));
  auto done = co_await mc::when_all(std::move(work));
  std::vector<result<void>> out;
  out.reserve(items.size());
  for (auto& d : done) {
    if (!d) co_return d.error();  // the whole batch: the caller may send it again (versions make that idempotent)
    for (auto code : *d) out.push_back(from_wire_code(code));
  }
  co_return out;
}

task<result<std::vector<result<void>>>> peer_client::write_batch(std::string rpc_endpoint,
                                                                 std::vector<peer_write> items) {
  if (items.empty()) co_return std::vector<result<void>>{};
  if (items.size() > max_batch_items) co_return fail(errc::invalid_params);
  auto c = co_await connect_peer(rpc_endpoint);
  if (!c) co_return c.error();
  auto req = c->batchWriteRemoteDataRequest();
  auto list = req.initItems(static_cast<unsigned>(items.size()));
  for (unsigned i = 0; i < items.size(); ++i) {
    auto& it = items[i];
    list[i].setKey(it.key);
    list[i].setClientId(requester_id_);
    list[i].setReplication(it.replication);
    list[i].setVersion(it.version);
    if (!it.data.empty()) {
      std::size_t total = 0;
      for (auto& d : it.data) total += d.size();
      auto data = list[i].initData(static_cast<unsigned>(total));
      std::size_t at = 0;
      for (auto& d : it.data) {
        if (!d.empty()) std::memcpy(data.begin() + at, d.data(), d.size());
        at += d.size();
      }
    } else if (it.src.size() == 1) {
      fill(list[i].initSrc(), it.src[0]);
    } else if (!it.src.empty()) {
      auto pieces = list[i].initPieces(static_cast<unsigned>(it.src.size()));
      for (unsigned k = 0; k < it.src.size(); ++k) fill(pieces[k], it.src[k]);
    }
  }
  req.setTimeoutMs(timeout_ms(timeout_));
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return r.error();
  auto results = r->getResults();
  if (results.size() != items.size()) co_return fail(errc::rpc_fail);  // checked before use
  std::vector<result<void>> out;
  out.reserve(items.size());
  for (auto x : results) out.push_back(from_wire_code(x.getCode()));
  co_return out;
}

task<result<std::uint64_t>> peer_client::query(std::string rpc_endpoint, std::string key) {
  auto c = co_await connect_peer(rpc_endpoint);
  if (!c) co_return c.error();
  auto req = c->queryRequest();
  req.setKey(key);
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return r.error();
  auto res = r->getResult();
  if (auto code = from_wire_code(res.getCode()); !code) co_return code.error();
  co_return res.getSize();
}

task<result<void>> peer_client::remove(std::string rpc_endpoint, std::string key) {
  auto c = co_await connect_peer(rpc_endpoint);
  if (!c) co_return c.error();
  auto req = c->removeRequest();
  req.setKey(key);
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return r.error();
  co_return from_wire_code(r->getResult().getCode());
}

}  // namespace mc::store
