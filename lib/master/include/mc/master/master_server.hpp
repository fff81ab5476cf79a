#pragma once
/// The P2P master process core: the metadata state served over RPC, plus a
/// periodic TTL sweep. KJ-free.
#include "mc/master/metadata.hpp"
#include "mc/master/options.hpp"
#include "mc/runtime/error.hpp"

#include <memory>
#include <string>
#include <vector>

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

  /// Binds the RPC port (and the publish call port, see
  /// publish_call_port()) and starts the TTL sweeper; with ha_backend "etcd",
  /// also campaigns for the leadership (mc/master/ha.hpp): until elected,
  /// and whenever its lease may have lapsed, every call is refused with
  /// unavailable_in_current_status ("not the leader"). Errors: the RPC
  /// server's (the port cannot be bound), invalid_params (MC_RPC_PROTOCOL,
  /// or HA settings: etcd endpoints, TLS files, password file that do not
  /// load); the reason in message().
  result<void> start();
  /// Stops serving (drains in-flight calls) and the sweeper; an HA leader
  /// resigns first. Idempotent.
  void stop();
  /// True when started with ha_backend "etcd".
  bool ha_enabled() const noexcept;
  /// HA: elections this process has won.
  std::uint64_t elections() const noexcept;
  /// HA: watches of the leader key that failed while standing by (each
  /// followed by a read of the key).
  std::uint64_t leader_watch_failures() const noexcept;
  /// True when this master answers calls (always, without HA).
  bool leading() const noexcept;
  /// HA: true while a new leader waits for its clients to re-publish.
  bool rebuilding() const noexcept;
  /// HA: the leader's term (etcd revision of its election); 0 otherwise.
  std::uint64_t term() const noexcept;
  /// HA: the leader's address as last seen in etcd ("" without HA).
  std::string leader() const;
  std::uint16_t port() const;
  /// The TCP port of publish calls (master_options::publish_calls; told to
  /// clients at registration), 0 when off: not asked for, RPC
  /// authentication on, no free port, or stopped. Thread-safe.
  std::uint16_t publish_call_port() const noexcept;
  const std::string& message() const;
  metadata& state() noexcept;

  struct impl;

 private:
  void start_ha(std::vector<std::string> endpoints, etcd_security security);
  result<void> start_publish_calls();
  std::unique_ptr<impl> impl_;
};

}  // namespace mc::master
