// In-process tests of lib/http: the exposition text, query parsing, and a
// server on a real runtime answering well-formed and hostile requests.
#include "mc/http/node_endpoints.hpp"
#include "mc/http/prometheus.hpp"
#include "mc/http/server.hpp"
#include "mc/runtime/runtime.hpp"

#include <doctest/doctest.h>

#include "exchange.hpp"

#include <array>
#include <cstring>
#include <string>
#include <vector>

TEST_SUITE("http") {
  TEST_CASE("a histogram is cumulative and ends with +Inf, _sum and _count") {
    mc::http::exposition e;
    std::array<double, 2> bounds{0.1, 1};
    std::array<std::uint64_t, 3> counts{1, 2, 3};
    e.family("x_seconds", "histogram", "help with \\ and\nnewline");
    e.histogram("x_seconds", {{"m", "a\"b"}}, bounds, counts, 4.5);
    auto t = e.take();
    CHECK(t.find("# HELP x_seconds help with \\\\ and\\nnewline\n") != std::string::npos);
    CHECK(t.find("x_seconds_bucket{m=\"a\\\"b\",le=\"0.1\"} 1\n") != std::string::npos);
    CHECK(t.find("x_seconds_bucket{m=\"a\\\"b\",le=\"1\"} 3\n") != std::string::npos);
    CHECK(t.find("x_seconds_bucket{m=\"a\\\"b\",le=\"+Inf\"} 6\n") != std::string::npos);
    CHECK(t.find("x_seconds_sum{m=\"a\\\"b\"} 4.5\n") != std::string::npos);
    CHECK(t.find("x_seconds_count{m=\"a\\\"b\"} 6\n") != std::string::npos);
  }

  TEST_CASE("query parameters are percent-decoded and missing ones are absent") {
    mc::http::request r;
    r.query = "prefix=a%2Fb+c&limit=5&flag";
    CHECK(r.query_param("prefix").value() == "a/b c");
    CHECK(r.query_param("limit").value() == "5");
    CHECK(r.query_param("flag").value().empty());
    CHECK_FALSE(r.query_param("other"));
  }

  TEST_CASE("error responses carry the mc error name and a matching status") {
    auto r = mc::http::error_response(mc::errc::object_not_found, "k");
    CHECK(r.status == 404);
    CHECK(r.text.find("\"error\":\"OBJECT_NOT_FOUND\"") != std::string::npos);
    CHECK(mc::http::status_for(mc::errc::timeout) == 504);
    // "Over a limit, retry later" is 503 (the status page's OVERLOADED
    // answer carries Retry-After), never a 500 that reads as a server bug.
    CHECK(mc::http::status_for(mc::errc::overloaded) == 503);
    CHECK(mc::http::status_for(mc::errc::access_denied) == 403);
    CHECK(mc::http::status_for(mc::errc::object_already_exists) == 409);
    CHECK(mc::http::status_for(mc::errc::internal_error) == 500);
    auto o = mc::http::error_response(mc::errc::overloaded, "busy");
    CHECK(o.status == 503);
    CHECK(o.text.find("\"error\":\"OVERLOADED\"") != std::string::npos);
  }

  TEST_CASE("the server routes, bounds bodies and answers garbage with 4xx") {
    mc::runtime::runtime rt(2);
    rt.start();
    {
      mc::http::server_options o;
      o.host = "127.0.0.1";
      o.header_timeout = std::chrono::milliseconds(500);
      mc::http::server s(rt, o);
      s.route(
          "/echo/",
          [](mc::http::request& req) -> mc::task<mc::http::response> {
            co_return mc::http::response::make(200, req.path + "|" + std::string(req.body.begin(), req.body.end()));
          },
          16);
      // A blob whose size claims more than its buffer holds (e.g. a peer's
      // size passed on unchecked) is never sent: 500, and no byte of it.
      s.route("/overread", [](mc::http::request&) -> mc::task<mc::http::response> {
        mc::http::response r;
        r.blob.reset(new std::byte[8]);
        std::memset(r.blob.get(), 'Q', 8);
        r.blob_capacity = 8;
        r.blob_size = 1 << 20;
        co_return r;
      });
      s.route("/blob", [](mc::http::request&) -> mc::task<mc::http::response> {
        mc::http::response r;
        r.blob.reset(new std::byte[8]);
        std::memset(r.blob.get(), 'Q', 8);
        r.blob_capacity = 8;
        r.blob_size = 5;
        co_return r;
      });
      s.route("/boom", [](mc::http::request&) -> mc::task<mc::http::response> {
        throw std::runtime_error("boom");
        co_return mc::http::response{};
      });
      REQUIRE(s.start());
      auto port = s.port();

      auto ok =
          mc::test::exchange(port, "PUT /echo/a%20b HTTP/1.1\r\nContent-Length: 3\r\nConnection: close\r\n\r\nxyz");
      CHECK(ok.rfind("HTTP/1.1 200 OK", 0) == 0);
      CHECK(ok.find("/echo/a b|xyz") != std::string::npos);
      CHECK(mc::test::exchange(port, "PUT /echo/x HTTP/1.1\r\nContent-Length: 17\r\n\r\n").find(" 413 ") !=
            std::string::npos);
      CHECK(mc::test::exchange(port, "GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n").find(" 404 ") !=
            std::string::npos);
      CHECK(mc::test::exchange(port, "\x01\x02garbage\r\n\r\n").find(" 400 ") != std::string::npos);
      CHECK(mc::test::exchange(port, "GET /boom HTTP/1.1\r\nConnection: close\r\n\r\n").find(" 500 ") !=
            std::string::npos);
      CHECK(mc::test::exchange(port, "GET /echo/%zz HTTP/1.1\r\n\r\n").find(" 400 ") != std::string::npos);
      auto over = mc::test::exchange(port, "GET /overread HTTP/1.1\r\nConnection: close\r\n\r\n");
      CHECK(over.find(" 500 ") != std::string::npos);
      CHECK(over.find("QQQQ") == std::string::npos);
      auto blob = mc::test::exchange(port, "GET /blob HTTP/1.1\r\nConnection: close\r\n\r\n");
      CHECK(blob.find(" 200 ") != std::string::npos);
      CHECK(blob.find("Content-Length: 5") != std::string::npos);
      CHECK(blob.substr(blob.size() - 5) == "QQQQQ");
      // HEAD: GET's header (Content-Length too), no body (found by the http fuzz target).
      auto head = mc::test::exchange(port, "HEAD /blob HTTP/1.1\r\nConnection: close\r\n\r\n");
      CHECK(head.find(" 200 ") != std::string::npos);
      CHECK(head.find("Content-Length: 5") != std::string::npos);
      CHECK(head.find("QQQQQ") == std::string::npos);
      // A rejected HEAD (bad target, body over the limit) is answered without
      // a body too: the JSON error would be read as a next response.
      for (const char* raw :
           {"HEAD kv/k1 HTTP/1.1\r\nHost: a\r\n\r\n", "HEAD /echo/x HTTP/1.1\r\nContent-Length: 17\r\n\r\n"}) {
        auto bad = mc::test::exchange(port, raw);
        CHECK((bad.find(" 400 ") != std::string::npos || bad.find(" 413 ") != std::string::npos));
        CHECK(bad.find("Content-Length: ") != std::string::npos);
        CHECK(bad.ends_with("\r\n\r\n"));
      }
      // An incomplete header is cut off by the header deadline (no answer).
      auto t0 = std::chrono::steady_clock::now();
      CHECK(mc::test::exchange(port, "GET /echo/x HTTP/1.1\r\nHost: a").empty());
      CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));
      s.stop();  // waits for every session: the counters are final
      auto st = s.stats();
      CHECK(st.bad_requests >= 3);
      CHECK(st.timeouts >= 1);
      CHECK(st.connections == 0);
    }
    rt.stop();
  }

  TEST_CASE("with auth on, only /metrics and /health answer without the bearer token; refusals are 401 and counted") {
    mc::runtime::runtime rt(2);
    rt.start();
    {
      mc::http::server_options o;
      o.host = "127.0.0.1";
      o.auth_tokens = {"tok-new", "tok-old"};
      mc::http::server s(rt, o);
      auto echo = [](mc::http::request& req) -> mc::task<mc::http::response> {
        co_return mc::http::response::make(200,
                                           "served " + req.path + "|" + std::string(req.body.begin(), req.body.end()));
      };
      for (const char* p : {"/metrics", "/health", "/stats", "/clients", "/keys"}) s.route(p, echo);
      s.route("/kv/", echo, 64);
      s.route("/key/", echo);
      REQUIRE(s.start());
      auto port = s.port();
      auto get = [&](const std::string& path, const std::string& extra) {
        return mc::test::exchange(port, "GET " + path + " HTTP/1.1\r\n" + extra + "Connection: close\r\n\r\n");
      };
      CHECK(get("/metrics", "").rfind("HTTP/1.1 200", 0) == 0);
      CHECK(get("/health", "").rfind("HTTP/1.1 200", 0) == 0);
      std::uint64_t refused = 0;
      for (const char* p : {"/stats", "/clients", "/keys?prefix=a", "/key/k", "/kv/k", "/nope"}) {
        CAPTURE(p);
        auto none = get(p, "");
        CHECK(none.rfind("HTTP/1.1 401", 0) == 0);
        CHECK(none.find("\"error\":\"ACCESS_DENIED\"") != std::string::npos);
        CHECK(none.find("WWW-Authenticate: Bearer") != std::string::npos);
        CHECK(none.find("served") == std::string::npos);
        CHECK(get(p, "Authorization: Bearer tok-wrong\r\n").rfind("HTTP/1.1 401", 0) == 0);
        CHECK(get(p, "Authorization: Bearer tok-new2\r\n").rfind("HTTP/1.1 401", 0) == 0);
        CHECK(get(p, "Authorization: Basic tok-new\r\n").rfind("HTTP/1.1 401", 0) == 0);
        refused += 4;
      }
      CHECK(get("/stats", "Authorization: Bearer tok-new\r\n").rfind("HTTP/1.1 200", 0) == 0);
      CHECK(get("/key/k", "Authorization: bearer tok-old\r\n").rfind("HTTP/1.1 200", 0) == 0);
      // A PUT without the token is refused before its body is read, and the handler never runs.
      auto put = mc::test::exchange(port, "PUT /kv/k HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
      CHECK(put.rfind("HTTP/1.1 401", 0) == 0);
      CHECK(put.find("served") == std::string::npos);
      ++refused;
      auto put_ok = mc::test::exchange(port,
                                       "PUT /kv/k HTTP/1.1\r\nAuthorization: Bearer tok-old\r\nContent-Length: 5\r\n"
                                       "Connection: close\r\n\r\nhello");
      CHECK(put_ok.find("served /kv/k|hello") != std::string::npos);
      // Keep-alive: a refused GET leaves the connection usable for an authorized one.
      auto two =
          mc::test::exchange(port,
                             "GET /stats HTTP/1.1\r\n\r\nGET /stats HTTP/1.1\r\nAuthorization: Bearer tok-new\r\n"
                             "Connection: close\r\n\r\n");
      CHECK(two.rfind("HTTP/1.1 401", 0) == 0);
      CHECK(two.find("served /stats") != std::string::npos);
      ++refused;
      CHECK(s.stats().auth_failures == refused);
      mc::http::exposition e;
      mc::http::append_common_metrics(e, s);
      auto text = e.take();
      CHECK(text.find("mc_auth_failures_total{surface=\"http\"} " + std::to_string(refused) + "\n") !=
            std::string::npos);
      CHECK(text.find("mc_auth_failures_total{surface=\"rpc\"} ") != std::string::npos);
      s.stop();
    }
    rt.stop();
  }

  TEST_CASE("with auth off every route answers without a token") {
    mc::runtime::runtime rt(1);
    rt.start();
    {
      mc::http::server_options o;
      o.host = "127.0.0.1";
      mc::http::server s(rt, o);
      s.route("/stats", [](mc::http::request&) -> mc::task<mc::http::response> {
        co_return mc::http::response::make(200, "ok");
      });
      REQUIRE(s.start());
      CHECK(mc::test::exchange(s.port(), "GET /stats HTTP/1.1\r\nConnection: close\r\n\r\n").rfind("HTTP/1.1 200", 0) ==
            0);
      CHECK(mc::test::exchange(s.port(), "GET /stats HTTP/1.1\r\nAuthorization: Bearer x\r\nConnection: close\r\n\r\n")
                .rfind("HTTP/1.1 200", 0) == 0);
      s.stop();
      CHECK(s.stats().auth_failures == 0);
    }
    rt.stop();
  }

  TEST_CASE("malformed or too many auth tokens are refused at start") {
    mc::runtime::runtime rt(1);
    rt.start();
    for (auto tokens : {std::vector<std::string>{"has space"}, std::vector<std::string>{""},
                        std::vector<std::string>{"a", "b", "c"}}) {
      mc::http::server_options o;
      o.host = "127.0.0.1";
      o.auth_tokens = tokens;
      mc::http::server s(rt, o);
      auto r = s.start();
      REQUIRE_FALSE(r);
      CHECK(mc::is(r.error(), mc::errc::invalid_params));
    }
    rt.stop();
  }
}

