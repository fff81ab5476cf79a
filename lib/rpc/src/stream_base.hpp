#pragma once
// The byte stream under one RPC connection: TCP (asio_stream) or RDMA
// SEND/RECV (rdma_stream). What the server's sweeper and the client cache need
// beyond kj::AsyncIoStream.
#include "mc/runtime/deadline.hpp"

#include <kj/async-io.h>

namespace mc::rpc::detail {

class stream_base : public kj::AsyncIoStream {
 public:
  /// Last time bytes moved in either direction.
  virtual mc::time_point last_activity() const noexcept = 0;
  /// Shuts the stream down both ways: pending and future reads see EOF,
  /// writes fail. The owner notices through its normal error path.
  virtual void close() noexcept = 0;
  /// "tcp" or "rdma".
  virtual const char* transport() const noexcept = 0;
};

}  // namespace mc::rpc::detail
