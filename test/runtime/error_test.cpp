#include "mc/runtime/error.hpp"

#include <boost/asio/error.hpp>
#include <doctest/doctest.h>

TEST_SUITE("error") {
  TEST_CASE("codes keep Mooncake's values and have names and messages") {
    CHECK(static_cast<int>(mc::errc::object_not_found) == -704);
    CHECK(static_cast<int>(mc::errc::transfer_fail) == -800);
    CHECK(static_cast<int>(mc::errc::rpc_fail) == -900);
    CHECK(static_cast<int>(mc::errc::invalid_params) == -600);
    CHECK(static_cast<int>(mc::errc::no_available_handle) == -200);
    CHECK(mc::error_name(mc::errc::object_not_found) == "OBJECT_NOT_FOUND");
    CHECK(mc::error_name(mc::errc::timeout) == "TIMEOUT");
    CHECK(mc::error_name(static_cast<mc::errc>(-424242)) == "UNKNOWN_ERROR");
    auto ec = mc::make_error_code(mc::errc::object_not_found);
    CHECK(ec.message() == "OBJECT_NOT_FOUND: object not found");
    CHECK(std::string(ec.category().name()) == "mooncake");
  }

  TEST_CASE("timeout and cancellation are distinct codes") {
    CHECK(mc::make_error_code(mc::errc::timeout) != mc::make_error_code(mc::errc::cancelled));
    CHECK(mc::to_errc(boost::asio::error::operation_aborted) == mc::errc::cancelled);
    CHECK(mc::to_errc(boost::asio::error::timed_out) == mc::errc::timeout);
    CHECK(mc::to_errc(boost::asio::error::connection_reset) == mc::errc::internal_error);
    CHECK(mc::to_errc({}) == mc::errc::ok);
  }

  TEST_CASE("names round-trip and unknown names map to INTERNAL_ERROR") {
    for (auto e : {mc::errc::object_not_found, mc::errc::timeout, mc::errc::access_denied, mc::errc::rpc_fail,
                   mc::errc::memlock_limit})
      CHECK(mc::errc_from_name(mc::error_name(e)) == e);
    CHECK(mc::errc_from_name("NOPE") == mc::errc::internal_error);
  }

  TEST_CASE("result carries a value or an error") {
    mc::result<int> ok = 5;
    mc::result<int> bad = mc::fail(mc::errc::invalid_key);
    CHECK(ok.has_value());
    CHECK(*ok == 5);
    REQUIRE(bad.has_error());
    CHECK(mc::is(bad.error(), mc::errc::invalid_key));
    CHECK_FALSE(mc::is(bad.error(), mc::errc::invalid_params));
  }
}