TEST_SUITE("client HTTP port derivation") {
  TEST_CASE("the spec's RPC ports get 9080, 9081, ... and an offset that wraps into 1024..65535") {
    using mc::http::derived_http_port;
    static_assert(derived_http_port(12345) == 9080);
    CHECK(derived_http_port(12345) == 9080);
    CHECK(derived_http_port(12346) == 9081);
    CHECK(derived_http_port(12545) == 9280);
    CHECK(derived_http_port(4289) == 1024);   // the lowest port of the range
    CHECK(derived_http_port(4288) == 65535);  // below it wraps to the top
    CHECK(derived_http_port(1024) == 62271);
    CHECK(derived_http_port(65535) == 62270);
    CHECK(derived_http_port(0) == 0);  // ephemeral RPC port: ephemeral HTTP port
  }

  TEST_CASE("distinct RPC ports in 1024..65535 never share a derived HTTP port, and none is privileged") {
    std::vector<bool> seen(65536, false);
    for (unsigned p = 1024; p <= 65535; ++p) {
      auto h = mc::http::derived_http_port(static_cast<std::uint16_t>(p));
      REQUIRE(h >= 1024);
      REQUIRE_FALSE(seen[h]);
      seen[h] = true;
    }
    for (unsigned p = 1; p < 1024; ++p) CHECK(mc::http::derived_http_port(static_cast<std::uint16_t>(p)) >= 1024);
  }
}
