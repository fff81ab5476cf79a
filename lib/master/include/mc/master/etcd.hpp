#pragma once
/// A small coroutine client of etcd's v3 API through its JSON gateway
/// (HTTP/1.1 POST of JSON to /v3/..., the gateway every etcd >= 3.4 serves on
/// its client port). It speaks only what master HA needs: leases, one-key
/// reads and writes, prefix reads, the create-if-absent transaction of a
/// campaign, and a watch of one key. Each call opens one TCP connection,
/// sends one request and reads one bounded reply (etcd_max_reply bytes); a
/// call that fails on one endpoint (connect refused, timeout, HTTP 5xx, a
/// reply that does not parse) is tried on the next endpoint in the list,
/// within the call's deadline. A watch (watch_once) holds its connection
/// open until the key changes or its wait ends; the gateway streams the
/// watch's replies as newline-separated JSON in a chunked HTTP body.
///
/// Why the JSON gateway and not gRPC: it needs no generated code, no gRPC
/// runtime and no thread of its own — Boost.Beast on the runtime's threads,
/// the same stack as our HTTP server — and master HA sends a handful of
/// requests per second. Everything etcd answers is untrusted: sizes, counts,
/// base64 and integers are checked; a malformed reply is rpc_fail.
///
/// Security (etcd_security): TLS (the server's certificate verified against
/// a CA file, or the system's CAs, and its name or IP; a client certificate
/// when given) and etcd's user authentication (a token from
/// /v3/auth/authenticate sent as the Authorization header, fetched again
/// when etcd refuses it as expired or invalid).
///
/// Thread-safety: an etcd_client is immutable after construction (the auth
/// token it shares with its copies is guarded by a mutex); its coroutines
/// may run concurrently on any runtime thread.
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
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

/// One change of a watched key: a put (kv: the key as written) or a delete
/// (kv: the key and the delete's revision in mod_revision, no value).
struct etcd_event {
  bool deleted = false;
  etcd_kv kv;
};

/// One message of a watch stream.
struct etcd_watch_reply {
  bool created = false;               ///< the watch now exists
  bool canceled = false;              ///< etcd ended the watch (e.g. compacted)
  std::int64_t compact_revision = 0;  ///< > 0: the start revision was compacted away
  std::int64_t revision = 0;          ///< the header revision (0 when omitted)
  std::vector<etcd_event> events;     ///< at most etcd_max_watch_events
};

/// Most events one watch message may carry (a one-key watch sees a handful).
inline constexpr std::size_t etcd_max_watch_events = 4096;

/// Parses "h1:2379,h2:2379" (also with http:// or https:// prefixes, and
/// the "etcd://h1:2379,h2:2379" locator form); at most 16 endpoints, each a
/// valid mc::endpoint. `*tls` (when given) is set when the endpoints are
/// https:// (all or none of them may be). Errors: invalid_params, with a
/// reason in *why.
result<std::vector<std::string>> parse_etcd_endpoints(std::string_view list, std::string* why = nullptr,
                                                      bool* tls = nullptr);

/// How to reach a secured etcd, as configured (flags, TOML, environment:
/// add_etcd_security_options in mc/master/options.hpp). All optional.
struct etcd_security_options {
  std::string username;       ///< etcd user (authentication off when empty)
  std::string password_file;  ///< file holding its password (whitespace trimmed)
  std::string ca_file;        ///< PEM CAs the server's certificate must chain to ("" = the system's)
  std::string cert_file;      ///< PEM client certificate (etcd --client-cert-auth)
  std::string key_file;       ///< its PEM private key
  bool tls = false;           ///< TLS; also implied by https:// endpoints and by ca/cert/key files
};

/// The loaded form of etcd_security_options: the password read, the TLS
/// context built. Cheap to copy; copies share the auth token. Default: plain
/// TCP, no authentication.
class etcd_security {
 public:
  etcd_security() = default;
  /// Reads the password file and the certificate files. `tls_endpoints`:
  /// the endpoints were written https://. Errors: invalid_params, with the
  /// reason (which file, what is wrong) in *why: a username without a
  /// password file or the reverse, an unreadable or empty password file, a
  /// certificate or key that does not load, a cert without its key.
  static result<etcd_security> load(const etcd_security_options& o, bool tls_endpoints, std::string* why = nullptr);
  bool tls() const noexcept;
  bool authenticates() const noexcept;

  struct state;
  const std::shared_ptr<state>& get() const noexcept { return s_; }

 private:
  std::shared_ptr<state> s_;
};

class etcd_client {
 public:
  /// `endpoints`: "host:port" each (parse_etcd_endpoints); `timeout`: the
  /// deadline of one call, across all endpoints it tries (authentication
  /// included); `security`: TLS and credentials (default: none).
  etcd_client(std::vector<std::string> endpoints, mc::duration timeout, etcd_security security = {});

