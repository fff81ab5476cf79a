#include "mc/store/client_service.hpp"

#include "client_service.capnp.h"
#include "service_state.hpp"
#include "mc/master/master_client.hpp"
#include "mc/rpc/auth.hpp"
#include "mc/rpc/capnp.hpp"
#include "mc/runtime/async_semaphore.hpp"
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/endpoint.hpp"
#include "mc/runtime/when_all.hpp"
#include "mc/store/data_manager.hpp"
#include "mc/transfer/engine.hpp"
#include "mc/transfer/types.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <unordered_map>

namespace mc::store {
namespace {

using clock = std::chrono::steady_clock;
using detail::admission;
using detail::admit_on;
using detail::clamp_timeout;
using detail::load;
using detail::shared_state;

/// Text by length: KJ's std::string interop stops at the first NUL, so a
/// peer's "k\0x" would otherwise be served as "k" (the store side of what the
/// master_rpc fuzz target found); whole, it is refused by check_key.
std::string str(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }

mc::transfer::remote_buffer to_remote(RemoteBuffer::Reader r) {
  return {str(r.getEndpoint()), r.getAddress(), r.getLength(), r.getToken(), 0};
}

struct item_outcome {
  std::int32_t code = 0;
  std::uint64_t size = 0;
};

item_outcome outcome_of(const result<void>& r, std::uint64_t size) { return {r ? 0 : r.error().value(), size}; }

item_outcome refused(errc e) { return {static_cast<std::int32_t>(e), 0}; }

void set_result(ItemResult::Builder b, const item_outcome& o) {
  b.setCode(o.code);
  b.setSize(o.size);
}

/// One request item, before it runs.
struct item_request {
  std::string key;
  std::string client_id;
  remote_pieces pieces;             // where the bytes are (requester's memory); empty: inline
  std::uint64_t inline_max = 0;     // reads: accept the value inline up to this
  std::span<const std::byte> data;  // writes: the value inside the request (lives with the call)
  bool malformed = false;           // both a single buffer and pieces, or too many pieces
  std::uint64_t tag = 0;            // writes: the value's replication (normalised)
  std::uint64_t version = 0;        // writes: the put's version (0 = issued at the commit)
};

template <class R>
item_request common_item(R r) {
  item_request item{str(r.getKey()), str(r.getClientId()), {}, 0, {}, false, 0, 0};
  auto pieces = r.getPieces();
  if (pieces.size() > max_value_pieces) {
    item.malformed = true;
    return item;
  }
  item.pieces.reserve(pieces.size());
  for (auto p : pieces) item.pieces.push_back(to_remote(p));
  return item;
}

item_request read_request(ReadItem::Reader r) {
  auto item = common_item(r);
  item.inline_max = r.getInlineMax();
  if (r.hasDest() && r.getDest().getLength() > 0) {
    if (!item.pieces.empty())
      item.malformed = true;
    else
      item.pieces.push_back(to_remote(r.getDest()));
  }
  return item;
}

item_request write_request(WriteItem::Reader r) {
  auto item = common_item(r);
  item.tag = mc::master::replication::of(r.getReplication()).tag();  // from a peer: normalised
  item.version = r.getVersion();                                     // checked at the commit (data_manager::put)
  auto d = r.getData();
  item.data = {reinterpret_cast<const std::byte*>(d.begin()), d.size()};
  if (r.hasSrc() && r.getSrc().getLength() > 0) {
    if (!item.pieces.empty())
      item.malformed = true;
    else
      item.pieces.push_back(to_remote(r.getSrc()));
  }
  if (!item.data.empty() && !item.pieces.empty()) item.malformed = true;
  return item;
}

/// The bytes an item may move (what it is admitted for).
std::uint64_t item_bytes(const item_request& item) {
  if (!item.data.empty()) return item.data.size();
  auto total = total_length(item.pieces);
  return std::max(total.value_or(0), item.inline_max);
}

/// One object per RPC connection (it knows the connection's peer), on that
/// connection's serving thread.
class client_service_impl final : public mc::rpc::service<ClientService> {
 public:
  client_service_impl(mc::executor ex, const mc::rpc::connection_info& conn, std::shared_ptr<shared_state> s)
      : service(std::move(ex)), conn_(conn), s_(std::move(s)) {}

