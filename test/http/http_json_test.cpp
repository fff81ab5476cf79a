// The JSON bodies of lib/http (built with Boost.JSON) are valid JSON (UTF-8)
// whatever bytes the keys, ids and messages in them hold: each body is parsed
// back with boost::json and its fields compared.
#include "mc/http/node_endpoints.hpp"
#include "mc/http/server.hpp"
#include "mc/master/master_server.hpp"
#include "mc/rpc/client.hpp"
#include "mc/runtime/runtime.hpp"

#include <boost/json/parse.hpp>
#include <doctest/doctest.h>

#include "exchange.hpp"

#include <string>

namespace bj = boost::json;

namespace {

const std::string fffd = "\xEF\xBF\xBD";  // U+FFFD
// Quotes, backslashes, control bytes, DEL, then bytes that are not UTF-8
// (a lone FF, an overlong NUL, a surrogate, a truncated sequence), then valid
// two- and four-byte characters.
const std::string nasty = std::string("q\"b\\s/c\x01\x1f\x7f\t\n", 12) + "\xFF" + "\xC0\x80" + "\xED\xA0\x80" +
                          "\xE2\x82" + "\xC3\xA9\xF0\x9F\x98\x80";
// What a body says instead: every byte of an invalid sequence is one U+FFFD.
const std::string nasty_utf8 = std::string("q\"b\\s/c\x01\x1f\x7f\t\n", 12) + fffd + fffd + fffd + fffd + fffd + fffd +
                               fffd + fffd + "\xC3\xA9\xF0\x9F\x98\x80";

/// The body of a raw HTTP response, parsed strictly (UTF-8 is checked).
bj::value parsed_body(const std::string& raw) {
  auto at = raw.find("\r\n\r\n");
  REQUIRE(at != std::string::npos);
  bj::error_code ec;
  auto v = bj::parse(raw.substr(at + 4), ec);
  REQUIRE_MESSAGE(!ec, ec.message() << " in " << raw);
  return v;
}

std::string percent_encoded(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    char buf[4];
    std::snprintf(buf, sizeof buf, "%%%02X", c);
    out += buf;
  }
  return out;
}

std::string str(const bj::value& v) { return std::string(v.as_string()); }

}  // namespace

