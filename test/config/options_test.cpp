#include "mc/config/options.hpp"
#include "mc/config/version.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

using mc::config::option_set;
using mc::config::outcome;
using namespace std::chrono_literals;

namespace {
struct opts {
  std::string host = "0.0.0.0";
  std::uint16_t port = 12345;
  std::uint64_t threads = 2;
  std::uint64_t cap = 1024;
  bool verbose = false;
  std::chrono::milliseconds timeout = 10s;
  option_set set{"prog", "test program"};
  opts() {
    set.add("host", &host, "bind host")
        .add("client_rpc_port", &port, "RPC port", 1)
        .add("rpc_thread_num", &threads, "threads", 1, 64)
        .add_size("capacity", &cap, "bytes")
        .add("verbose", &verbose, "chatty")
        .add("rpc_timeout", &timeout, "deadline")
        .env("MC_TEST_THREADS", "rpc_thread_num")
        .allow_file_key("tiers");
  }
};

std::string write_file(const std::string& dir, const std::string& text) {
  auto p = dir + "/c.toml";
  std::ofstream(p) << text;
  return p;
}
}  // namespace

TEST_SUITE("config options") {
  TEST_CASE("both --flag value and --flag=value forms work, and defaults stay otherwise") {
    opts o;
    auto r = o.set.parse({"--host", "10.1.2.3", "--client_rpc_port=9000", "--verbose", "--capacity", "512MiB"});
    CHECK(r.what == outcome::kind::run);
    CHECK(o.host == "10.1.2.3");
    CHECK(o.port == 9000);
    CHECK(o.verbose);
    CHECK(o.cap == 512ull << 20);
    CHECK(o.threads == 2);
    CHECK(o.set.was_set("host"));
    CHECK_FALSE(o.set.was_set("rpc_thread_num"));
  }

  TEST_CASE("unknown flags, missing values and bad values are clear errors") {
    {
      opts o;
      auto r = o.set.parse({"--nope", "1"});
      CHECK(r.what == outcome::kind::error);
      CHECK(r.message.find("unknown option --nope") != std::string::npos);
    }
    {
      opts o;
      auto r = o.set.parse({"--client_rpc_port"});
      CHECK(r.message.find("needs a value") != std::string::npos);
    }
    {
      opts o;
      auto r = o.set.parse({"--client_rpc_port", "70000"});
      CHECK(r.what == outcome::kind::error);
      CHECK(r.message.find("client_rpc_port") != std::string::npos);
      CHECK(o.port == 12345);
    }
    {
      opts o;
      CHECK(o.set.parse({"--rpc_thread_num", "0"}).what == outcome::kind::error);
      CHECK(o.set.parse({"--capacity", "12 parsecs"}).what == outcome::kind::error);
      CHECK(o.set.parse({"--verbose=maybe"}).what == outcome::kind::error);
      CHECK(o.set.parse({"positional"}).what == outcome::kind::error);
    }
  }

  TEST_CASE("--help lists every option with its default") {
    opts o;
    auto r = o.set.parse({"--help"});
    REQUIRE(r.what == outcome::kind::help);
    for (auto* s : {"--host", "[0.0.0.0]", "--client_rpc_port", "[12345]", "--rpc_thread_num", "[2]", "MC_TEST_THREADS",
                    "--config", "--version"})
      CHECK(r.message.find(s) != std::string::npos);
  }

  TEST_CASE("--version prints the program, the meson project version and the revision, and nothing runs") {
    opts o;
    auto r = o.set.parse({"--client_rpc_port", "1", "--version"});
    REQUIRE(r.what == outcome::kind::version);
    CHECK(r.message == mc::config::version_line("prog"));
    CHECK(o.port == 12345);  // nothing was assigned
    // "<program> <x.y.z> (<revision>)": revision is git describe output or "unknown".
    std::string v(mc::config::project_version());
    CHECK(r.message.rfind("prog " + v + " (", 0) == 0);
    CHECK(r.message.back() == ')');
    CHECK(std::count(v.begin(), v.end(), '.') == 2);
    CHECK(v.find_first_not_of("0123456789.") == std::string::npos);
    std::string rev(mc::config::vcs_revision());
    CHECK(!rev.empty());
    CHECK(rev.find_first_of(" ()\n") == std::string::npos);
    CHECK(r.message == "prog " + v + " (" + rev + ")");
  }

  TEST_CASE("precedence is defaults < file < environment < flags") {
    auto dir = mc::test::make_temp_dir("cfg");
    auto path = write_file(dir,
                           "host = \"1.1.1.1\"\nrpc_thread_num = 3\nclient_rpc_port = 7000\n"
                           "[[tiers]]\ntype = \"DRAM\"\n");
    {
      opts o;
      auto r = o.set.parse({"--config", path, "--client_rpc_port", "7001"});
      REQUIRE(r.what == outcome::kind::run);
      CHECK(o.host == "1.1.1.1");
      CHECK(o.threads == 3);
      CHECK(o.port == 7001);
      CHECK(o.set.file_text().find("[[tiers]]") != std::string::npos);
      CHECK(o.set.file_has_key("tiers"));
    }
    setenv("MC_TEST_THREADS", "5", 1);
    {
      opts o;
      REQUIRE(o.set.parse({"--config=" + path}).what == outcome::kind::run);
      CHECK(o.threads == 5);
      REQUIRE(o.set.parse({"--config=" + path, "--rpc_thread_num=6"}).what == outcome::kind::run);
      CHECK(o.threads == 6);
    }
    setenv("MC_TEST_THREADS", "zero", 1);
    {
      opts o;
      auto r = o.set.parse({});
      CHECK(r.what == outcome::kind::error);
      CHECK(r.message.find("MC_TEST_THREADS") != std::string::npos);
    }
    unsetenv("MC_TEST_THREADS");
    mc::test::remove_tree(dir);
  }

  TEST_CASE("a broken or unknown-keyed config file names the problem") {
    auto dir = mc::test::make_temp_dir("cfg");
    {
      opts o;
      auto r = o.set.parse({"--config", write_file(dir, "host = \n")});
      CHECK(r.what == outcome::kind::error);
      CHECK(r.message.find("TOML parse error") != std::string::npos);
    }
    {
      opts o;
      auto r = o.set.parse({"--config", write_file(dir, "hots = \"x\"\n")});
      CHECK(r.message.find("unknown key 'hots'") != std::string::npos);
    }
    {
      opts o;
      auto r = o.set.parse({"--config", write_file(dir, "rpc_thread_num = 2.5\n")});
      CHECK(r.what == outcome::kind::error);
    }
    {
      opts o;
      auto r = o.set.parse({"--config", dir + "/missing.toml"});
      CHECK(r.message.find("cannot read config file") != std::string::npos);
    }
    mc::test::remove_tree(dir);
  }

  TEST_CASE("sizes and durations parse with units") {
    CHECK(mc::config::parse_size("536870912") == 536870912ull);
    CHECK(mc::config::parse_size("512MiB") == 512ull << 20);
    CHECK(mc::config::parse_size("16GB") == 16ull << 30);
    CHECK(mc::config::parse_size("4k") == 4096ull);
    CHECK_FALSE(mc::config::parse_size("").has_value());
    CHECK_FALSE(mc::config::parse_size("-1").has_value());
    CHECK_FALSE(mc::config::parse_size("99999999999999999999TiB").has_value());
    CHECK(mc::config::parse_duration_ms("10s") == 10s);
    CHECK(mc::config::parse_duration_ms("250") == 250ms);
    CHECK_FALSE(mc::config::parse_duration_ms("soon").has_value());
    // At most max_duration (365 days); a larger count once wrapped around
    // 64 bits into a small or negative duration (found writing the flags fuzz target;
    // test/fuzz/regressions/flags).
    CHECK(mc::config::parse_duration_ms("31536000s") == mc::config::max_duration);
    CHECK(mc::config::parse_duration_ms("525600m") == mc::config::max_duration);
    CHECK_FALSE(mc::config::parse_duration_ms("31536001s").has_value());
    CHECK_FALSE(mc::config::parse_duration_ms("18446744073709551615s").has_value());
    CHECK_FALSE(mc::config::parse_duration_ms("18446744073709551615").has_value());
    CHECK_FALSE(mc::config::parse_duration_ms("307445734561826m").has_value());
  }
}