  kj::Promise<void> readRemoteData(ReadRemoteDataContext ctx) override { return serve(ctx, do_read(ctx)); }
  kj::Promise<void> writeRemoteData(WriteRemoteDataContext ctx) override { return serve(ctx, do_write(ctx)); }
  kj::Promise<void> batchReadRemoteData(BatchReadRemoteDataContext ctx) override {
    return serve(ctx, do_batch_read(ctx));
  }
  kj::Promise<void> batchWriteRemoteData(BatchWriteRemoteDataContext ctx) override {
    return serve(ctx, do_batch_write(ctx));
  }
  kj::Promise<void> query(QueryContext ctx) override {
    auto res = ctx.getResults().initResult();
    std::string key = str(ctx.getParams().getKey());
    if (auto k = check_key(key); !k) {
      res.setCode(k.error().value());
      return kj::READY_NOW;
    }
    auto s = s_->dm.size_of(key);
    res.setCode(s ? 0 : s.error().value());
    res.setSize(s ? *s : 0);
    return kj::READY_NOW;
  }
  kj::Promise<void> remove(RemoveContext ctx) override { return serve(ctx, do_remove(ctx)); }

 private:
  enum class op { read, write };

  mc::duration request_timeout(std::uint32_t ms) const { return clamp_timeout(*s_, ms); }

  /// Counts one item against the connection's and the peer's limits.
  admission admit(std::uint64_t bytes) { return admit_on(*s_, load_, conn_.remote_address, bytes); }

  /// Where the transfers of an item's pieces may go (see client_service.hpp).
  /// Each piece must pass. With a client id the registration is looked up
  /// once per item (cached, so items after the first cost no master call)
  /// and every piece checked against it; without one, each piece's port is
  /// joined to the connection's own peer address (pieces naming the same
  /// endpoint as the one before reuse its answer).
  task<result<void>> resolve_all(item_request& item) {
    if (item.pieces.empty()) co_return result<void>{};
    auto denied = [&]() -> result<void> {
      s_->counters->access_denied.fetch_add(1, std::memory_order_relaxed);
      return fail(errc::access_denied);
    };
    for (auto& p : item.pieces)
      if (p.endpoint.empty()) co_return fail(errc::invalid_params);
    if (!item.client_id.empty()) {
      auto reg = co_await s_->registrations.get(item.client_id);
      if (!reg) {
        if (mc::is(reg.error(), errc::access_denied)) co_return denied();
        co_return reg.error();
      }
      for (auto& p : item.pieces) {
        if (p.endpoint != reg->transfer_endpoint) co_return denied();
        p.instance = reg->transfer_instance;
      }
      co_return result<void>{};
    }
    // Only the port is the requester's; the host is the connection's own peer address.
    std::string claimed_before, target_before;
    for (auto& p : item.pieces) {
      if (target_before.empty() || p.endpoint != claimed_before) {
        auto claimed = mc::endpoint::parse(p.endpoint);
        if (!claimed) co_return fail(errc::invalid_params);
        auto target = mc::endpoint::make(conn_.remote_address, claimed->port());
        if (!target) co_return denied();  // no (usable) peer address
        claimed_before = p.endpoint;
        target_before = target->str();
      }
      p.endpoint = target_before;
      p.instance = 0;
    }
    co_return result<void>{};
  }

