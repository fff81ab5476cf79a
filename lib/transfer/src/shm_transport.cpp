// Same-host transport (placeholder until the next commit).
#include "engine_impl.hpp"

namespace mc::transfer::detail {
namespace {
class shm_transport final : public transport {
 public:
  transport_kind kind() const noexcept override { return transport_kind::same_host; }
  task<void> execute(thread_state&, const std::string&, std::span<transfer_item*> items) override {
    for (auto* it : items) it->finish(make_error_code(errc::unsupported));
    co_return;
  }
};
}  // namespace
std::unique_ptr<transport> make_shm_transport(engine_impl&) { return std::make_unique<shm_transport>(); }

struct shm_server::state {};
shm_server::shm_server(engine_impl&) {}
shm_server::~shm_server() = default;
mc::result<void> shm_server::listen(const std::string&) { return {}; }
void shm_server::stop() noexcept {}
}  // namespace mc::transfer::detail
