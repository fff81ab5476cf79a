#pragma once
/// A small, hardened HTTP/1.1 server (Boost.Beast) hosted on the runtime's
/// io_contexts: no thread or event loop of its own. Routes map a path (exact,
/// or a prefix ending in '/') to a coroutine handler.
///
/// Hardening: bounded header size (431), bounded body per route (413, checked
/// against Content-Length before reading and while reading chunked bodies),
/// a deadline for each request's header and body (a slow client is
/// disconnected), a bounded number of connections (extra ones are closed at
/// accept), malformed requests answered 400 then closed, handler exceptions
/// answered 500. Nothing a client sends can crash the process.
#include "mc/runtime/deadline.hpp"
#include "mc/runtime/error.hpp"
#include "mc/runtime/task.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mc::runtime {
class runtime;
}

namespace mc::http {

enum class method { get, head, put, post, del, other };

/// A parsed request, as handed to a handler. Owned by the connection; valid
/// until the handler's task completes.
struct request {
  method verb = method::other;
  std::string target;  ///< raw request-target
  std::string path;    ///< percent-decoded path, without the query
  std::string query;   ///< raw query string (after '?'), may be empty
  std::vector<char> body;
  bool keep_alive = true;

  /// Decoded value of query parameter `name` ('+' is a space), if present.
  std::optional<std::string> query_param(std::string_view name) const;
};

/// What a handler returns. The body is `blob` when set, else `text`.
struct response {
  unsigned status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string text;
  std::unique_ptr<std::byte[]> blob;
  std::size_t blob_size = 0;      ///< bytes of `blob` to send
  std::size_t blob_capacity = 0;  ///< bytes allocated at `blob`; a blob_size above it is never sent
                                  ///< (the server answers 500 instead)
  std::vector<std::pair<std::string, std::string>> headers;  ///< extra headers

  static response make(unsigned status, std::string body, std::string content_type = "text/plain; charset=utf-8");
  static response json(unsigned status, std::string body) { return make(status, std::move(body), "application/json"); }
};

/// A JSON error body {"error":"OBJECT_NOT_FOUND","code":-704,"message":"..."}
/// with the HTTP status that matches `e` (404, 400, 413, 502, 503, 504, ...).
response error_response(errc e, std::string_view message = {});
/// The HTTP status used for an mc error code.
unsigned status_for(errc e) noexcept;

/// Handlers run on the runtime thread owning the connection; they may await
/// anything that is safe on that thread. Exceptions become 500.
using handler = std::function<task<response>(request&)>;

/// The connection bound for a file-descriptor soft limit `soft_limit`
/// (RLIMIT_NOFILE): a quarter of it (the rest stays for the node's RPC, transfer
/// and SSD descriptors), at least 64 and at most 16384; 4096 when unlimited
/// (RLIM_INFINITY). Pure; thread-safe.
std::size_t connection_bound_for_fd_limit(std::uint64_t soft_limit) noexcept;
/// connection_bound_for_fd_limit() of this process's current soft limit
/// (getrlimit; 4096 if it fails). Used when server_options::max_connections is 0.
/// Thread-safe.
std::size_t connection_bound_from_fd_limit() noexcept;

struct server_options {
  std::string host = "0.0.0.0";
  std::uint16_t port = 0;  ///< 0 = ephemeral (see port())
  /// Runtime threads that serve connections (round robin); empty = all.
  /// The first one also runs the acceptor.
  std::vector<std::size_t> threads;
  /// Open connections served at once; 0 = derived from the file-descriptor
  /// limit (RLIMIT_NOFILE soft / 4, within 64 .. 16384). Past it a connection
  /// is answered `503 Service Unavailable` with `Retry-After: 1` (a JSON
  /// OVERLOADED error) and closed after the client's request is drained (not
  /// reset). The 503 is a fixed ~210-byte response written and drained within
  /// 1 s; at most 64 are pending at once, and while 64 are, accepting pauses
  /// (further connections wait in the kernel's listen backlog, never closed
  /// unanswered). Each counts in server_stats::refused.
  std::size_t max_connections = 0;
  std::size_t max_header_bytes = 16 << 10;  ///< request line + headers
  /// The whole header of a request must arrive within this (also bounds how
  /// long an idle keep-alive connection is kept).
  mc::duration header_timeout = std::chrono::seconds(10);
  /// The whole body must arrive within this.
  mc::duration body_timeout = std::chrono::seconds(60);
  /// Writing a response must finish within this.
  mc::duration write_timeout = std::chrono::seconds(60);
  /// Bearer tokens accepted on every route except `public_paths` (at most two,
  /// current + previous, as mc::rpc::set_auth_tokens; the apps pass the
  /// process's RPC tokens). Empty = auth off. With auth on, a request without
  /// `Authorization: Bearer <accepted token>` is answered 401 with a JSON
  /// error and `WWW-Authenticate: Bearer`, before its body is read (a request
  /// with a body is then closed), and counted in server_stats::auth_failures.
  std::vector<std::string> auth_tokens = {};
  /// Exact paths served without a token (monitoring probes).
  std::vector<std::string> public_paths{"/metrics", "/health", "/livez"};
};

/// Counters (relaxed; approximate while running).
struct server_stats {
  std::uint64_t connections = 0;  ///< open now
  std::uint64_t accepted = 0;
  std::uint64_t refused = 0;   ///< over max_connections: answered 503
  std::uint64_t requests = 0;  ///< requests answered
  std::uint64_t status_2xx = 0, status_3xx = 0, status_4xx = 0, status_5xx = 0;
  std::uint64_t bad_requests = 0;   ///< malformed / oversize requests (connection then closed)
  std::uint64_t timeouts = 0;       ///< connections closed by a header/body/write deadline
  std::uint64_t auth_failures = 0;  ///< requests answered 401 (missing or wrong bearer token)
};

/// Lifetime: construct, route(), start(), ..., stop(), destroy. The runtime
/// must run from start() until stop() returns. start()/stop() are blocking-free
/// / blocking respectively and must be called from a non-runtime thread.
class server {
 public:
  server(mc::runtime::runtime& rt, server_options opts);
  /// Calls stop().
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// Adds a route before start(). `path` matches exactly, or as a prefix when
  /// it ends with '/'. The longest match wins. `max_body_bytes` bounds the
  /// request body (0: a request with a body is answered 413).
  void route(std::string path, handler h, std::size_t max_body_bytes = 0);

  /// Binds and starts accepting. Errors: invalid_params (bad host, more than
  /// two or malformed auth_tokens),
  /// io_error (bind/listen failed; see message()), unavailable_in_current_status
  /// (started twice).
  result<void> start();
  /// Stops accepting, closes every connection (handlers in flight finish but
  /// their answers are dropped) and waits for all of them. Idempotent.
  void stop();

  std::uint16_t port() const noexcept;
  const std::string& message() const noexcept;
  server_stats stats() const;

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace mc::http
