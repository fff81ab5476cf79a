// Fuzz target `http`: the HTTP server (lib/http server.cpp: Beast's request
// parsing, percent-decoding, auth, body bounds, routing, keep-alive) with the
// real endpoints of both nodes, in process. Made once: a master
// (mc::master::master_server) and one store client (mc::store::client, a
// 16 MiB DRAM tier) as test/store/store_fixture.hpp makes them, and three
// HTTP servers on 127.0.0.1 (ephemeral ports):
//   0: the client's endpoints (add_client_endpoints: /kv/, /stats, /metrics,
//      /health; /kv values up to max_value bytes),
//   1: the master's (add_master_endpoints + add_status_page: /clients, /keys,
//      /key/, /prometheus/targets, /, /status, /status.json, /metrics, /health),
//   2: the client's endpoints with a bearer token (auth on).
// The first input byte picks the server; the rest is sent as the raw byte
// stream of one connection, then the sending side is shut down and the
// answer read to its end (nothing waits for a timeout: the server sees the
// end of the stream).
//
// Invariants, per input:
//  * the answer is a sequence of complete, well-formed HTTP/1.1 responses
//    (Beast's response parser; a response to HEAD carries no body), nothing
//    after the last one, at most one more than the complete request headers
//    sent, and at least one when a complete request was sent;
//  * no 5xx except 503 (a /health that is not serving) and 507 (store full):
//    malformed, oversize, unauthorised or unknown requests are 4xx;
//  * a connection whose every answer is an error changed no stored value
//    (the client's keys and values are compared before and after);
//  * afterwards the store is put back to its baseline keys and values, so
//    every input starts from the same state (deterministic per input).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <cerrno>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mc/http/node_endpoints.hpp"
#include "mc/http/server.hpp"
#include "mc/master/master_server.hpp"
#include "mc/rpc/client.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/store/client.hpp"
#include "mc/store/client_options.hpp"
#include "mc/tiered/tiered_backend.hpp"

