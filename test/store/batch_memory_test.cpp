// Memory stays bounded on the inference data path: a batch of 256 x 4 MiB
// (1 GiB) is put to and read back from an owner in ANOTHER process (forked
// before any thread exists), and this process's peak RSS grows by no more
// than the caller's buffers plus a stated margin: gets and puts move bytes
// straight between the caller's memory and the owner (no bounce buffers),
// and the bytes in flight are capped (max_inflight_bytes) anyway.
#include "mc/master/master_server.hpp"
#include "mc/rpc/client.hpp"
#include "mc/store/client.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <signal.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

using namespace std::chrono_literals;

namespace {

constexpr std::size_t value_bytes = 4u << 20;
constexpr std::size_t key_count = 256;
/// What the requester may need beyond the caller's buffers: descriptors,
/// RPC messages, connection buffers, coroutine frames, allocator slack.
constexpr std::size_t margin_bytes = 96u << 20;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool rss_meaningful = false;  // shadow memory and quarantines inflate RSS
#else
constexpr bool rss_meaningful = true;
#endif

/// VmHWM (peak resident set) of this process in bytes.
std::size_t peak_rss() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

/// Resets VmHWM to the current RSS (Linux >= 4.0), so the peak is measured
/// from here.
void reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
}

mc::store::client_options base_options(const std::string& id, const std::string& master, const std::string& tier) {
  mc::store::client_options o;
  o.client_id = id;
  o.master_server_address = master;
  o.host = "127.0.0.1";
  o.port = 0;
  o.client_rpc_port = 0;
  o.rpc_timeout = 30s;
  o.tiered_backend_config = R"({"tiers":[{"type":"DRAM","capacity":")" + tier + R"(","priority":100}]})";
  mc::config::option_set none("t", "t");
  auto err = mc::store::resolve(o, none);
  if (!err.empty()) std::fprintf(stderr, "resolve: %s\n", err.c_str());
  return o;
}

/// The owner process: a master and a client with room for the batch. Writes
/// "master_port rpc_endpoint\n" to `out`, then serves until `in` closes.
[[noreturn]] void run_owner(int in, int out, const std::string& transport) {
  int rc = 1;
  {
    mc::runtime::runtime rt(2);
    rt.start();
    mc::master::master_options mo;
    mo.rpc_address = "127.0.0.1";
    mo.rpc_port = 0;
    mc::master::master_server master(rt, mo);
    if (master.start()) {
      auto o = base_options("owner", "127.0.0.1:" + std::to_string(master.port()), "1280MiB");
      o.transfer_transport = transport;
      std::string why;
      auto c = mc::store::client::start(rt, o, &why);
      if (c) {
        auto line = std::to_string(master.port()) + " " + (*c)->rpc_endpoint() + "\n";
        if (::write(out, line.data(), line.size()) == static_cast<ssize_t>(line.size())) {
          char b;
          while (::read(in, &b, 1) > 0) {}
          rc = 0;
        }
        (*c)->stop();
      } else {
        std::fprintf(stderr, "owner: %s\n", why.c_str());
      }
      master.stop();
    }
    mc::rpc::shutdown(rt);
    rt.stop();
  }
  ::_exit(rc);
}

/// The forked owner; killed and reaped on destruction whatever happened.
struct owner_process {
  pid_t pid = -1;
  int to_child = -1, from_child = -1;
  std::uint16_t master_port = 0;
  std::string rpc_endpoint;

  explicit owner_process(const std::string& transport) {
    int down[2], up[2];
    REQUIRE(::pipe(down) == 0);
    REQUIRE(::pipe(up) == 0);
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(down[1]);
      ::close(up[0]);
      run_owner(down[0], up[1], transport);
    }
    ::close(down[0]);
    ::close(up[1]);
    to_child = down[1];
    from_child = up[0];
    std::string line;
    char ch;
    while (::read(from_child, &ch, 1) == 1 && ch != '\n') line.push_back(ch);
    auto space = line.find(' ');
    REQUIRE_MESSAGE(space != std::string::npos, "the owner process did not start");
    master_port = static_cast<std::uint16_t>(std::stoul(line.substr(0, space)));
    rpc_endpoint = line.substr(space + 1);
  }
  ~owner_process() {
    if (to_child >= 0) ::close(to_child);  // the owner stops
    if (from_child >= 0) ::close(from_child);
    if (pid <= 0) return;
    for (int i = 0; i < 300; ++i) {  // up to 30 s for an orderly stop
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == pid) return;
      ::usleep(100'000);
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

void run_batch(const std::string& transport) {
  owner_process owner(transport);  // forked first: before this process starts any thread
  mc::runtime::runtime rt(2);
  rt.start();
  {
    auto o = base_options("requester", "127.0.0.1:" + std::to_string(owner.master_port), "16MiB");
    o.transfer_transport = transport;
    std::string why;
    auto started = mc::store::client::start(rt, o, &why);
    REQUIRE_MESSAGE(started.has_value(), why);
    auto& c = **started;

    reset_peak_rss();
    const auto before = peak_rss();
    std::vector<std::uint8_t> caller(value_bytes * key_count);
    std::vector<std::string> keys;
    std::vector<std::vector<std::span<const std::byte>>> values;
    std::vector<std::uint64_t> sums;
    for (std::size_t i = 0; i < key_count; ++i) {
      auto* p = caller.data() + i * value_bytes;
      auto v = mc::test::random_bytes(value_bytes - (i % 3), 1000 + i);  // not all a multiple of anything
      std::copy(v.begin(), v.end(), p);
      sums.push_back(mc::test::checksum(v.data(), v.size()));
      keys.push_back(mc::test::numbered("kv/", i));
      values.push_back({std::span<const std::byte>(reinterpret_cast<const std::byte*>(p), v.size())});
    }
    mc::store::put_options remote;
    remote.where = mc::store::placement::remote;
    remote.target = owner.rpc_endpoint;
    auto put = rt.block_on(c.batch_put_parts(keys, values, remote));
    for (std::size_t i = 0; i < key_count; ++i) REQUIRE_MESSAGE(put[i].has_value(), keys[i]);
    std::fill(caller.begin(), caller.end(), 0);
    std::vector<std::vector<std::span<std::byte>>> dst;
    for (std::size_t i = 0; i < key_count; ++i)
      dst.push_back({std::span<std::byte>(reinterpret_cast<std::byte*>(caller.data() + i * value_bytes), value_bytes)});
    auto got = rt.block_on(c.batch_get_parts(keys, dst));
    for (std::size_t i = 0; i < key_count; ++i) {
      REQUIRE_MESSAGE(got[i].has_value(), keys[i]);
      REQUIRE(*got[i] == value_bytes - (i % 3));
      CHECK(mc::test::checksum(caller.data() + i * value_bytes, *got[i]) == sums[i]);
    }
    CHECK(c.stats().local_hits == 0);  // every byte came from the other process
    const auto grown = peak_rss() - before;
    MESSAGE(transport << ": peak RSS grew by " << (grown >> 20) << " MiB for " << (caller.size() >> 20)
                      << " MiB of caller buffers (bound: + " << (margin_bytes >> 20) << " MiB)");
    if (rss_meaningful) CHECK(grown <= caller.size() + margin_bytes);
    c.stop();
  }
  mc::rpc::shutdown(rt);
  rt.stop();
}

}  // namespace

TEST_SUITE("store batch memory") {
  TEST_CASE("a 256 x 4 MiB batch put and get over TCP: peak RSS <= caller buffers + margin, byte-exact") {
    run_batch("tcp");
  }
  TEST_CASE("the same batch over the same-host transport") { run_batch("auto"); }
}
