// Built without libibverbs: no RPC over RDMA. RDMA hellos from peers are
// answered "no RDMA control plane here" so that they continue over TCP.
#include "negotiate.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <cstring>

namespace mc::rpc::detail {

namespace asio = boost::asio;

bool rdma_rpc_built() noexcept { return false; }

bool rdma_rpc_open(const std::vector<std::string>&, std::string* message) {
  *message = "MC_RPC_PROTOCOL=rdma: this build has no RDMA support (libibverbs was not found at build time)";
  return false;
}

std::string rdma_rpc_device_name() { return {}; }

mc::task<mc::result<kj::Own<stream_base>>> rdma_accept(asio::ip::tcp::socket& s, const std::byte*, bool) {
  std::byte out[hello_reply_size] = {};
  std::memcpy(out, reply_magic, 8);
  out[8] = std::byte{1};  // status 1 (little endian): no RDMA control plane
  auto [ec, n] = co_await asio::async_write(s, asio::buffer(out), asio::as_tuple(asio::use_awaitable));
  if (ec || n != sizeof out) co_return mc::fail(mc::errc::rpc_fail);
  co_return kj::Own<stream_base>();
}

mc::task<mc::result<kj::Own<stream_base>>> rdma_connect(asio::ip::tcp::socket&, std::string* message) {
  *message = "RPC over RDMA is not part of this build";
  co_return mc::fail(mc::errc::unsupported);
}

}  // namespace mc::rpc::detail
