// In-process transport: the peer engine lives in this process; copy with
// memcpy after the same token / range checks a remote target would make.
#include "peer_memory.hpp"
#include "engine_impl.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>

namespace mc::transfer::detail {
namespace {

std::mutex& dir_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<std::string, std::weak_ptr<registry>>& directory() {
  static std::unordered_map<std::string, std::weak_ptr<registry>> d;
  return d;
}

class inproc_transport final : public transport {
 public:
  explicit inproc_transport(engine_impl& eng) : eng_(eng) {}
  transport_kind kind() const noexcept override { return transport_kind::in_process; }

  task<void> execute(thread_state&, const std::string& endpoint, std::span<transfer_item*> items) override {
    auto reg = inproc_lookup(endpoint);
    if (!reg) {
      for (auto* it : items) it->finish(make_error_code(errc::unsupported));
      co_return;
    }
    for (auto* it : items) {
      auto r = co_await copy(*reg, *it);
      if (!r) co_return;  // cancelled: the engine reports timeout / shutting_down
      it->finish(*r);
    }
  }

 private:
  /// Copies in chunks of at most 1 MiB and yields to the runtime between
  /// them, so a large copy never monopolises the thread and an unregistration
  /// waits for at most one chunk. nullopt when cancelled.
  task<std::optional<boost::system::error_code>> copy(const registry& reg, const transfer_item& it) {
    const auto need = it.op == op_kind::read ? region_access::remote_read : region_access::remote_write;
    auto e = reg.find(it.address, it.length, it.token, need);
    if (!e) co_return e.error();
    const std::uint64_t chunk = std::min<std::uint64_t>(eng_.opts_.slice_size, max_copy_chunk);
    for (std::uint64_t off = 0; off < it.length; off += chunk) {
      if (off != 0 && !co_await yield_to_runtime()) co_return std::nullopt;
      auto n = static_cast<std::size_t>(std::min(chunk, it.length - off));
      access_guard g(**e);
      if (!g) co_return make_error_code(errc::access_denied);  // revoked meanwhile
      std::byte* remote = (*e)->ptr(it.address + off);
      peer_memory_scope peer_bytes;  // see peer_memory.hpp
      if (it.op == op_kind::read)
        std::memmove(it.local + off, remote, n);
      else
        std::memmove(remote, it.local + off, n);
    }
    co_return boost::system::error_code{};
  }
  engine_impl& eng_;
};

}  // namespace

std::unique_ptr<transport> make_inproc_transport(engine_impl& eng) { return std::make_unique<inproc_transport>(eng); }

void inproc_publish(const std::string& endpoint, std::weak_ptr<registry> reg) {
  std::lock_guard lk(dir_mutex());
  directory()[endpoint] = std::move(reg);
}

void inproc_withdraw(const std::string& endpoint) {
  std::lock_guard lk(dir_mutex());
  directory().erase(endpoint);
}

std::shared_ptr<registry> inproc_lookup(const std::string& endpoint) {
  std::lock_guard lk(dir_mutex());
  auto it = directory().find(endpoint);
  return it == directory().end() ? nullptr : it->second.lock();
}

}  // namespace mc::transfer::detail
