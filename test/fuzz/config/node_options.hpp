// Shared by the fuzz targets `flags` and `toml_config`: the real option sets
// of mooncake_client and mooncake_master (mc::store::make_option_set +
// add_auth_options, mc::master::make_option_set), the validation the binaries
// run after parse() (resolve / validate, the auth token list), and a
// rendering of every option back into `--name=value` flags for round trips.
//
// Nothing here opens a file named by the input: check() refuses (returns
// false for) an option set whose tiered_backend_config is a path rather
// than inline JSON, and never reads auth_token_file.
//
// Thread-safety: none; one fuzz iteration at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "mc/config/auth.hpp"
#include "mc/config/options.hpp"
#include "mc/master/options.hpp"
#include "mc/rpc/auth.hpp"
#include "mc/runtime/deadline.hpp"
#include "mc/store/client_options.hpp"
#include "mc/tiered/tier_config.hpp"

namespace mc::fuzz {

inline void check_that(bool ok) {
  if (!ok) std::abort();
}

// The environment variables the option sets read: unset, so a run depends
// on its input only.
inline void clear_option_environment() {
  for (const char* v : {"MOONCAKE_DM_LOCK_SHARD_COUNT", "MC_AUTH_TOKEN", "MC_AUTH_TOKEN_FILE", "MC_RPC_PROTOCOL"})
    ::unsetenv(v);
}

// A parse outcome's invariants: errors, help and version carry a message;
// an error names the program.
inline void check_outcome(const mc::config::outcome& r, const std::string& program) {
  using kind = mc::config::outcome::kind;
  if (r.what == kind::run) return;
  check_that(!r.message.empty());
  if (r.what == kind::error) {
    check_that(r.message.rfind(program + ": ", 0) == 0);
    check_that(r.message.size() > program.size() + 2);
  }
}

// A duration option as the binaries use it: non-negative, at most
// max_duration, and convertible to steady_clock nanoseconds with room for
// the multiples the binaries form (mooncake_client: body timeout =
// 6 x http_read_timeout) and for now() + it.
inline void check_duration(std::chrono::milliseconds d) {
  check_that(d.count() >= 0);
  check_that(d <= mc::config::max_duration);
  const auto ns = std::chrono::duration_cast<mc::duration>(d);
  check_that(ns.count() <= INT64_MAX / 64);
}

struct client_cfg {
  mc::store::client_options o;
  mc::config::auth_options auth;
  mc::config::option_set set;
  client_cfg() : set(mc::store::make_option_set(o)) { mc::config::add_auth_options(set, auth); }
  client_cfg(const client_cfg&) = delete;
  client_cfg& operator=(const client_cfg&) = delete;

  // Every option as a flag `--name=value` (values as the parser reads them).
  std::vector<std::string> render() const {
    std::vector<std::string> a;
    auto s = [&](const char* n, const std::string& v) { a.push_back(std::string("--") + n + "=" + v); };
    auto u = [&](const char* n, std::uint64_t v) { s(n, std::to_string(v)); };
    auto d = [&](const char* n, std::chrono::milliseconds v) { s(n, std::to_string(v.count()) + "ms"); };
    s("deployment_mode", o.deployment_mode);
    s("client_id", o.client_id);
    s("master_server_address", o.master_server_address);
    s("host", o.host);
    s("local_hostname", o.local_hostname);
    u("port", o.port);
    u("client_rpc_port", o.client_rpc_port);
    u("rpc_thread_num", o.rpc_thread_num);
    s("protocol", o.protocol);
    s("device_names", o.device_names);
    s("tiered_backend_config", o.tiered_backend_config);
    u("dm_lock_shard_count", o.lock_shard_count);
    d("rpc_timeout", o.rpc_timeout);
    d("heartbeat_interval", o.heartbeat_interval);
    d("ha_membership_ttl", o.ha_membership_ttl);
    s("transfer_transport", o.transfer_transport);
    u("transfer_spread_bytes", o.transfer_spread_bytes);
    u("rpc_max_connections", o.rpc_max_connections);
    s("http_host", o.http_host);
    u("http_port", o.http_port);
    u("http_max_value_bytes", o.http_max_value_bytes);
    d("http_read_timeout", o.http_read_timeout);
    u("http_max_connections", o.http_max_connections);
    d("drain_grace", o.drain_grace);
    d("max_request_timeout", o.limits.max_request_timeout);
    u("max_remote_write_bytes", o.limits.max_remote_write_bytes);
    u("max_inflight_keys_per_connection", o.limits.max_inflight_keys_per_connection);
    u("max_inflight_bytes_per_connection", o.limits.max_inflight_bytes_per_connection);
    u("max_inflight_keys_per_peer", o.limits.max_inflight_keys_per_peer);
    u("max_inflight_bytes_per_peer", o.limits.max_inflight_bytes_per_peer);
    u("max_serving_bytes", o.limits.max_serving_bytes);
    u("max_inline_value_bytes", o.limits.max_inline_value_bytes);
    u("max_inline_reply_bytes", o.limits.max_inline_reply_bytes);
    u("inline_threshold", o.inline_threshold);
    u("max_inflight_bytes", o.max_inflight_bytes);
    u("rdma_bounce_bytes", o.rdma_bounce_bytes);
    u("max_batch_keys", o.max_batch_keys);
    s("attach", o.attach ? "true" : "false");
    u("attach_port", o.attach_port);
    s("auth_token", auth.token);
    s("auth_token_file", auth.token_file);
    return a;
  }