  /// Checks that need no work, then the admission.
  admission admit_item(op kind, const item_request& item) {
    auto& l = s_->opts.limits;
    if (item.malformed) return {};
    if (kind == op::write && item_bytes(item) > l.max_remote_write_bytes) return {};
    if (kind == op::write && item.data.size() > l.max_inline_value_bytes) return {};
    auto bytes = item.pieces.empty() ? std::min(item.inline_max, l.max_inline_value_bytes) : item_bytes(item);
    return admit(bytes);
  }

  item_outcome refuse(const item_request& item) {
    if (item.malformed) return refused(errc::invalid_params);
    s_->counters->overloaded.fetch_add(1, std::memory_order_relaxed);
    return refused(errc::overloaded);
  }

  /// Runs one admitted write item (the admission ends with it).
  task<item_outcome> run_write(item_request item, admission ticket, clock::time_point deadline) {
    if (!ticket) co_return refuse(item);
    if (!item.data.empty()) {  // inline: the value is in the request
      auto size = item.data.size();
      // Admitted too late: the requester has answered TIMEOUT (see commit_batch).
      if (clock::now() >= deadline) co_return refused(errc::timeout);
      co_return outcome_of(co_await s_->dm.put(item.key, item.data, item.tag, item.version), size);
    }
    if (auto r = co_await resolve_all(item); !r) co_return item_outcome{r.error().value(), 0};
    auto size = total_length(item.pieces).value_or(0);
    auto room = co_await s_->serving.acquire_for(size, mc::time_left(deadline));
    if (!room) co_return item_outcome{room.error().value(), 0};
    auto left = mc::time_left(deadline);
    co_return outcome_of(
        co_await s_->dm.write_remote_parts(item.key, std::move(item.pieces), left, item.tag, item.version), size);
  }

  /// Runs the items of a batch write: inline ones (the value inside the
  /// request) each through dm.put, the others - admitted and resolved - in
  /// one write_remote_batch (one transfer batch from this requester, their
  /// commits and publishes together). Room for the transferred bytes is
  /// taken for them all at once (a batch larger than the cap runs alone);
  /// waiting for it counts against the deadline.
  task<std::vector<item_outcome>> run_writes(std::vector<std::pair<item_request, admission>> admitted,
                                             clock::time_point deadline) {
    std::vector<item_outcome> out(admitted.size());
    std::vector<data_manager::put_item> inline_items;
    std::vector<admission> inline_tickets;  // held until the inline puts end
    std::vector<std::size_t> inline_index;
    std::vector<remote_write_item> batch;
    std::vector<std::size_t> index;
    std::vector<std::uint64_t> sizes;
    std::uint64_t transfer_bytes = 0;
    for (std::size_t i = 0; i < admitted.size(); ++i) {
      auto& [item, ticket] = admitted[i];  // a batched item's ticket stays here until the batch is done
      if (!ticket) {
        out[i] = refuse(item);
        continue;
      }
      if (!item.data.empty()) {  // the request (and so item.data) lives until this call ends
        inline_items.push_back({std::move(item.key), item.data, item.tag, item.version});
        inline_tickets.push_back(std::move(ticket));
        inline_index.push_back(i);
        continue;
      }
      if (auto r = co_await resolve_all(item); !r) {
        out[i] = item_outcome{r.error().value(), 0};
        continue;
      }
      const auto size = total_length(item.pieces).value_or(0);
      transfer_bytes += size;
      sizes.push_back(size);
      index.push_back(i);
      batch.push_back({std::move(item.key), std::move(item.pieces), item.tag, item.version});
    }
    if (!inline_items.empty()) {
      // Admitted too late: the requester has answered TIMEOUT (see commit_batch).
      if (clock::now() >= deadline) {
        for (auto i : inline_index) out[i] = refused(errc::timeout);
      } else {
        auto done = co_await s_->dm.put_batch(std::move(inline_items));
        for (std::size_t k = 0; k < done.size(); ++k) {
          const auto i = inline_index[k];
          out[i] = outcome_of(done[k], admitted[i].first.data.size());
        }
      }
      inline_tickets.clear();
    }
    if (batch.empty()) co_return out;
    auto room = co_await s_->serving.acquire_for(transfer_bytes, mc::time_left(deadline));
    if (!room) {
      for (auto i : index) out[i] = item_outcome{room.error().value(), 0};
      co_return out;
    }
    auto rs = co_await s_->dm.write_remote_batch(std::move(batch), mc::time_left(deadline));
    for (std::size_t k = 0; k < rs.size(); ++k) out[index[k]] = outcome_of(rs[k], sizes[k]);
    co_return out;
  }

