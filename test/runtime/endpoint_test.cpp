#include "mc/runtime/endpoint.hpp"

#include <doctest/doctest.h>

#include <string>
#include <unordered_set>

namespace {

struct good_case {
  std::string text;
  std::string host;
  std::uint16_t port;
  std::string str;  // canonical form
};

bool rejected(std::string_view text) {
  std::string_view why;
  auto r = mc::endpoint::parse(text, &why);
  if (r) return false;
  CHECK(mc::is(r.error(), mc::errc::invalid_params));
  CHECK(!why.empty());
  return true;
}

}  // namespace

TEST_SUITE("endpoint") {
  TEST_CASE("good endpoints parse into host and port and round-trip through str()") {
    const good_case cases[] = {
        {"127.0.0.1:8080", "127.0.0.1", 8080, "127.0.0.1:8080"},
        {"localhost:1", "localhost", 1, "localhost:1"},
        {"node-1.example:65535", "node-1.example", 65535, "node-1.example:65535"},
        {"my_host.:12345", "my_host.", 12345, "my_host.:12345"},
        {"[::1]:50051", "::1", 50051, "[::1]:50051"},
        {"[fd00::5]:9081", "fd00::5", 9081, "[fd00::5]:9081"},
        {"[FE80::1%eth0]:7", "FE80::1%eth0", 7, "[FE80::1%eth0]:7"},
        {"[::ffff:10.0.0.1]:80", "::ffff:10.0.0.1", 80, "[::ffff:10.0.0.1]:80"},
        {"10.0.0.5:007", "10.0.0.5", 7, "10.0.0.5:7"},
        {"[1:2:3:4:5:6:7:8]:65535", "1:2:3:4:5:6:7:8", 65535, "[1:2:3:4:5:6:7:8]:65535"},
        {"[::]:1", "::", 1, "[::]:1"},
    };
    for (auto& c : cases) {
      CAPTURE(c.text);
      auto e = mc::endpoint::parse(c.text);
      REQUIRE(e);
      CHECK(e->host() == c.host);
      CHECK(e->port() == c.port);
      CHECK(e->str() == c.str);
      auto again = mc::endpoint::parse(e->str());
      REQUIRE(again);
      CHECK(*again == *e);
      CHECK(std::hash<mc::endpoint>{}(*again) == std::hash<mc::endpoint>{}(*e));
    }
  }

  TEST_CASE("bad endpoints are invalid_params with a reason") {
    const char* cases[] = {
        "",
        ":",
        ":80",
        "host",
        "host:",
        "host:0",
        "host:65536",
        "host:99999999999999999999",
        "host:-1",
        "host:+80",
        "host:8o",
        "host:80 ",
        " host:80",
        "ho st:80",
        "host:80\n",
        "host\t:80",
        "host:80x",
        "fd00::1:80",
        "::1",
        "[]:80",
        "[:80",
        "[::1:80",
        "::1]:80",
        "[::1]80",
        "[::1]:",
        "[::1]",
        "[::1]:x",
        "[::1]]:80",
        "[[::1]:80",
        "[1.2.3.4]:80",
        "[host]:80",
        "[::1%]:80",
        "[::g]:80",
        "[::1%e/th]:80",
        "[:::]:80",
        "[1::2::3]:80",
        "[12345::1]:80",
        "[::1.2.3]:80",
        "a:b:c",
        "host:80:90",
        "user@host:80",
        "http://host:80",
        "host/path:80",
        "ho\"st:80",
        "ho\\st:80",
        "-host:80",
        ".host:80",
        "h\xc3\xa9:80",
        "host:\xd9\xa3",
    };
    for (const char* c : cases) {
      CAPTURE(c);
      CHECK(rejected(c));
    }
    using namespace std::string_literals;
    CHECK(rejected("host\0:80"s));
    CHECK(rejected("host:80\0"s));
    CHECK(rejected("[::1\0]:80"s));
  }

  TEST_CASE("hostile lengths are bounded") {
    std::string host(mc::endpoint::max_host_size, 'a');
    auto ok = mc::endpoint::parse(host + ":80");
    REQUIRE(ok);
    CHECK(ok->host().size() == mc::endpoint::max_host_size);
    CHECK(rejected(host + "a:80"));
    CHECK(rejected(std::string(1 << 20, 'a') + ":80"));
    CHECK(rejected("host:" + std::string(1 << 16, '0') + "80"));
    CHECK(rejected("[" + std::string(1 << 16, ':') + "]:80"));
  }

  TEST_CASE("parse_with_default_port accepts a missing port and a bare IPv6 address") {
    auto a = mc::endpoint::parse_with_default_port("node-1", 17813);
    REQUIRE(a);
    CHECK(a->str() == "node-1:17813");
    auto b = mc::endpoint::parse_with_default_port("fd00::1", 5);
    REQUIRE(b);
    CHECK(b->host() == "fd00::1");
    CHECK(b->str() == "[fd00::1]:5");
    auto c = mc::endpoint::parse_with_default_port("[fd00::1]", 5);
    REQUIRE(c);
    CHECK(*c == *b);
    auto d = mc::endpoint::parse_with_default_port("[fd00::1]:6", 5);
    REQUIRE(d);
    CHECK(d->port() == 6);
    auto e = mc::endpoint::parse_with_default_port("10.1.2.3:9", 5);
    REQUIRE(e);
    CHECK(e->str() == "10.1.2.3:9");
    std::string_view why;
    CHECK(!mc::endpoint::parse_with_default_port("node-1", 0, &why));
    CHECK(why == "missing port");
    for (const char* bad : {"", "host:", "host:0", "[::1]:", "[]", "[host]", "ho st", "host:80x", "fd00::g"}) {
      CAPTURE(bad);
      auto r = mc::endpoint::parse_with_default_port(bad, 5);
      REQUIRE(!r);
      CHECK(mc::is(r.error(), mc::errc::invalid_params));
    }
  }

  TEST_CASE("make, with_port, host_for_url and is_loopback") {
    auto v6 = mc::endpoint::make("fd00::7", 9080);
    REQUIRE(v6);
    CHECK(v6->is_ipv6());
    CHECK(v6->host_for_url() == "[fd00::7]");
    CHECK(v6->str() == "[fd00::7]:9080");
    auto bracketed = mc::endpoint::make("[fd00::7]", 9080);
    REQUIRE(bracketed);
    CHECK(*bracketed == *v6);
    CHECK(!mc::endpoint::make("fd00::7", 0));
    CHECK(!mc::endpoint::make("", 1));
    CHECK(!mc::endpoint::make("a b", 1));
    auto moved = v6->with_port(1);
    REQUIRE(moved);
    CHECK(moved->str() == "[fd00::7]:1");
    CHECK(!v6->with_port(0));
    CHECK(!mc::endpoint{}.with_port(1));
    CHECK(mc::endpoint{}.empty());
    for (const char* l : {"127.0.0.1:1", "127.9.8.7:1", "localhost:1", "[::1]:1"})
      CHECK(mc::endpoint::parse(l)->is_loopback());
    for (const char* l : {"127.example:1", "10.0.0.1:1", "[::2]:1", "localhost.example:1"})
      CHECK(!mc::endpoint::parse(l)->is_loopback());
    std::unordered_set<mc::endpoint> set{*v6, *moved, *bracketed};
    CHECK(set.size() == 2);
  }
}
