#include "mc/tiered/tier_config.hpp"

#include "test_support.hpp"

#include "result_printer.hpp"

#include <doctest/doctest.h>

#include <fstream>

using namespace mc::tiered;
using mc::test::has;
using mc::test::json_error;

namespace {
std::string toml_error(std::string_view text) {
  auto r = parse_tiers_toml(text);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == mc::errc::invalid_params);
  return r.error().message;
}
}  // namespace

TEST_SUITE("tier_config") {
  TEST_CASE("the spec's JSON is accepted verbatim") {
    auto r = parse_tiers_json(
        R"({"tiers":[{"type":"DRAM","capacity":536870912,"priority":100,"allocator_type":"OFFSET"}]})");
    REQUIRE(r);
    REQUIRE(r->size() == 1);
    CHECK(r->at(0).type == tier_type::dram);
    CHECK(r->at(0).capacity == 536870912u);
    CHECK(r->at(0).priority == 100);
    CHECK(r->at(0).allocator == "OFFSET");
  }

  TEST_CASE("SSD aliases, capacities with units, sorting by priority, and a file path") {
    const char* text = R"({"tiers":[
      {"type":"disk","capacity":"16GB","priority":1,"path":"/var/tmp/a"},
      {"type":"DRAM","capacity":"512MiB","priority":100,"prefault":true},
      {"type":"STORAGE","capacity":"1 TiB","priority":5,"path":"/var/tmp/b"}]})";
    auto dir = mc::test::make_temp_dir("tiercfg");
    auto file = dir + "/tiers.json";
    std::ofstream(file) << text;
    for (auto input : {std::string(text), file}) {
      auto r = parse_tiers_json(input);
      REQUIRE_MESSAGE(r, r.error().message);
      REQUIRE(r->size() == 3);
      CHECK(r->at(0).type == tier_type::dram);
      CHECK(r->at(0).capacity == 512ull << 20);
      CHECK(r->at(0).prefault);
      CHECK(r->at(1).type == tier_type::ssd);
      CHECK(r->at(1).capacity == 1ull << 40);
      CHECK(r->at(2).capacity == 16ull << 30);
      CHECK(r->at(2).path == "/var/tmp/a");
    }
    mc::test::remove_tree(dir);
  }

  TEST_CASE("the same content is read from [[tiers]] tables of a TOML document") {
    auto r = parse_tiers_toml(R"(
      metadata_server = "127.0.0.1:50051"
      [[tiers]]
      type = "DRAM"
      capacity = 536870912
      priority = 100
      allocator_type = "OFFSET"
      [[tiers]]
      type = "SSD"
      capacity = "2GiB"
      priority = 10
      path = "/var/tmp/ssd"
    )");
    REQUIRE_MESSAGE(r, r.error().message);
    REQUIRE(r->size() == 2);
    CHECK(r->at(1).type == tier_type::ssd);
    CHECK(r->at(1).capacity == 2ull << 30);
    CHECK(r->at(1).path == "/var/tmp/ssd");
  }

  TEST_CASE("capacities parse with units and reject garbage") {
    CHECK(parse_capacity("1024").value() == 1024u);
    CHECK(parse_capacity("4k").value() == 4096u);
    CHECK(parse_capacity("512MiB").value() == 512ull << 20);
    CHECK(parse_capacity("16GB").value() == 16ull << 30);
    CHECK(parse_capacity(" 2 tib ").value() == 2ull << 40);
    CHECK(has(parse_capacity("0").error().message, "> 0"));
    CHECK(has(parse_capacity("12 parsecs").error().message, "unknown unit"));
    CHECK(has(parse_capacity("MiB").error().message, "expected a number"));
    CHECK(has(parse_capacity("99999999999999999999").error().message, "too large"));
    CHECK(has(parse_capacity("20000000TiB").error().message, "too large"));
  }

  TEST_CASE("every configuration error names the field") {
    CHECK(has(json_error(R"({"tiers":[{"type":"TAPE","capacity":1}]})"), "tiers[0].type: unknown tier type \"TAPE\""));
    CHECK(has(json_error(R"({"tiers":[{"type":"DRAM","capacity":1,"allocator_type":"BUDDY"}]})"),
              "tiers[0].allocator_type: unknown allocator"));
    CHECK(has(json_error(R"({"tiers":[{"type":"DRAM","capacity":1,"colour":"red"}]})"),
              "tiers[0].colour: unknown field"));
    CHECK(has(json_error(R"({"tiers":[{"type":"SSD","capacity":4096}]})"), "tiers[0].path: missing"));
    CHECK(has(json_error(R"({"tiers":[{"type":"DRAM","capacity":0}]})"), "tiers[0].capacity: must be > 0"));
    CHECK(has(json_error(R"({"tiers":[{"type":"DRAM","capacity":"0MiB"}]})"), "tiers[0].capacity"));
    CHECK(has(json_error(R"({"tiers":[{"type":"DRAM"}]})"), "tiers[0].capacity: missing"));
    CHECK(has(json_error(R"({"tiers":[{"capacity":1}]})"), "tiers[0].type: missing"));
    CHECK(has(json_error(R"({"tiers":[{"type":"DRAM","capacity":-5}]})"), "tiers[0].capacity: must be > 0"));
    CHECK(has(json_error(R"({"tiers":[{"type":"DRAM","capacity":true}]})"), "tiers[0].capacity: expected"));
    CHECK(has(json_error(R"({"tiers":[{"type":"DRAM","capacity":1,"priority":"high"}]})"), "tiers[0].priority"));
    CHECK(has(json_error(R"({"tiers":[{"type":"DRAM","capacity":1,"path":"/x"}]})"), "tiers[0].path: only SSD"));
    CHECK(has(json_error(R"({"tiers":[{"type":"DRAM","capacity":1,"prefault":"yes"}]})"), "tiers[0].prefault"));
    CHECK(has(json_error(R"({"tiers":[{"type":"SSD","capacity":100,"path":"/x"}]})"), "at least 4096"));
    CHECK(
        has(json_error(
                R"({"tiers":[{"type":"SSD","capacity":8192,"path":"/x"},{"type":"SSD","capacity":8192,"path":"/x"}]})"),
            "tiers[1].path: \"/x\" is already used by tiers[0]"));
    CHECK(has(json_error(R"({"tiers":[{"type":"DRAM","capacity":1,"type":"DRAM"}]})"), "duplicate key \"type\""));
    CHECK(has(json_error(R"({"tiers":[{"type":"DRAM","capacity":1}]} x)"), "trailing"));
    CHECK(json_error(R"({"tiers":[{"type":"DRAM","capacity":01}]})") == "tiers JSON: line 1 col 38: syntax error");
    CHECK(has(json_error(R"({"tiers":[{"type":"DRAM","capacity":99999999999999999999}]})"), "out of range"));
    CHECK(has(json_error(R"({"tiers":[{"type":"DRAM","capacity":1.5}]})"), "tiers[0].capacity: expected"));
    CHECK(has(json_error(R"({"tiers":[{"type":null,"capacity":1}]})"), "tiers[0].type: expected"));
    CHECK(has(json_error(R"({"tiers":[]})"), "at least one tier"));
    CHECK(has(json_error(R"({"tier":[]})"), "unknown top-level field \"tier\""));
    CHECK(has(json_error(R"({})"), "tiers: missing"));
    CHECK(has(json_error(R"({"tiers":{}})"), "expected an array"));
    CHECK(has(json_error(R"({"tiers":[5]})"), "tiers[0]: expected an object"));
    CHECK(has(json_error(R"({"tiers":[{"type":"DRAM",)"), "JSON"));
    CHECK(has(json_error("/nonexistent/tiers.json"), "neither inline JSON nor a readable file"));
    CHECK(has(toml_error("[[tiers]]\ntype = \"DRAM\"\ncapacity = 1\nfoo = 1\n"), "tiers[0].foo: unknown field"));
    CHECK(has(toml_error("[[tiers]]\ntype = \"SSD\"\ncapacity = \"1GiB\"\n"), "tiers[0].path: missing"));
    CHECK(has(toml_error("tiers = 5\n"), "expected an array of tables"));
    CHECK(has(toml_error("x = 1\n"), "tiers: missing"));
    CHECK(has(toml_error("[[tiers]\n"), "TOML"));
    CHECK(has(toml_error("[[tiers]]\ntype = \"DRAM\"\ntype = \"DRAM\"\n"), "TOML"));
    CHECK(has(toml_error("[[tiers]]\ntype = \"DRAM\"\ncapacity = 1\npriority = [1]\n"), "tiers[0].priority"));
  }

  TEST_CASE("value() on an error throws with the message") {
    auto r = parse_tiers_json(R"({"tiers":[{"type":"TAPE","capacity":1}]})");
    CHECK_THROWS_WITH_AS(r.value(), doctest::Contains("tiers[0].type"), std::invalid_argument);
  }
}
