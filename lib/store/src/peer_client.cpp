#include "mc/store/peer_client.hpp"

#include "client_service.capnp.h"
#include "mc/rpc/capnp.hpp"
#include "mc/store/client_service.hpp"

#include <algorithm>

namespace mc::store {
namespace {

void fill(RemoteBuffer::Builder b, const mc::transfer::remote_buffer& r) {
  b.setEndpoint(r.endpoint);
  b.setAddress(r.address);
  b.setLength(r.length);
  b.setToken(r.token);
}

// A read's reply: success only with exactly the length we asked for.
peer_read_result read_result(ItemResult::Reader r, std::uint64_t asked) {
  peer_read_result out;
  out.size_hint = r.getSize();
  auto code = from_wire_code(r.getCode());
  if (!code) out.value = code.error();
  else if (r.getSize() != asked) out.value = make_error_code(errc::rpc_fail);
  else out.value = asked;
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
  auto c = co_await connect_peer(rpc_endpoint);
  if (!c) co_return peer_read_result{c.error(), 0};
  auto req = c->readRemoteDataRequest();
  auto item = req.initItem();
  item.setKey(key);
  item.setClientId(requester_id_);
  fill(item.initDest(), dest);
  req.setTimeoutMs(timeout_ms(timeout_));
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return peer_read_result{r.error(), 0};
  co_return read_result(r->getResult(), dest.length);
}

task<result<void>> peer_client::write_remote(std::string rpc_endpoint, std::string key,
                                             mc::transfer::remote_buffer src) {
  auto c = co_await connect_peer(rpc_endpoint);
  if (!c) co_return c.error();
  auto req = c->writeRemoteDataRequest();
  auto item = req.initItem();
  item.setKey(key);
  item.setClientId(requester_id_);
  fill(item.initSrc(), src);
  req.setTimeoutMs(timeout_ms(timeout_));
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return r.error();
  co_return from_wire_code(r->getResult().getCode());
}

task<result<std::vector<peer_read_result>>> peer_client::batch_read_remote(std::string rpc_endpoint,
                                                                           std::vector<peer_item> items) {
  if (items.size() > max_batch_items) co_return fail(errc::invalid_params);
  auto c = co_await connect_peer(rpc_endpoint);
  if (!c) co_return c.error();
  auto req = c->batchReadRemoteDataRequest();
  auto list = req.initItems(static_cast<unsigned>(items.size()));
  for (unsigned i = 0; i < items.size(); ++i) {
    list[i].setKey(items[i].key);
    list[i].setClientId(requester_id_);
    fill(list[i].initDest(), items[i].buffer);
  }
  req.setTimeoutMs(timeout_ms(timeout_));
  auto r = co_await mc::rpc::call(req.send(), timeout_);
  if (!r) co_return r.error();
  auto results = r->getResults();
  if (results.size() != items.size()) co_return fail(errc::rpc_fail);  // checked before use
  std::vector<peer_read_result> out;
  out.reserve(items.size());
  for (unsigned i = 0; i < results.size(); ++i) out.push_back(read_result(results[i], items[i].buffer.length));
  co_return out;
}

task<result<std::vector<result<void>>>> peer_client::batch_write_remote(std::string rpc_endpoint,
                                                                        std::vector<peer_item> items) {
  if (items.size() > max_batch_items) co_return fail(errc::invalid_params);
  auto c = co_await connect_peer(rpc_endpoint);
  if (!c) co_return c.error();
  auto req = c->batchWriteRemoteDataRequest();
  auto list = req.initItems(static_cast<unsigned>(items.size()));
  for (unsigned i = 0; i < items.size(); ++i) {
    list[i].setKey(items[i].key);
    list[i].setClientId(requester_id_);
    fill(list[i].initSrc(), items[i].buffer);
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