  /// Runs read items: admitted and resolved ones go to the DataManager in one
  /// read_remote_batch (one transfer batch for this requester); the results,
  /// inline values included, are written into `slot(i)` (called once per item).
  template <class Slot>
  task<void> run_reads(std::vector<item_request> items, Slot slot, clock::time_point deadline) {
    std::vector<admission> tickets;
    tickets.reserve(items.size());
    for (auto& item : items) tickets.push_back(admit_item(op::read, item));
    std::vector<item_outcome> early(items.size());
    std::vector<bool> decided(items.size(), false);
    // Items of one batch name one requester: the first resolved piece asks
    // the master, the others hit the cache.
    std::vector<remote_read_item> batch;
    std::vector<std::size_t> index;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!tickets[i]) {
        early[i] = refuse(items[i]);
        decided[i] = true;
        continue;
      }
      if (auto r = co_await resolve_all(items[i]); !r) {
        early[i] = item_outcome{r.error().value(), 0};
        decided[i] = true;
        continue;
      }
      batch.push_back({std::move(items[i].key), std::move(items[i].pieces), items[i].inline_max});
      index.push_back(i);
    }
    auto& l = s_->opts.limits;
    // Room for what may be transferred (descriptors' bytes); waiting for it
    // counts against the request's deadline.
    std::uint64_t transfer_bytes = 0;
    for (auto& b : batch) transfer_bytes += total_length(b.dest).value_or(0);
    auto room = co_await s_->serving.acquire_for(transfer_bytes, mc::time_left(deadline));
    std::vector<bool> starved(batch.size(), false);
    if (!room) {  // inline answers only: nothing is transferred without room
      for (std::size_t k = 0; k < batch.size(); ++k) {
        starved[k] = !batch[k].dest.empty();
        batch[k].dest.clear();
      }
    }
    auto left = mc::time_left(deadline);
    auto out =
        co_await s_->dm.read_remote_batch(std::move(batch), left, l.max_inline_value_bytes, l.max_inline_reply_bytes);
    for (std::size_t i = 0; i < items.size(); ++i)
      if (decided[i]) set_result(slot(i), early[i]);
    std::uint64_t copied = 0;
    for (std::size_t k = 0; k < out.size(); ++k) {
      ItemResult::Builder b = slot(index[k]);
      auto& o = out[k];
      if (starved[k] && !o.inline_value && o.value.has_error() && mc::is(o.value.error(), errc::invalid_params))
        o.value = room.error();
      set_result(b, item_outcome{o.value ? 0 : o.value.error().value(), o.size});
      if (!o.value || !o.inline_value) continue;
      // Copied once, from the tier straight into the reply message.
      auto data = b.initData(static_cast<unsigned>(o.size));
      auto r = co_await o.inline_value->read_into({reinterpret_cast<std::byte*>(data.begin()), data.size()});
      if (!r) {
        b.setCode(r.error().value());
        b.disownData();
      }
      s_->dm.count_read(r ? result<std::uint64_t>(o.size) : result<std::uint64_t>(r.error()));
      copied += o.size;
      if (copied >= (1u << 20)) {  // never more than ~1 MiB of copies without yielding the thread
        copied = 0;
        co_await boost::asio::post(co_await boost::asio::this_coro::executor, boost::asio::use_awaitable);
      }
    }
  }