TEST_SUITE("http") {
  TEST_CASE("an error body is valid JSON for any message bytes, invalid UTF-8 becoming U+FFFD") {
    auto r = mc::http::error_response(mc::errc::object_not_found, nasty);
    CHECK(r.status == 404);
    CHECK(r.content_type == "application/json");
    CHECK(r.text.back() == '\n');
    bj::error_code ec;
    auto v = bj::parse(r.text, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    CHECK(str(v.at("error")) == "OBJECT_NOT_FOUND");
    CHECK(v.at("code").as_int64() == static_cast<int>(mc::errc::object_not_found));
    CHECK(str(v.at("message")) == nasty_utf8);
    std::string every;
    for (int b = 1; b < 256; ++b) every.push_back(static_cast<char>(b));
    auto all = mc::http::error_response(mc::errc::invalid_params, every);
    auto w = bj::parse(all.text, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    CHECK(str(w.at("message")).substr(0, 127) == every.substr(0, 127));  // ASCII intact
    // No message: the code's own.
    CHECK(str(bj::parse(mc::http::error_response(mc::errc::timeout).text).at("message")).size() > 0);
  }

  TEST_CASE("master endpoints answer valid JSON for keys and client ids with quotes, control and non-UTF-8 bytes") {
    mc::runtime::runtime rt(2);
    rt.start();
    {
      mc::master::master_options mo;
      mo.rpc_address = "127.0.0.1";
      mo.rpc_port = 0;
      mc::master::master_server m(rt, mo);
      REQUIRE(m.start());
      mc::master::client_info ci;
      ci.client_id = nasty;
      ci.rpc_endpoint = "127.0.0.1:1";
      ci.transfer_endpoint = "127.0.0.1:2";
      ci.http_endpoint = "127.0.0.1:9080";
      ci.capacity = 1u << 30;
      ci.used = 12345;
      REQUIRE(m.state().register_client(ci));
      REQUIRE(m.state().add_replica(nasty, nasty, 4097, 1));
      REQUIRE(m.state().add_replica("plain", nasty, 1, 1));

      mc::http::node_status status;
      status.state = mc::http::node_state::serving;
      mc::http::server_options o;
      o.host = "127.0.0.1";
      mc::http::server s(rt, o);
      mc::http::add_master_endpoints(s, m, status, "127.0.0.1:9003");
      REQUIRE(s.start());
      auto get = [&](const std::string& target) {
        return mc::test::exchange(s.port(), "GET " + target + " HTTP/1.1\r\nConnection: close\r\n\r\n");
      };

      auto health = parsed_body(get("/health"));
      CHECK(str(health.at("status")) == "serving");

      auto key = parsed_body(get("/key/" + percent_encoded(nasty)));
      CHECK(str(key.at("key")) == nasty_utf8);
      CHECK(key.at("size").to_number<std::uint64_t>() == 4097);
      REQUIRE(key.at("replicas").as_array().size() == 1);
      auto& rep = key.at("replicas").as_array()[0];
      CHECK(str(rep.at("client_id")) == nasty_utf8);
      CHECK(str(rep.at("rpc_endpoint")) == "127.0.0.1:1");
      CHECK(str(rep.at("transfer_endpoint")) == "127.0.0.1:2");

      auto keys = parsed_body(get("/keys?limit=10"));
      CHECK(keys.at("total_keys").to_number<std::uint64_t>() == 2);
      CHECK(keys.at("limit").to_number<std::uint64_t>() == 10);
      REQUIRE(keys.at("keys").as_array().size() == 2);
      for (auto& k : keys.at("keys").as_array()) CHECK((str(k.at("key")) == nasty_utf8 || str(k.at("key")) == "plain"));
      CHECK(str(keys.at("cursor")) == "0");  // one page walked every shard
      CHECK(keys.at("complete").as_bool());
      for (const char* bad : {"/keys?cursor=x", "/keys?cursor=", "/keys?cursor=-1", "/keys?cursor=18446744073709551615",
                              "/keys?cursor=99999999999999999999"}) {
        CAPTURE(bad);
        CHECK(str(parsed_body(get(bad)).at("error")) == "INVALID_PARAMS");
      }
      auto resumed = parsed_body(get("/keys?limit=10&cursor=4294967296"));  // shard 1 on: a valid position
      CHECK(resumed.at("keys").as_array().size() <= 2);
      CHECK(resumed.at("complete").as_bool());

      auto clients = parsed_body(get("/clients"));
      REQUIRE(clients.at("clients").as_array().size() == 1);
      auto& c = clients.at("clients").as_array()[0];
      CHECK(str(c.at("client_id")) == nasty_utf8);
      CHECK(str(c.at("http_endpoint")) == "127.0.0.1:9080");
      CHECK(c.at("capacity").to_number<std::uint64_t>() == 1u << 30);
      CHECK(c.at("used").to_number<std::uint64_t>() == 12345);
      CHECK(str(c.at("health")) == "healthy");
      CHECK(c.at("since_heartbeat_ms").is_int64());
      CHECK(c.at("keys").to_number<std::uint64_t>() == 2);

      auto targets = parsed_body(get("/prometheus/targets"));
      REQUIRE(targets.as_array().size() == 2);
      CHECK(str(targets.as_array()[0].at("targets").as_array()[0]) == "127.0.0.1:9003");
      CHECK(str(targets.as_array()[0].at("labels").at("mc_role")) == "master");
      CHECK(str(targets.as_array()[1].at("labels").at("mc_client_id")) == nasty_utf8);

      auto missing = parsed_body(get("/key/" + percent_encoded("nope" + nasty)));
      CHECK(str(missing.at("error")) == "OBJECT_NOT_FOUND");
      CHECK(str(missing.at("message")) == "key not found: nope" + nasty_utf8);
      auto no_route = parsed_body(get("/x" + percent_encoded(nasty)));
      CHECK(str(no_route.at("error")) == "NOT_FOUND");
      CHECK(str(no_route.at("message")) == "no such endpoint: /x" + nasty_utf8);
      auto bad_limit = parsed_body(get("/keys?limit=0"));
      CHECK(str(bad_limit.at("error")) == "INVALID_PARAMS");
      auto wrong_method = mc::test::exchange(s.port(), "DELETE /clients HTTP/1.1\r\nConnection: close\r\n\r\n");
      CHECK(wrong_method.rfind("HTTP/1.1 405", 0) == 0);
      CHECK(str(parsed_body(wrong_method).at("error")) == "METHOD_NOT_ALLOWED");
      s.stop();
      m.stop();
    }
    mc::rpc::shutdown(rt);
    rt.stop();
  }
}
