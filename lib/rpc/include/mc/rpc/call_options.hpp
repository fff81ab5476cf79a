#pragma once
/// Per-call settings of RPC clients. KJ-free.
#include "mc/runtime/deadline.hpp"

#include <chrono>

namespace mc::rpc {

/// The spec's RPC timeout: every call carries a deadline, 10 s unless told.
inline constexpr mc::duration default_call_timeout = std::chrono::seconds(10);

/// Options of one call.
struct call_options {
  /// Relative deadline. On expiry the caller gets errc::timeout and the call is
  /// cancelled on the server (its coroutine receives terminal cancellation).
  mc::duration timeout = default_call_timeout;
};

}  // namespace mc::rpc
