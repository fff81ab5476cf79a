// The tier config's JSON reader (Boost.JSON + strict checks): positions,
// duplicate keys, bounds, and every configuration that was valid before.
#include "mc/tiered/tier_config.hpp"

#include "test_support.hpp"

#include "result_printer.hpp"

#include <doctest/doctest.h>

#include <fstream>

using namespace mc::tiered;
using mc::test::has;
using mc::test::json_error;

namespace {
constexpr std::string_view dram_tier_json = R"({"type":"DRAM","capacity":1})";
}  // namespace

TEST_SUITE("tier_config") {
  TEST_CASE("a key repeated in one object is refused, at top level and nested, with its position") {
    auto top = json_error(R"({"tiers":[{"type":"DRAM","capacity":1}],"tiers":[]})");
    CHECK_MESSAGE(has(top, "tiers JSON: line 1 col "), top);
    CHECK_MESSAGE(has(top, "duplicate key \"tiers\""), top);
    auto nested = json_error("{\"tiers\":[\n {\"type\":\"DRAM\",\n  \"capacity\":1,\n  \"capacity\":2}]}");
    CHECK_MESSAGE(has(nested, "line 4 col "), nested);
    CHECK_MESSAGE(has(nested, "duplicate key \"capacity\""), nested);
    // The same key in two different objects is no duplicate.
    auto r = parse_tiers_json(std::string("{\"tiers\":[") + std::string(dram_tier_json) + "," +
                              std::string(dram_tier_json) + "]}");
    REQUIRE_MESSAGE(r, r.error().message);
    CHECK(r->size() == 2);
    // Escapes are compared after decoding: "type" and "typ\u0065" are the same key.
    CHECK(has(json_error(R"({"tiers":[{"type":"DRAM","capacity":1,"typ\u0065":"SSD"}]})"), "duplicate key \"type\""));
  }

  TEST_CASE("a syntax error on line 3 is reported at its line and column") {
    const char* text =
        "{\n"
        "  \"tiers\": [\n"
        "    {\"type\": \"DRAM\", \"capacity\": 1,}\n"  // the '}' after a comma, column 36
        "  ]\n"
        "}\n";
    CHECK(json_error(text) == "tiers JSON: line 3 col 36: syntax error");
    CHECK(json_error("{\"tiers\":[\n\n  {\"type\":\"DRAM\" \"capacity\":1}]}") ==
          "tiers JSON: line 3 col 18: syntax error");
    CHECK(json_error("{\"tiers\":[\n\n  {\"type\":\"DRAM\",\"capacity\":1}]} x") ==
          "tiers JSON: line 3 col 34: unexpected trailing characters");
  }

  TEST_CASE("deep nesting is refused at the depth bound, not by exhausting the stack") {
    std::string deep = "{\"tiers\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
    auto e = json_error(deep);
    CHECK_MESSAGE(has(e, "line 1 col "), e);
    CHECK_MESSAGE(has(e, "too deep"), e);
    std::string objects = "{\"tiers\":[";
    for (int i = 0; i < 1000; ++i) objects += "{\"a\":";
    CHECK(has(json_error(objects), "too deep"));
  }

  TEST_CASE("huge numbers, strings and documents are refused cleanly") {
    auto tier_with = [](std::string_view capacity) {
      return std::string(R"({"tiers":[{"type":"DRAM","capacity":)") + std::string(capacity) + "}]}";
    };
    CHECK(has(json_error(tier_with("9223372036854775808")), "integer out of range"));   // int64 max + 1
    CHECK(has(json_error(tier_with("18446744073709551615")), "integer out of range"));  // uint64 max
    CHECK(has(json_error(tier_with("99999999999999999999999999")), "integer out of range"));
    CHECK(has(json_error(tier_with("-99999999999999999999999999")), "integer out of range"));
    // Beyond double's range Boost reads infinity: a number, which a capacity is not.
    CHECK(has(json_error(tier_with("1e999999")), "tiers[0].capacity: expected a byte count"));
    CHECK(has(json_error(tier_with("-1e400")), "tiers[0].capacity: expected a byte count"));
    CHECK(has(json_error(tier_with("\"99999999999999999999MiB\"")), "number too large"));
    CHECK(has(json_error(tier_with("\"20000000TiB\"")), "too large"));
    CHECK(has(json_error(tier_with("\"" + std::string(5000, '9') + "\"")), "string too large"));
    CHECK(has(json_error("{\"" + std::string(300, 'k') + "\":1}"), "key too large"));
    std::string many = "{\"tiers\":[" + std::string(dram_tier_json);
    for (int i = 0; i < 5000; ++i) many += "," + std::string(dram_tier_json);
    CHECK(has(json_error(many + "]}"), "array too large"));
    std::string huge = "{\"tiers\":[" + std::string(dram_tier_json) + "]" + std::string(2 << 20, ' ') + "}";
    CHECK(has(json_error(huge), "exceeds 1048576"));
    auto dir = mc::test::make_temp_dir("tiercfg-big");
    auto file = dir + "/tiers.json";
    std::ofstream(file) << huge;
    CHECK(has(json_error(file), "is larger than 1048576 bytes"));
    mc::test::remove_tree(dir);
  }

  TEST_CASE("strings must be valid JSON: UTF-8, no raw control bytes, known escapes") {
    auto tier_path = [](std::string_view path) {
      return std::string(R"({"tiers":[{"type":"SSD","capacity":4096,"path":")") + std::string(path) + "\"}]}";
    };
    CHECK(has(json_error(tier_path("/a\x01")), "line 1 col "));
    CHECK(has(json_error(tier_path("/a\xff")), "line 1 col "));
    CHECK(has(json_error(tier_path("/a\\q")), "line 1 col "));
    CHECK(has(json_error(tier_path("/a\\ud800")), "line 1 col "));
    CHECK(has(json_error(R"({"tiers":[{"type":"DRAM","capacity":1}]} // comment)"), "line 1 col "));
    CHECK(has(json_error(R"({"tiers":[{"type":"DRAM","capacity":1},]})"), "syntax error"));
  }

  TEST_CASE("every configuration accepted before is still accepted, with the same result") {
    struct valid {
      std::string text;
      std::size_t tiers;
      std::uint64_t first_capacity;
      std::string first_path;
    };
    const valid cases[] = {
        {R"({"tiers":[{"type":"DRAM","capacity":536870912,"priority":100,"allocator_type":"OFFSET"}]})", 1, 536870912,
         ""},
        {"  \t\r\n{ \"tiers\" : [ { \"type\" : \"dram\" , \"capacity\" : \"4k\" } ] }\n\n", 1, 4096, ""},
        {R"({"tiers":[{"type":"memory","capacity":1,"allocator":"offset","prefault":false,"priority":-3}]})", 1, 1, ""},
        {R"({"tiers":[{"type":"SSD","capacity":"1GiB","path":"\/var\/tmp\/d\u00e9j\u00e0 vu \ud83d\ude00","priority":2147483647}]})",
         1, 1ull << 30, "/var/tmp/d\xc3\xa9j\xc3\xa0 vu \xf0\x9f\x98\x80"},
        {"{\"tiers\":[{\"type\":\"SSD\",\"capacity\":8192,\"path\":\"/var/tmp/\xc3\xa9t\xc3\xa9\"}]}", 1, 8192,
         "/var/tmp/\xc3\xa9t\xc3\xa9"},
        {R"({"tiers":[{"type":"DRAM","capacity":9223372036854775807}]})", 1, 9223372036854775807ull, ""},
        {R"({"tiers":[{"type":"DRAM","capacity":"1 TiB","priority":1},{"type":"DISK","capacity":"16GB","priority":9,"path":"/x"},{"type":"STORAGE","capacity":4096,"priority":0,"path":"/y"}]})",
         3, 16ull << 30, "/x"},
    };
    for (auto& c : cases) {
      CAPTURE(c.text);
      auto r = parse_tiers_json(c.text);
      REQUIRE_MESSAGE(r, r.error().message);
      CHECK(r->size() == c.tiers);
      CHECK(r->at(0).capacity == c.first_capacity);
      CHECK(r->at(0).path == c.first_path);
    }
  }
}