  const std::vector<std::string>& endpoints() const noexcept { return endpoints_; }

  /// Every request below fails access_denied too when etcd refuses the
  /// credentials (call()).
  ///
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
  /// Reads one key; nullopt when absent. When `revision` is given it
  /// receives the store's revision at the read (the reply header's): a
  /// watch from revision + 1 misses no change after the read. Errors:
  /// rpc_fail, timeout, cancelled.
  task<result<std::optional<etcd_kv>>> get(std::string key, std::int64_t* revision = nullptr);
  /// Reads every key starting with `prefix` (at most `limit`). Errors:
  /// rpc_fail, timeout, cancelled.
  task<result<std::vector<etcd_kv>>> get_prefix(std::string prefix, std::int64_t limit);
  /// Deletes one key; returns how many were deleted (0 or 1). Errors:
  /// rpc_fail, timeout, cancelled.
  task<result<std::int64_t>> del(std::string key);
  /// Deletes `key` only if its create_revision is `create_revision` (a
  /// leader resigning its own election). Returns whether it was deleted.
  task<result<bool>> del_if_created(std::string key, std::int64_t create_revision);

  /// Watches `key` from `start_revision` (> 0) and returns its first change
  /// at or after that revision (a put or a delete), or nullopt when `wait`
  /// passed without one. Endpoints are tried in turn until one creates the
  /// watch (each within this client's timeout); the wait then runs on that
  /// connection, which closes when the call returns. Errors: rpc_fail (no
  /// endpoint created the watch, the stream broke or was malformed, or etcd
  /// canceled the watch: e.g. `start_revision` was compacted away — read the
  /// key again), access_denied (etcd refused the credentials), invalid_params
  /// (no endpoints, `start_revision` <= 0), cancelled. Never timeout: the end
  /// of `wait` is nullopt.
  task<result<std::optional<etcd_event>>> watch_once(std::string key, std::int64_t start_revision, mc::duration wait);

  /// Follows `key`: reads it (unless `from` > 0: a revision just after a
  /// version already known), then watches it from just after that, calling
  /// `seen` with the key as read or written (nullopt: absent or deleted) —
  /// until `seen` returns false or the awaiting coroutine is cancelled (it
  /// then returns; never throws a cancellation). Each watch is renewed every
  /// `window`; a failed watch (counted in `*watch_failures` when given) or
  /// read is followed, after `pause`, by a read of the key, then a new watch.
  task<void> follow(std::string key, std::function<bool(const std::optional<etcd_kv>&)> seen, mc::duration window,
                    mc::duration pause, std::atomic<std::uint64_t>* watch_failures, std::int64_t from = 0);

  /// The raw exchange: POST `body` (JSON) to `path` ("/v3/kv/range") on the
  /// endpoints in turn; returns the reply body of a 200. With credentials,
  /// authenticates first when no token is cached, and once more when etcd
  /// answers 401 (token expired or revoked). Errors: rpc_fail (every
  /// endpoint failed, or a non-200 that is not retriable), access_denied
  /// (etcd refused the credentials or the permission: 401/403), timeout,
  /// cancelled.
  task<result<std::string>> call(std::string path, std::string body);

 private:
  /// One pass over the endpoints with the current token; `*status` receives
  /// the last HTTP status seen (0 when none).
  task<result<std::string>> call_once(std::string path, std::string body, int* status);
  /// A fresh token from /v3/auth/authenticate, cached for the copies.
  task<result<void>> authenticate();
  std::string token() const;

  std::vector<std::string> endpoints_;
  mc::duration timeout_;
  etcd_security security_;
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
/// A one-key range: nullopt (absent) or the key, which must be `key`. When
/// `revision` is given it receives the header revision (>= 0).
result<std::optional<etcd_kv>> get(std::string_view body, const std::string& key, std::int64_t* revision = nullptr);
/// One line of a watch stream on `key` ({"result": {...}}): every event is
/// on `key`, of type PUT (omitted) or DELETE, with mod_revision > 0 and
/// non-decreasing; at most etcd_max_watch_events; an {"error": ...} line is
/// rpc_fail.
result<etcd_watch_reply> watch(std::string_view line, const std::string& key);
/// A prefix range: at most `limit` keys, each starting with `prefix`.
result<std::vector<etcd_kv>> get_prefix(std::string_view body, const std::string& prefix, std::size_t limit);
/// /v3/auth/authenticate: the token (1..4096 printable ASCII characters:
/// it travels in an HTTP header).
result<std::string> token(std::string_view body);
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
