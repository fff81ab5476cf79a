#pragma once
/// A small coroutine client of etcd's v3 API through its JSON gateway
/// (HTTP/1.1 POST of JSON to /v3/..., the gateway every etcd >= 3.4 serves on
/// its client port). It speaks only what master HA needs: leases, one-key
/// reads and writes, prefix reads, and the create-if-absent transaction of a
/// campaign. Each call opens one TCP connection, sends one request and reads
/// one bounded reply (etcd_max_reply bytes); a call that fails on one
/// endpoint (connect refused, timeout, HTTP 5xx, a reply that does not parse)
/// is tried on the next endpoint in the list, within the call's deadline.
///
/// Why the JSON gateway and not gRPC: it needs no generated code, no gRPC
/// runtime and no thread of its own — Boost.Beast on the runtime's threads,
/// the same stack as our HTTP server — and master HA sends a handful of
/// requests per second. Everything etcd answers is untrusted: sizes, counts,
/// base64 and integers are checked; a malformed reply is rpc_fail.
///
/// Thread-safety: an etcd_client is immutable after construction; its
/// coroutines may run concurrently on any runtime thread.
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mc::master {

/// Largest etcd reply body read (a prefix read of many client entries fits).
inline constexpr std::size_t etcd_max_reply = 4u << 20;

/// One key as etcd stores it.
struct etcd_kv {
  std::string key;
  std::string value;
  std::int64_t create_revision = 0;
  std::int64_t mod_revision = 0;
  std::int64_t lease = 0;
};

/// Parses "h1:2379,h2:2379" (also with http:// prefixes, and the
/// "etcd://h1:2379,h2:2379" locator form); at most 16 endpoints, each a
/// valid mc::endpoint. Errors: invalid_params, with a reason in *why.
result<std::vector<std::string>> parse_etcd_endpoints(std::string_view list, std::string* why = nullptr);

class etcd_client {
 public:
  /// `endpoints`: "host:port" each (parse_etcd_endpoints); `timeout`: the
  /// deadline of one call, across all endpoints it tries.
  etcd_client(std::vector<std::string> endpoints, mc::duration timeout);

  const std::vector<std::string>& endpoints() const noexcept { return endpoints_; }

  /// A new lease of `ttl_s` seconds (etcd may grant a longer one). Returns
  /// {id, granted ttl}. Errors: rpc_fail, timeout, cancelled.
  struct lease {
    std::int64_t id = 0;
    std::int64_t ttl_s = 0;
  };
  task<result<lease>> grant(std::int64_t ttl_s);
  /// Renews a lease once; returns its remaining TTL in seconds, 0 when the
  /// lease has expired or does not exist. Errors: rpc_fail, timeout, cancelled.
  task<result<std::int64_t>> keepalive(std::int64_t lease_id);
  /// Revokes a lease (its keys are deleted). Errors: rpc_fail, timeout, cancelled.
  task<result<void>> revoke(std::int64_t lease_id);

  /// Creates `key` = `value` under `lease_id` if the key does not exist.
  /// Returns {true, the put's revision} when created, else {false, the
  /// existing key} (its value and create_revision). Errors: rpc_fail,
  /// timeout, cancelled.
  struct campaign_result {
    bool created = false;
    std::int64_t revision = 0;  ///< when created: the revision of the put
    etcd_kv holder;             ///< when not created: the key as it is
  };
  task<result<campaign_result>> create_if_absent(std::string key, std::string value, std::int64_t lease_id);

  /// Puts `key` = `value` (under `lease_id` when non-zero); returns the
  /// revision. Errors: rpc_fail, timeout, cancelled.
  task<result<std::int64_t>> put(std::string key, std::string value, std::int64_t lease_id);
  /// Reads one key; nullopt when absent. Errors: rpc_fail, timeout, cancelled.
  task<result<std::optional<etcd_kv>>> get(std::string key);
  /// Reads every key starting with `prefix` (at most `limit`). Errors:
  /// rpc_fail, timeout, cancelled.
  task<result<std::vector<etcd_kv>>> get_prefix(std::string prefix, std::int64_t limit);
  /// Deletes one key; returns how many were deleted (0 or 1). Errors:
  /// rpc_fail, timeout, cancelled.
  task<result<std::int64_t>> del(std::string key);
  /// Deletes `key` only if its create_revision is `create_revision` (a
  /// leader resigning its own election). Returns whether it was deleted.
  task<result<bool>> del_if_created(std::string key, std::int64_t create_revision);

  /// The raw exchange: POST `body` (JSON) to `path` ("/v3/kv/range") on the
  /// endpoints in turn; returns the reply body of a 200. Errors: rpc_fail
  /// (every endpoint failed, or a non-200 that is not retriable), timeout,
  /// cancelled.
  task<result<std::string>> call(std::string path, std::string body);

 private:
  std::vector<std::string> endpoints_;
  mc::duration timeout_;
};

/// The parsers of etcd's gateway replies, one per request kind (exposed for
/// tests and the fuzz target test/fuzz/etcd). Each takes the reply body as
/// received; anything malformed, out of range or inconsistent with the
/// request is rpc_fail. Pure functions.
namespace etcd_reply {
/// /v3/lease/grant: {id != 0, ttl > 0}.
result<etcd_client::lease> grant(std::string_view body);
/// /v3/lease/keepalive: the remaining TTL (>= 0; 0 = expired).
result<std::int64_t> keepalive(std::string_view body);
/// The create-if-absent transaction on `key`: created with the put's
/// revision (> 0), or the holder (whose key must be `key`), or no holder.
result<etcd_client::campaign_result> create_if_absent(std::string_view body, const std::string& key);
/// The header revision (>= 0) of a put.
result<std::int64_t> revision(std::string_view body);
/// A one-key range: nullopt (absent) or the key, which must be `key`.
result<std::optional<etcd_kv>> get(std::string_view body, const std::string& key);
/// A prefix range: at most `limit` keys, each starting with `prefix`.
result<std::vector<etcd_kv>> get_prefix(std::string_view body, const std::string& prefix, std::size_t limit);
/// A delete of one key: 0 or 1.
result<std::int64_t> deleted(std::string_view body);
/// A transaction's "succeeded" (absent = false).
result<bool> succeeded(std::string_view body);
}  // namespace etcd_reply

/// base64 (standard alphabet, padded) as etcd's gateway encodes bytes.
std::string etcd_base64(std::string_view in);
/// Decodes base64; nullopt on a malformed input.
std::optional<std::string> etcd_unbase64(std::string_view in);

}  // namespace mc::master
