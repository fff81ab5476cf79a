#include "mc/store/client_service.hpp"

#include "client_service.capnp.h"
#include "mc/rpc/capnp.hpp"
#include "mc/runtime/when_all.hpp"
#include "mc/store/data_manager.hpp"
#include "mc/transfer/types.hpp"

#include <algorithm>
#include <chrono>

namespace mc::store {
namespace {

mc::transfer::remote_buffer to_remote(RemoteBuffer::Reader r) {
  return {r.getEndpoint(), r.getAddress(), r.getLength(), r.getToken()};
}

mc::duration request_timeout(std::uint32_t ms) {
  if (ms == 0 || ms > max_request_timeout_ms) ms = max_request_timeout_ms;
  return std::chrono::milliseconds(ms);
}

struct item_outcome {
  std::int32_t code = 0;
  std::uint64_t size = 0;
};

item_outcome outcome_of(const result<void>& r, std::uint64_t size) {
  return {r ? 0 : r.error().value(), size};
}

void set_result(ItemResult::Builder b, const item_outcome& o) {
  b.setCode(o.code);
  b.setSize(o.size);
}

class client_service_impl final : public mc::rpc::service<ClientService> {
 public:
  client_service_impl(mc::executor ex, data_manager& dm) : service(std::move(ex)), dm_(dm) {}

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
    std::string key = ctx.getParams().getKey();
    if (auto k = check_key(key); !k) {
      res.setCode(k.error().value());
      return kj::READY_NOW;
    }
    auto s = dm_.size_of(key);
    res.setCode(s ? 0 : s.error().value());
    res.setSize(s ? *s : 0);
    return kj::READY_NOW;
  }
  kj::Promise<void> remove(RemoveContext ctx) override { return serve(ctx, do_remove(ctx)); }

 private:
  task<item_outcome> read_one(std::string key, mc::transfer::remote_buffer dest, mc::duration timeout) {
    std::uint64_t size = 0;
    auto r = co_await dm_.read_remote(key, std::move(dest), timeout, &size);
    co_return item_outcome{r ? 0 : r.error().value(), size};
  }
  task<item_outcome> write_one(std::string key, mc::transfer::remote_buffer src, mc::duration timeout) {
    auto size = src.length;
    co_return outcome_of(co_await dm_.write_remote(key, std::move(src), timeout), size);
  }

  task<result<void>> do_read(ReadRemoteDataContext ctx) {
    auto p = ctx.getParams();
    auto item = p.getItem();
    auto o = co_await read_one(item.getKey(), to_remote(item.getDest()), request_timeout(p.getTimeoutMs()));
    set_result(ctx.getResults().initResult(), o);
    co_return result<void>{};
  }

  task<result<void>> do_write(WriteRemoteDataContext ctx) {
    auto p = ctx.getParams();
    auto item = p.getItem();
    auto o = co_await write_one(item.getKey(), to_remote(item.getSrc()), request_timeout(p.getTimeoutMs()));
    set_result(ctx.getResults().initResult(), o);
    co_return result<void>{};
  }

  // A batch is one RPC with a result per item; items run concurrently.
  template <class Context, class Item>
  task<result<void>> do_batch(Context ctx, Item item) {
    auto p = ctx.getParams();
    auto items = p.getItems();
    if (items.size() > max_batch_items) co_return fail(errc::invalid_params);
    auto timeout = request_timeout(p.getTimeoutMs());
    std::vector<task<item_outcome>> work;
    for (auto it : items) work.push_back(item(it, timeout));
    auto out = co_await mc::when_all(std::move(work));
    auto res = ctx.getResults().initResults(static_cast<unsigned>(out.size()));
    for (unsigned i = 0; i < out.size(); ++i) set_result(res[i], out[i]);
    co_return result<void>{};
  }

  task<result<void>> do_batch_read(BatchReadRemoteDataContext ctx) {
    return do_batch(ctx, [this](ReadItem::Reader it, mc::duration t) {
      return read_one(it.getKey(), to_remote(it.getDest()), t);
    });
  }

  task<result<void>> do_batch_write(BatchWriteRemoteDataContext ctx) {
    return do_batch(ctx, [this](WriteItem::Reader it, mc::duration t) {
      return write_one(it.getKey(), to_remote(it.getSrc()), t);
    });
  }

  task<result<void>> do_remove(RemoveContext ctx) {
    std::string key = ctx.getParams().getKey();
    auto r = co_await dm_.remove(key);
    ctx.getResults().initResult().setCode(r ? 0 : r.error().value());
    co_return result<void>{};
  }

  data_manager& dm_;
};

}  // namespace

void add_client_service(mc::rpc::server& server, data_manager& dm) {
  server.add_service(client_service_name, mc::rpc::make_service<client_service_impl>(std::ref(dm)));
}

}  // namespace mc::store