  task<result<void>> do_read(ReadRemoteDataContext ctx) {
    auto p = ctx.getParams();
    auto deadline = clock::now() + request_timeout(p.getTimeoutMs());
    std::vector<item_request> items;
    items.push_back(read_request(p.getItem()));
    auto results = ctx.getResults();
    co_await run_reads(
        std::move(items), [results](std::size_t) mutable { return results.initResult(); }, deadline);
    co_return result<void>{};
  }

  task<result<void>> do_write(WriteRemoteDataContext ctx) {
    auto p = ctx.getParams();
    auto deadline = clock::now() + request_timeout(p.getTimeoutMs());
    auto item = write_request(p.getItem());
    auto ticket = admit_item(op::write, item);
    auto o = co_await run_write(std::move(item), std::move(ticket), deadline);
    set_result(ctx.getResults().initResult(), o);
    co_return result<void>{};
  }

  // A batch is one RPC with a result per item; every item is admitted (or
  // refused) before any runs.
  task<result<void>> do_batch_read(BatchReadRemoteDataContext ctx) {
    auto p = ctx.getParams();
    auto list = p.getItems();
    if (list.size() > max_batch_items) co_return fail(errc::invalid_params);
    auto deadline = clock::now() + request_timeout(p.getTimeoutMs());
    std::vector<item_request> items;
    items.reserve(list.size());
    for (auto it : list) items.push_back(read_request(it));
    auto res = ctx.getResults().initResults(list.size());
    co_await run_reads(
        std::move(items), [res](std::size_t i) mutable { return res[static_cast<unsigned>(i)]; }, deadline);
    co_return result<void>{};
  }

  task<result<void>> do_batch_write(BatchWriteRemoteDataContext ctx) {
    auto p = ctx.getParams();
    auto list = p.getItems();
    if (list.size() > max_batch_items) co_return fail(errc::invalid_params);
    auto deadline = clock::now() + request_timeout(p.getTimeoutMs());
    std::vector<std::pair<item_request, admission>> admitted;
    admitted.reserve(list.size());
    for (auto it : list) {
      auto item = write_request(it);
      auto ticket = admit_item(op::write, item);
      admitted.emplace_back(std::move(item), std::move(ticket));
    }
    auto out = co_await run_writes(std::move(admitted), deadline);
    auto res = ctx.getResults().initResults(static_cast<unsigned>(out.size()));
    for (unsigned i = 0; i < out.size(); ++i) set_result(res[i], out[i]);
    co_return result<void>{};
  }

  task<result<void>> do_remove(RemoveContext ctx) {
    std::string key = str(ctx.getParams().getKey());
    auto r = co_await s_->dm.remove(key);
    ctx.getResults().initResult().setCode(r ? 0 : r.error().value());
    co_return result<void>{};
  }

  mc::rpc::connection_info conn_;
  std::shared_ptr<shared_state> s_;
  load load_;  // this connection's items in flight (serving thread only)
};

}  // namespace

client_service_options service_options_of(const client_options& o) {
  client_service_options s;
  s.master_address = o.master_server_address;
  s.cluster_id = o.cluster_id;
  s.etcd_security = o.etcd_security;
  s.master_timeout = o.rpc_timeout;
  s.limits = o.limits;
  return s;
}

std::shared_ptr<const client_service_counters> add_client_service(mc::rpc::server& server, data_manager& dm,
                                                                  client_service_options opts,
                                                                  mc::transfer::engine* calls) {
  auto shared = std::make_shared<shared_state>(dm, std::move(opts));
  server.add_service(client_service_name, mc::rpc::make_connection_service<client_service_impl>(shared));
  // Calls carry no credentials: with RPC authentication on, reads and writes stay on the RPC.
  if (calls && !mc::rpc::auth_enabled())
    calls->set_call_handler(
        [shared](mc::transfer::call_request q) { return detail::serve_call(shared, std::move(q)); });
  return shared->counters;
}

}  // namespace mc::store
