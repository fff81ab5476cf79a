#pragma once
// A checked TestService.echo call and a TestService.sleep call, shared by the
// rpc and rdma test suites.
#include "mc/rpc/capnp.hpp"
#include "test_service.hpp"
#include "test_support.hpp"

#include <cstdint>
#include <string>

namespace mc::rpc::test {

/// Echoes `size` random bytes (from `seed`) to `ep` within `timeout`;
/// errc::internal_error when the reply differs from what was sent.
inline mc::task<mc::result<void>> echo_call(std::string ep, std::size_t size, std::uint64_t seed,
                                            mc::duration timeout) {
  auto cli = co_await mc::rpc::connect<TestService>(ep, "test");
  if (!cli) co_return cli.error();
  auto bytes = mc::test::random_bytes(size, seed);
  auto req = cli->echoRequest();
  req.setData(kj::arrayPtr(bytes.data(), bytes.size()));
  auto resp = co_await mc::rpc::call(req.send(), timeout);
  if (!resp) co_return resp.error();
  if (resp->getData().size() != size ||
      mc::test::checksum(resp->getData().begin(), resp->getData().size()) != mc::test::checksum(bytes.data(), size))
    co_return mc::fail(mc::errc::internal_error);
  co_return mc::result<void>{};
}

/// echo_call of `size` bytes seeded by `size`, under the default call timeout.
inline mc::task<mc::result<void>> echo(std::string ep, std::size_t size) {
  return echo_call(std::move(ep), size, size, mc::rpc::default_call_timeout);
}

/// TestService.sleep(ms) on `ep` under `timeout`: the server answers after
/// `ms`, nothing crosses the connection meanwhile.
inline mc::task<mc::result<void>> sleep_call(std::string ep, std::uint32_t ms, mc::duration timeout) {
  auto cli = co_await mc::rpc::connect<TestService>(ep, "test");
  if (!cli) co_return cli.error();
  auto req = cli->sleepRequest();
  req.setMs(ms);
  auto resp = co_await mc::rpc::call(req.send(), timeout);
  if (!resp) co_return resp.error();
  co_return mc::result<void>{};
}

}  // namespace mc::rpc::test