TEST_SUITE("config_lists") {
  struct bench_opts {
    double seconds = 0.5;
    std::vector<std::string> configs{"tcp", "shm"};
    std::vector<std::uint64_t> inflight{1, 16, 64};
    std::vector<std::uint64_t> sizes{4096, 65536};
    option_set set{"bench", "a benchmark"};
    bench_opts() {
      set.add("seconds", &seconds, "run length", 0.001, 3600)
          .add_list("configs", &configs, "configs")
          .add_list("inflight", &inflight, "calls in flight", 1, 4096)
          .add_size_list("sizes", &sizes, "value sizes")
          .accept_rest("CLIENT-FLAGS");
    }
  };

  TEST_CASE("reals and comma lists parse, replace the default and show it in --help") {
    bench_opts o;
    auto h = o.set.parse({"--help"});
    CHECK(h.what == outcome::kind::help);
    CHECK(h.message.find("[0.5]") != std::string::npos);
    CHECK(h.message.find("[tcp,shm]") != std::string::npos);
    CHECK(h.message.find("[1,16,64]") != std::string::npos);
    CHECK(h.message.find("[-- CLIENT-FLAGS...]") != std::string::npos);
    auto r = o.set.parse({"--seconds", "0.05", "--configs", "shm", "--inflight=1,4,256", "--sizes", "64K,1M,4097"});
    REQUIRE(r.what == outcome::kind::run);
    CHECK(o.seconds == doctest::Approx(0.05));
    CHECK(o.configs == std::vector<std::string>{"shm"});
    CHECK(o.inflight == std::vector<std::uint64_t>{1, 4, 256});
    CHECK(o.sizes == std::vector<std::uint64_t>{64 << 10, 1 << 20, 4097});
    CHECK(o.set.rest().empty());
  }

  TEST_CASE("bad reals and bad list items are errors naming the option and item; the value stays") {
    for (auto args : std::vector<std::vector<std::string>>{{"--seconds", "abc"},
                                                           {"--seconds", "1e9"},
                                                           {"--seconds", "nan"},
                                                           {"--seconds", "0.5x"},
                                                           {"--inflight", "1,,4"},
                                                           {"--inflight", "1,0"},
                                                           {"--inflight", "1,x"},
                                                           {"--configs", "tcp,"},
                                                           {"--sizes", "4K,12Q"}}) {
      bench_opts o;
      auto r = o.set.parse(args);
      INFO(args[0] << " " << args[1]);
      CHECK(r.what == outcome::kind::error);
      CHECK(r.message.find(args[0]) != std::string::npos);
      CHECK(o.seconds == doctest::Approx(0.5));
      CHECK(o.inflight == std::vector<std::uint64_t>{1, 16, 64});
      CHECK(o.configs == std::vector<std::string>{"tcp", "shm"});
    }
    bench_opts o;
    std::string big = "1";
    for (std::size_t i = 0; i < option_set::max_list_items; ++i) big += ",1";
    auto r = o.set.parse({"--inflight", big});
    CHECK(r.what == outcome::kind::error);
    CHECK(r.message.find("more than") != std::string::npos);
  }

  TEST_CASE("-- hands the remaining arguments on only when accepted") {
    bench_opts o;
    auto r = o.set.parse({"--seconds", "1", "--", "--host", "x", "--unknown"});
    REQUIRE(r.what == outcome::kind::run);
    CHECK(o.set.rest() == std::vector<std::string>{"--host", "x", "--unknown"});
    option_set plain{"p", "no rest"};
    auto e = plain.parse({"--", "x"});
    CHECK(e.what == outcome::kind::error);
  }

  TEST_CASE("TOML floats and arrays fill reals and lists") {
    auto dir = mc::test::make_temp_dir("cfg");
    auto p = dir + "/b.toml";
    std::ofstream(p) << "seconds = 0.25\nconfigs = [\"shm\"]\ninflight = [2, 8]\nsizes = \"64K,1M\"\n";
    bench_opts o;
    auto r = o.set.parse({"--config", p});
    REQUIRE(r.what == outcome::kind::run);
    CHECK(o.seconds == doctest::Approx(0.25));
    CHECK(o.configs == std::vector<std::string>{"shm"});
    CHECK(o.inflight == std::vector<std::uint64_t>{2, 8});
    CHECK(o.sizes == std::vector<std::uint64_t>{64 << 10, 1 << 20});
    std::ofstream(p) << "inflight = [1, -2]\n";
    bench_opts o2;
    CHECK(o2.set.parse({"--config", p}).what == outcome::kind::error);
    std::ofstream(p) << "configs = [\"tcp\", 3.5]\n";
    bench_opts o3;
    CHECK(o3.set.parse({"--config", p}).what == outcome::kind::error);
    // An array is not a value of a scalar option.
    opts scalar;
    std::ofstream(p) << "host = [\"a\", \"b\"]\n";
    auto e = scalar.set.parse({"--config", p});
    CHECK(e.what == outcome::kind::error);
    CHECK(e.message.find("'host'") != std::string::npos);
    CHECK(scalar.host == "0.0.0.0");
    mc::test::remove_tree(dir);
  }
}
