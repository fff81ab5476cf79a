#pragma once
/// The P2P master process core: the metadata state served over RPC, plus a
/// periodic TTL sweep. KJ-free.
#include "mc/master/metadata.hpp"
#include "mc/master/options.hpp"
#include "mc/runtime/error.hpp"

#include <memory>
#include <string>

namespace mc::runtime {
class runtime;
}

namespace mc::master {

/// Serves `Master` (schema/master.capnp) as RPC service "master".
/// Lifetime: the runtime must be running for start() and stop(); call both
/// from a non-runtime thread.
class master_server {
 public:
  master_server(mc::runtime::runtime& rt, const master_options& opts);
  ~master_server();
  master_server(const master_server&) = delete;
  master_server& operator=(const master_server&) = delete;

  /// Binds the RPC port and starts the TTL sweeper. Error message in message().
  result<void> start();
  /// Stops serving (drains in-flight calls) and the sweeper. Idempotent.
  void stop();
  std::uint16_t port() const;
  const std::string& message() const;
  metadata& state() noexcept;

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace mc::master
