#include "mc/runtime/error.hpp"

#include <boost/asio/error.hpp>

#include <array>
#include <string>

namespace mc {
namespace {

struct entry {
  errc code;
  std::string_view name;
  std::string_view message;
};

constexpr std::array entries{
    entry{errc::ok, "OK", "success"},
    entry{errc::internal_error, "INTERNAL_ERROR", "internal error"},
    entry{errc::buffer_overflow, "BUFFER_OVERFLOW", "buffer too small for the value"},
    entry{errc::shard_index_out_of_range, "SHARD_INDEX_OUT_OF_RANGE", "shard index out of range"},
    entry{errc::segment_not_found, "SEGMENT_NOT_FOUND", "memory segment not found"},
    entry{errc::segment_already_exists, "SEGMENT_ALREADY_EXISTS", "memory segment already exists"},
    entry{errc::no_available_handle, "NO_AVAILABLE_HANDLE", "no space available in any tier"},
    entry{errc::invalid_version, "INVALID_VERSION", "invalid version"},
    entry{errc::invalid_key, "INVALID_KEY", "invalid key"},
    entry{errc::write_fail, "WRITE_FAIL", "write failed"},
    entry{errc::invalid_params, "INVALID_PARAMS", "invalid parameters"},
    entry{errc::invalid_write, "INVALID_WRITE", "invalid write"},
    entry{errc::invalid_read, "INVALID_READ", "invalid read"},
    entry{errc::invalid_replica, "INVALID_REPLICA", "invalid replica"},
    entry{errc::replica_is_not_ready, "REPLICA_IS_NOT_READY", "replica is not ready"},
    entry{errc::object_not_found, "OBJECT_NOT_FOUND", "object not found"},
    entry{errc::object_already_exists, "OBJECT_ALREADY_EXISTS", "object already exists"},
    entry{errc::object_has_lease, "OBJECT_HAS_LEASE", "object has a lease"},
    entry{errc::transfer_fail, "TRANSFER_FAIL", "data transfer failed"},
    entry{errc::rpc_fail, "RPC_FAIL", "RPC failed"},
    entry{errc::client_not_found, "CLIENT_NOT_FOUND", "client not registered with the master"},
    entry{errc::unavailable_in_current_status, "UNAVAILABLE_IN_CURRENT_STATUS", "unavailable in the current status"},
    entry{errc::unavailable_in_current_mode, "UNAVAILABLE_IN_CURRENT_MODE",
          "unavailable in the current deployment mode"},
    entry{errc::timeout, "TIMEOUT", "deadline expired"},
    entry{errc::cancelled, "CANCELLED", "operation cancelled"},
    entry{errc::shutting_down, "SHUTTING_DOWN", "shutting down; no new work accepted"},
    entry{errc::unsupported, "UNSUPPORTED", "not supported"},
    entry{errc::access_denied, "ACCESS_DENIED", "access denied (bad token)"},
    entry{errc::out_of_range, "OUT_OF_RANGE", "address range outside a registered region"},
    entry{errc::too_large, "TOO_LARGE", "value or message too large"},
    entry{errc::overloaded, "OVERLOADED", "overloaded / over a server limit; retry later"},
    entry{errc::replication_incomplete, "REPLICATION_INCOMPLETE",
          "fewer copies committed than asked; those stay and are repaired"},
    entry{errc::superseded, "SUPERSEDED", "a newer put of the key won; this value was discarded"},
    entry{errc::io_error, "IO_ERROR", "I/O error"},
    entry{errc::misaligned, "MISALIGNED", "buffer, offset or length not aligned for O_DIRECT"},
    entry{errc::no_space, "NO_SPACE", "no space left on device"},
    entry{errc::memlock_limit, "MEMLOCK_LIMIT", "RLIMIT_MEMLOCK too small to register buffers (raise `ulimit -l`)"},
    entry{errc::short_io, "SHORT_IO", "short read or write"},
};

const entry* find(errc e) noexcept {
  for (const auto& x : entries)
    if (x.code == e) return &x;
  return nullptr;
}

class category_impl final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "mooncake"; }
  std::string message(int ev) const override {
    auto* e = find(static_cast<errc>(ev));
    if (!e) return "unknown error " + std::to_string(ev);
    return std::string(e->name) + ": " + std::string(e->message);
  }
};

}  // namespace

const boost::system::error_category& mc_category() noexcept {
  static const category_impl instance;
  return instance;
}

std::string_view error_name(errc e) noexcept {
  auto* x = find(e);
  return x ? x->name : "UNKNOWN_ERROR";
}

std::string_view error_message(errc e) noexcept {
  auto* x = find(e);
  return x ? x->message : "unknown error";
}

errc to_errc(const boost::system::error_code& ec) noexcept {
  if (!ec) return errc::ok;
  if (ec.category() == mc_category()) return static_cast<errc>(ec.value());
  if (ec == boost::asio::error::operation_aborted) return errc::cancelled;
  if (ec == boost::asio::error::timed_out) return errc::timeout;
  return errc::internal_error;
}

std::optional<errc> errc_from_value(int value) noexcept {
  if (auto* x = find(static_cast<errc>(value))) return x->code;
  return std::nullopt;
}

errc errc_from_name(std::string_view name) noexcept {
  for (const auto& x : entries)
    if (x.name == name) return x.code;
  return errc::internal_error;
}

}  // namespace mc