  bool same_as(const client_cfg& b) const {
    const auto &x = o, &y = b.o;
    return x.deployment_mode == y.deployment_mode && x.client_id == y.client_id &&
           x.master_server_address == y.master_server_address && x.host == y.host &&
           x.local_hostname == y.local_hostname && x.port == y.port && x.client_rpc_port == y.client_rpc_port &&
           x.rpc_thread_num == y.rpc_thread_num && x.protocol == y.protocol && x.device_names == y.device_names &&
           x.tiered_backend_config == y.tiered_backend_config && x.lock_shard_count == y.lock_shard_count &&
           x.rpc_timeout == y.rpc_timeout && x.heartbeat_interval == y.heartbeat_interval &&
           x.ha_membership_ttl == y.ha_membership_ttl && x.transfer_transport == y.transfer_transport &&
           x.transfer_spread_bytes == y.transfer_spread_bytes && x.rpc_max_connections == y.rpc_max_connections &&
           x.http_host == y.http_host && x.http_port == y.http_port &&
           x.http_max_value_bytes == y.http_max_value_bytes && x.http_read_timeout == y.http_read_timeout &&
           x.http_max_connections == y.http_max_connections && x.drain_grace == y.drain_grace &&
           x.limits.max_request_timeout == y.limits.max_request_timeout &&
           x.limits.max_remote_write_bytes == y.limits.max_remote_write_bytes &&
           x.limits.max_inflight_keys_per_connection == y.limits.max_inflight_keys_per_connection &&
           x.limits.max_inflight_bytes_per_connection == y.limits.max_inflight_bytes_per_connection &&
           x.limits.max_inflight_keys_per_peer == y.limits.max_inflight_keys_per_peer &&
           x.limits.max_inflight_bytes_per_peer == y.limits.max_inflight_bytes_per_peer &&
           x.limits.max_serving_bytes == y.limits.max_serving_bytes &&
           x.limits.max_inline_value_bytes == y.limits.max_inline_value_bytes &&
           x.limits.max_inline_reply_bytes == y.limits.max_inline_reply_bytes &&
           x.inline_threshold == y.inline_threshold && x.max_inflight_bytes == y.max_inflight_bytes &&
           x.rdma_bounce_bytes == y.rdma_bounce_bytes && x.max_batch_keys == y.max_batch_keys && x.attach == y.attach &&
           x.attach_port == y.attach_port && auth.token == b.auth.token && auth.token_file == b.auth.token_file;
  }

