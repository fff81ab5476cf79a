// Built when libibverbs is not available: protocol "rdma" is refused at
// startup; RDMA handshakes from peers are answered "unsupported" so that
// they fall back to TCP.
#include "engine_impl.hpp"
#include "io.hpp"
#include "rdma.hpp"
#include "wire.hpp"

#include <stdexcept>

namespace mc::transfer::detail {

class rdma_context {};
class rdma_thread {};

bool rdma_built() noexcept { return false; }

std::shared_ptr<rdma_context> make_rdma_context(const engine_options&) {
  throw std::invalid_argument("transfer: protocol 'rdma': this build has no verbs support");
}
std::unique_ptr<transport> make_rdma_transport(engine_impl&) { return nullptr; }
mc::result<added_region> rdma_register(engine_impl&, void*, std::size_t, region_access, bool,
                                       std::shared_ptr<const shared_memory>) {
  return fail(errc::unsupported);
}
std::size_t rdma_fence_served(rdma_context&, const std::string&) noexcept { return 0; }
std::size_t rdma_fence_thread(thread_state&, const std::string&) noexcept { return 0; }
void rdma_deregister(rdma_context&, std::uint64_t) noexcept {}

task<bool> rdma_serve(engine_impl& eng, boost::asio::ip::tcp::socket& s, const header& h, std::span<const std::byte>,
                      std::shared_ptr<void>&) {
  header r;
  r.request_id = h.request_id;
  if (h.op == wire_op::rdma_check) {
    const auto need = (h.flags & grant_write) ? region_access::remote_write : region_access::remote_read;
    auto e = eng.registry_->find(h.address, h.length, h.token, need);
    r.op = wire_op::rdma_check_resp;
    r.status = static_cast<std::int32_t>(e ? errc::ok : errc::access_denied);
  } else if (h.op == wire_op::rdma_rkey && h.length == 0) {
    r.op = wire_op::rdma_rkey_resp;
    r.status = static_cast<std::int32_t>(errc::unsupported);
  } else if (h.op == wire_op::rdma_connect) {  // its payload was read by the caller
    r.op = wire_op::rdma_connect_resp;
    r.status = static_cast<std::int32_t>(errc::unsupported);
  } else {
    co_return false;
  }
  header_bytes hb;
  encode(r, hb);
  co_return static_cast<bool>(co_await send_all(s, hb.data(), hb.size()));
}

void rdma_device_stats_of(const rdma_context&, std::vector<rdma_device_stats>&) {}
void rdma_close_thread(thread_state&) noexcept {}
void rdma_release_thread(thread_state&) noexcept {}

}  // namespace mc::transfer::detail