namespace {

namespace bhttp = boost::beast::http;

void check_that(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "http_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

constexpr std::size_t max_value = 2048;  // /kv values (so 413 is reachable within max_len)
constexpr const char* token = "fuzz-token-0123456789abcdef";

// The store's baseline: every input starts with exactly these keys.
const std::map<std::string, std::string> baseline = {
    {"k1", "value-1"},
    {"layer0/block7", std::string(300, 'b')},
    {"a b", "x"},
};

struct fixture {
  mc::runtime::runtime master_rt{1};
  std::unique_ptr<mc::master::master_server> master;
  mc::runtime::runtime node_rt{2};
  std::unique_ptr<mc::store::client> client;
  mc::http::node_status status;
  mc::http::node_status master_status;
  mc::http::client_slot slot;
  std::unique_ptr<mc::http::server> servers[3];
  std::uint16_t ports[3] = {};

  fixture() {
    master_rt.start();
    mc::master::master_options mo;
    mo.rpc_address = "127.0.0.1";
    mo.rpc_port = 0;
    mo.rpc_thread_num = 1;
    master = std::make_unique<mc::master::master_server>(master_rt, mo);
    if (!master->start()) std::fprintf(stderr, "http_fuzz: master: %s\n", master->message().c_str());
    check_that(master->port() != 0, "master starts");  // (start() failed otherwise)

    mc::store::client_options o;
    o.client_id = "fuzz-node";
    o.master_server_address = "127.0.0.1:" + std::to_string(master->port());
    o.host = "127.0.0.1";
    o.port = 0;
    o.client_rpc_port = 0;
    o.rpc_timeout = std::chrono::seconds(10);
    o.tiered_backend_config = R"({"tiers":[{"type":"DRAM","capacity":"16MiB","priority":100}]})";
    mc::config::option_set none("fuzz", "fuzz");
    check_that(mc::store::resolve(o, none).empty(), "client options resolve");
    node_rt.start();
    std::string why;
    auto c = mc::store::client::start(node_rt, o, &why);
    if (!c) std::fprintf(stderr, "http_fuzz: client: %s\n", why.c_str());
    check_that(c.has_value(), "client starts");
    client = std::move(*c);
    slot.client.store(client.get());
    status.state = mc::http::node_state::serving;
    master_status.state = mc::http::node_state::serving;

    for (int i = 0; i < 3; ++i) {
      mc::http::server_options ho;
      ho.host = "127.0.0.1";
      if (i == 2) ho.auth_tokens = {token};
      if (i == 1)
        ho.public_paths.insert(ho.public_paths.end(), mc::http::status_page_paths.begin(),
                               mc::http::status_page_paths.end());
      servers[i] = std::make_unique<mc::http::server>(i == 1 ? master_rt : node_rt, ho);
      if (i == 1) {
        mc::http::add_master_endpoints(*servers[i], *master, master_status, "127.0.0.1:9003");
        mc::http::add_status_page(*servers[i], *master);
      } else {
        mc::http::add_client_endpoints(*servers[i], slot, status, max_value);
      }
      check_that(servers[i]->start().has_value(), "http server starts");
      ports[i] = servers[i]->port();
    }
    for (auto& [k, v] : baseline) put(k, v);
  }

  void put(const std::string& key, const std::string& value) {
    auto r = node_rt.block_on(client->put(key, std::as_bytes(std::span<const char>(value.data(), value.size()))));
    check_that(r.has_value(), "baseline put");
  }

  // Every key the client holds, with its value.
  std::map<std::string, std::string> snapshot() {
    std::map<std::string, std::string> out;
    for (auto& ki : client->backend().keys()) {
      std::string v(ki.size, '\0');
      auto n = node_rt.block_on(client->get(ki.key, std::as_writable_bytes(std::span<char>(v.data(), v.size()))));
      if (!n) continue;  // removed meanwhile (cannot happen: nothing else runs)
      v.resize(*n);
      out.emplace(ki.key, std::move(v));
    }
    return out;
  }

  void restore(const std::map<std::string, std::string>& now) {
    for (auto& [k, v] : now)
      if (!baseline.contains(k)) check_that(node_rt.block_on(client->remove(k)).has_value(), "remove extra key");
    for (auto& [k, v] : baseline) {
      auto it = now.find(k);
      if (it == now.end() || it->second != v) put(k, v);
    }
  }
};

fixture* fx = nullptr;  // made once, never destroyed (threads run until exit)

int connect_to(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  check_that(fd >= 0, "socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc;
  do rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  while (rc != 0 && errno == EINTR);
  check_that(rc == 0, "connect");
  timeval tv{60, 0};  // a server that never answers nor closes is a finding (libFuzzer's -timeout)
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Sends `raw`, shuts the sending side, reads everything until the server
// closes. A reset after the server closed early is fine (the answer was
// read before it, or there was none).
std::string exchange(std::uint16_t port, std::string_view raw) {
  int fd = connect_to(port);
  std::size_t sent = 0;
  while (sent < raw.size()) {
    auto n = ::send(fd, raw.data() + sent, raw.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the server closed (it answered a bad request)
    sent += static_cast<std::size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string out;
  char buf[16384];
  for (;;) {
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    check_that(!(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)), "the server neither answers nor closes");
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    check_that(out.size() <= (std::size_t{8} << 20), "answer bounded");
  }
  ::close(fd);
  return out;
}

// The requests in `raw` as the server's parser frames them (same header
// bound): their methods, in order, up to the first incomplete or malformed
// one. `complete_headers` counts complete request headers, `complete` the
// complete requests (header and body).
std::vector<bhttp::verb> requests_in(std::string_view raw, std::size_t& complete_headers, std::size_t& complete) {
  std::vector<bhttp::verb> verbs;
  complete_headers = 0;
  complete = 0;
  while (!raw.empty()) {
    bhttp::request_parser<bhttp::string_body> p;
    p.header_limit(16 << 10);
    p.body_limit(max_value);
    p.eager(true);
    boost::system::error_code ec;
    auto used = p.put(boost::asio::buffer(raw.data(), raw.size()), ec);
    // A complete header counts (and its verb: an answer to HEAD has no body)
    // even when its body is incomplete or malformed.
    if (p.is_header_done()) {
      ++complete_headers;
      verbs.push_back(p.get().method());
    }
    if (ec || !p.is_header_done() || !p.is_done()) break;
    ++complete;
    raw.remove_prefix(used);
    if (!p.get().keep_alive()) break;
  }
  return verbs;
}

struct answer {
  unsigned count = 0;
  bool any_2xx = false;
};

// Parses `out` as consecutive responses; aborts on anything malformed.
answer check_responses(std::string_view out, const std::vector<bhttp::verb>& verbs) {
  answer a;
  while (!out.empty()) {
    bhttp::response_parser<bhttp::string_body> p;
    p.header_limit(64 << 10);
    p.body_limit(std::uint64_t{8} << 20);
    p.eager(true);
    if (a.count < verbs.size() && verbs[a.count] == bhttp::verb::head) p.skip(true);
    boost::system::error_code ec;
    auto used = p.put(boost::asio::buffer(out.data(), out.size()), ec);
    if (ec) std::fprintf(stderr, "http_fuzz: response %u: %s\n", a.count, ec.message().c_str());
    check_that(!ec && p.is_done(), "a complete, well-formed response");
    auto& res = p.get();
    unsigned st = res.result_int();
    check_that(st >= 100 && st <= 599, "status code in 100..599");
    check_that(res.version() == 11, "HTTP/1.1");
    if (st >= 500) std::fprintf(stderr, "http_fuzz: status %u: %s\n", st, res.body().c_str());
    check_that(st < 500 || st == 503 || st == 507, "no 5xx but 503/507 (a client's mistake is 4xx)");
    if (st >= 200 && st < 300) a.any_2xx = true;
    ++a.count;
    out.remove_prefix(used);
  }
  return a;
}

}  // namespace

// libFuzzer's entropic schedule updates per-feature frequencies on every run;
// with the ~90k features of a master + client + server stack (and the
// background threads' heartbeats) that was ~85% of the time (33 vs ~190
// executions/s). libFuzzer reads its flags after this function returns, so
// `-entropic=0` is added here unless the command line sets -entropic.
static std::vector<char*> args;

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  bool given = false;
  for (int i = 0; i < *argc; ++i) given = given || std::string_view((*argv)[i]).starts_with("-entropic=");
  if (!given) {
    args.assign(*argv, *argv + *argc);
    static char entropic_off[] = "-entropic=0";
    args.insert(args.begin() + 1, entropic_off);
    args.push_back(nullptr);
    *argc += 1;
    *argv = args.data();
  }
  fx = new fixture();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const unsigned which = data[0] % 3;
  std::string_view raw(reinterpret_cast<const char*>(data + 1), size - 1);
  auto before = fx->snapshot();
  auto out = exchange(fx->ports[which], raw);
  std::size_t headers = 0, complete = 0;
  auto verbs = requests_in(raw, headers, complete);
  auto a = check_responses(out, verbs);
  check_that(a.count <= headers + 1, "at most one answer per request, plus one rejection");
  // (a complete header whose body never comes may go unanswered)
  if (complete > 0) check_that(a.count >= 1, "a complete request is answered");
  auto after = fx->snapshot();
  if (!a.any_2xx) check_that(after == before, "a connection answered only with errors changes no stored value");
  fx->restore(after);
  return 0;
}