  // After a successful parse: the binary's validation (mc::store::resolve,
  // then the token list as apply_auth parses it). Returns false, checking
  // nothing, when resolve would read a file named by the input (a
  // tiered_backend_config that is not inline JSON). A validated set must be
  // one the node can run with.
  bool check() {
    if (!o.tiered_backend_config.empty()) {
      auto first = o.tiered_backend_config.find_first_not_of(" \t\r\n");
      if (first == std::string::npos || o.tiered_backend_config[first] != '{') return false;
    }
    for (auto d : {o.rpc_timeout, o.heartbeat_interval, o.ha_membership_ttl, o.http_read_timeout, o.drain_grace,
                   o.limits.max_request_timeout})
      check_duration(d);
    auto err = mc::store::resolve(o, set);
    if (!err.empty()) return true;  // the binary stops here with this message
    check_that(!o.tiers.empty() && mc::tiered::validate_tiers(o.tiers).has_value());
    check_that(o.protocol == "tcp" || o.protocol == "rdma");
    check_that(o.rpc_timeout.count() > 0 && o.heartbeat_interval.count() > 0 && o.http_read_timeout.count() > 0);
    check_that(o.inline_threshold <= o.limits.max_inline_value_bytes);
    check_that(o.ha_membership_ttl >= std::chrono::seconds(2) && o.ha_membership_ttl >= 3 * o.heartbeat_interval);
    for (auto& d : o.device_list) check_that(!d.empty());
    // What mooncake_client derives from the options (no overflow, UBSan
    // watches the arithmetic).
    const mc::duration body = std::max<mc::duration>(
        o.http_read_timeout * 6, std::chrono::duration_cast<mc::duration>(std::chrono::seconds(30)));
    check_that(body.count() > 0);
    if (!auth.token.empty() && auth.token_file.empty()) {
      std::string why;
      auto t = mc::rpc::parse_auth_tokens(auth.token, &why);
      check_that(t.has_value() ? !t->empty() : !why.empty());
    }
    return true;
  }
};

struct master_cfg {
  mc::master::master_options o;
  mc::config::option_set set;
  master_cfg() : set(mc::master::make_option_set(o)) {}
  master_cfg(const master_cfg&) = delete;
  master_cfg& operator=(const master_cfg&) = delete;

  std::vector<std::string> render() const {
    std::vector<std::string> a;
    auto s = [&](const char* n, const std::string& v) { a.push_back(std::string("--") + n + "=" + v); };
    auto u = [&](const char* n, std::uint64_t v) { s(n, std::to_string(v)); };
    auto d = [&](const char* n, std::chrono::milliseconds v) { s(n, std::to_string(v.count()) + "ms"); };
    s("deployment_mode", o.deployment_mode);
    s("rpc_address", o.rpc_address);
    u("rpc_port", o.rpc_port);
    u("rpc_thread_num", o.rpc_thread_num);
    d("client_ttl", o.client_ttl);
    d("client_drop_ttl", o.client_drop_ttl);
    u("max_key_bytes", o.max_key_bytes);
    s("http_host", o.http_host);
    u("metrics_port", o.metrics_port);
    d("drain_grace", o.drain_grace);
    s("auth_token", o.auth.token);
    s("auth_token_file", o.auth.token_file);
    return a;
  }

  bool same_as(const master_cfg& b) const {
    const auto &x = o, &y = b.o;
    return x.deployment_mode == y.deployment_mode && x.rpc_address == y.rpc_address && x.rpc_port == y.rpc_port &&
           x.rpc_thread_num == y.rpc_thread_num && x.client_ttl == y.client_ttl &&
           x.client_drop_ttl == y.client_drop_ttl && x.max_key_bytes == y.max_key_bytes && x.http_host == y.http_host &&
           x.metrics_port == y.metrics_port && x.drain_grace == y.drain_grace && x.auth.token == y.auth.token &&
           x.auth.token_file == y.auth.token_file;
  }

  // mooncake_master's validation (mc::master::validate, then the tokens).
  bool check() {
    for (auto d : {o.client_ttl, o.client_drop_ttl, o.drain_grace}) check_duration(d);
    if (!mc::master::validate(o).empty()) return true;
    check_that(o.client_ttl.count() > 0 && o.client_drop_ttl > o.client_ttl);
    check_that(o.rpc_port >= 1 && o.rpc_thread_num >= 1 && o.rpc_thread_num <= 64);
    check_that(o.max_key_bytes >= 1 && o.max_key_bytes <= (1u << 20));
    if (!o.auth.token.empty() && o.auth.token_file.empty()) {
      std::string why;
      auto t = mc::rpc::parse_auth_tokens(o.auth.token, &why);
      check_that(t.has_value() ? !t->empty() : !why.empty());
    }
    return true;
  }
};

}  // namespace mc::fuzz
