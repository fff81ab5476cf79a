#pragma once
/// Project-wide error codes (values follow Mooncake's `ErrorCode` where one
/// exists) and `mc::result<T>`.
#include <boost/system/error_code.hpp>
#include <boost/system/result.hpp>

#include <optional>
#include <string_view>
#include <system_error>

namespace mc {

/// Error codes. Negative values; names and numbers follow Mooncake where it
/// has the same concept, the rest live in -1100.. (runtime) and -1200.. (I/O).
enum class errc : int {
  ok = 0,
  internal_error = -1,
  buffer_overflow = -10,
  shard_index_out_of_range = -100,
  segment_not_found = -101,
  segment_already_exists = -102,
  no_available_handle = -200,
  invalid_version = -300,
  invalid_key = -400,
  write_fail = -500,
  invalid_params = -600,
  invalid_write = -700,
  invalid_read = -701,
  invalid_replica = -702,
  replica_is_not_ready = -703,
  object_not_found = -704,
  object_already_exists = -705,
  object_has_lease = -706,
  transfer_fail = -800,
  rpc_fail = -900,
  client_not_found = -1001,
  unavailable_in_current_status = -1010,
  unavailable_in_current_mode = -1011,
  // Runtime (not in Mooncake).
  timeout = -1100,
  cancelled = -1101,
  shutting_down = -1102,
  unsupported = -1103,
  access_denied = -1104,
  out_of_range = -1105,
  too_large = -1106,
  /// Over a server-side limit (in-flight keys/bytes, request size, ...): the
  /// request was refused before any work; retry later or with less.
  overloaded = -1107,
  /// A replicated put committed some but not all of the copies it asked
  /// for: the committed copies stay readable and the master repairs the rest.
  replication_incomplete = -1108,
  /// A put lost to a newer put of the same key: values are ordered by the
  /// version taken when their put started, and a newer one was already
  /// committed here or published elsewhere. This put's value was discarded;
  /// the newer value stays (see "Consistency model" in the README).
  superseded = -1109,
  // I/O.
  io_error = -1200,
  misaligned = -1201,
  no_space = -1202,
  memlock_limit = -1203,
  short_io = -1204,
};

/// The single error category of the project.
const boost::system::error_category& mc_category() noexcept;

/// SCREAMING_CASE name ("OBJECT_NOT_FOUND"), or "UNKNOWN_ERROR".
std::string_view error_name(errc e) noexcept;
/// Human message for a code.
std::string_view error_message(errc e) noexcept;
/// The errc carried by `ec`, if it belongs to mc_category(); else internal_error
/// (timeouts and aborts from asio map to timeout / cancelled).
errc to_errc(const boost::system::error_code& ec) noexcept;
/// The errc whose value is `value` when it is one of the codes above (0 =
/// errc::ok), else nullopt. Use it for every code that crosses a wire: an
/// unknown code from a peer must not be passed on as if it were meaningful.
std::optional<errc> errc_from_value(int value) noexcept;
/// Parse an error name back (used by RPC error propagation); internal_error if unknown.
errc errc_from_name(std::string_view name) noexcept;

inline boost::system::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), mc_category()}; }

/// Result of a fallible operation: a value or an error_code.
template <class T>
using result = boost::system::result<T, boost::system::error_code>;

/// Shorthand to build an error result: `return mc::fail(errc::timeout);`
inline boost::system::error_code fail(errc e) noexcept { return make_error_code(e); }

/// True when `ec` carries code `e` of the project category.
inline bool is(const boost::system::error_code& ec, errc e) noexcept {
  return ec.category() == mc_category() && ec.value() == static_cast<int>(e);
}

}  // namespace mc

namespace boost::system {
template <>
struct is_error_code_enum<mc::errc> : std::true_type {};
}  // namespace boost::system
