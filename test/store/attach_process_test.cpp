// Standalone (attach) mode across processes: attachers are forked children
// (forked before this process starts any thread), the node runs here, so
// the node's transfers cross processes (same-host process_vm_* when the
// kernel allows it, else TCP) and a SIGKILLed attacher really disappears.
#include "attach_fixture.hpp"
#include "mc/master/master_client.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>

using namespace mc::test;

namespace {

constexpr std::size_t sizes[] = {1, 4095, 65537, (3u << 20) + 17};

/// Reads one line (without the newline) from `fd`; "" on EOF.
std::string read_line(int fd) {
  std::string line;
  char c = 0;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

void write_line(int fd, const std::string& s) {
  auto line = s;
  line += '\n';
  (void)!::write(fd, line.data(), line.size());
}

/// The child: attaches to the node named on `in`, then
/// mode 0: puts values, reads them back and the node's keys, reports "ok";
/// mode 1: says "ready" and reads in a loop until it is killed;
/// mode 2: becomes uid 65534 and reports whether the node refused it.
int child_main(int in, int out) {
  std::string line = read_line(in);
  unsigned rpc = 0, port = 0, mode = 0;
  if (std::sscanf(line.c_str(), "%u %u %u", &rpc, &port, &mode) != 3) return 3;
  if (mode == 2 && ::setuid(65534) != 0) return 5;  // another uid than the node's
  mc::runtime::runtime rt(2);
  rt.start();
  std::string report = "ok";
  {
    mc::store::attach_options o;
    o.attach_port = static_cast<std::uint16_t>(port);
    std::string why;
    auto c = mc::store::attached_client::connect(rt, cat("localhost:", std::to_string(rpc)), o, &why);
    if (mode == 2) {
      report = c ? "fail: attached as another uid" : mc::is(c.error(), mc::errc::access_denied) ? "denied" : why;
    } else if (!c) {
      report = cat("fail connect: ", why);
    } else if (mode == 0) {
      for (auto n : sizes) {
        auto v = random_bytes(n, n + 1000);
        auto key = cat("p", std::to_string(n));
        std::vector<std::uint8_t> back(n + 3, sentinel_byte);
        if (!rt.block_on(a_put(**c, key, one(v)))) report = cat("fail put ", key);
        auto g = rt.block_on(a_get(**c, key, one_mut(back)));
        if (!g || *g != n || checksum(back.data(), n) != checksum(v.data(), n) || back[n] != sentinel_byte)
          report = cat("fail get ", key);
      }
      for (std::string key : {"near", "far"}) {
        auto v = random_bytes(700001, key.size());
        std::vector<std::uint8_t> back(v.size());
        auto g = rt.block_on(a_get(**c, key, one_mut(back)));
        if (!g || checksum(back.data(), back.size()) != checksum(v.data(), v.size()))
          report = cat("fail node key ", key);
      }
    } else {
      std::vector<std::vector<std::uint8_t>> bufs(16, std::vector<std::uint8_t>(700001));
      std::vector<mut_pieces> pieces;
      for (auto& b : bufs) pieces.push_back(one_mut(b));
      write_line(out, "ready");
      for (;;) (void)rt.block_on(a_batch_get(**c, std::vector<std::string>(16, "near"), pieces));
    }
    if (c) (*c)->stop();
  }
  mc::rpc::shutdown(rt);
  rt.stop();
  write_line(out, report);
  return 0;
}

struct child {
  pid_t pid = -1;
  int to = -1, from = -1;
};

/// Forks a child running child_main (call before this process has threads).
child spawn() {
  int down[2], up[2];
  REQUIRE(::pipe(down) == 0);
  REQUIRE(::pipe(up) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(down[1]);
    ::close(up[0]);
    int rc = 4;
    try {
      rc = child_main(down[0], up[1]);
    } catch (...) {}
    ::_exit(rc);
  }
  ::close(down[0]);
  ::close(up[1]);
  return {pid, down[1], up[0]};
}

int wait_exit(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

TEST_SUITE("store attach") {
  TEST_CASE("attachers in other processes: byte-exact across processes, and a killed one leaves nothing held") {
    auto worker = spawn();
    auto victim = spawn();
    const bool root = ::geteuid() == 0;
    child stranger;
    if (root) stranger = spawn();
    attached_cluster a(2);
    auto near = random_bytes(700001, 4), far = random_bytes(700001, 3);
    REQUIRE(a.cl.on(0, n_put(a.node(0), "near", bytes_of(near))));
    REQUIRE(a.cl.on(1, n_put(a.node(1), "far", bytes_of(far))));
    const auto rpc = std::to_string(a.node(0).rpc_port()), port = std::to_string(a.server->port());
    const auto before = a.node(0).engine().stats();

    write_line(worker.to, cat(rpc, " ", port, " 0"));
    auto report = read_line(worker.from);
    CHECK_MESSAGE(report == "ok", report);
    CHECK(wait_exit(worker.pid) == 0);
    // The children's puts are on the node.
    for (auto n : sizes) {
      auto v = random_bytes(n, n + 1000);
      std::vector<std::uint8_t> back(n);
      auto g = a.cl.on(0, n_get(a.node(0), cat("p", std::to_string(n)), writable(back)));
      REQUIRE(g);
      CHECK(checksum(back.data(), n) == checksum(v.data(), n));
    }
    const auto after = a.node(0).engine().stats();
    const auto& sh_before = before.initiated[static_cast<std::size_t>(mc::transfer::transport_kind::same_host)];
    const auto& sh = after.initiated[static_cast<std::size_t>(mc::transfer::transport_kind::same_host)];
    if (after.same_host_fallbacks > before.same_host_fallbacks) {
      MESSAGE("the kernel refused process_vm_* here: the node used TCP (fallback)");
    } else {
      CHECK(sh.write_ops > sh_before.write_ops);  // gets: the node wrote into the child
      CHECK(sh.read_ops > sh_before.read_ops);    // puts: the node read from it
    }

    write_line(victim.to, cat(rpc, " ", port, " 1"));
    CHECK(read_line(victim.from) == "ready");
    (void)eventually([&] { return a.server->stats().calls_in_flight > 0; });
    ::kill(victim.pid, SIGKILL);
    CHECK(wait_exit(victim.pid) == 128 + SIGKILL);
    CHECK(eventually([&] { return drained(*a.server); }));
    // The node still serves, both here and through the attach service.
    attacher at(a);
    std::vector<std::uint8_t> back(near.size());
    auto g = at.on(a_get(*at.c, "near", one_mut(back)));
    REQUIRE(g);
    CHECK(checksum(back.data(), back.size()) == checksum(near.data(), near.size()));
    // Another uid on the same host is refused (the same-host transport's rule).
    if (root) {
      write_line(stranger.to, cat(rpc, " ", port, " 2"));
      auto said = read_line(stranger.from);
      CHECK_MESSAGE(said == "denied", said);
      CHECK(wait_exit(stranger.pid) == 0);
      CHECK(a.server->stats().refused >= 1);
      for (auto fd : {stranger.to, stranger.from}) ::close(fd);
    } else {
      MESSAGE("not root: the other-uid attacher is not tested");
    }
    for (auto fd : {worker.to, worker.from, victim.to, victim.from}) ::close(fd);
  }

}  // TEST_SUITE

// ---- Against the real binaries (paths from MC_APPS_DIR, set by meson) -----

extern char** environ;

namespace {

/// Whether something accepts TCP connections on 127.0.0.1:port.
bool port_open(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

struct process {
  pid_t pid = -1;
  explicit process(std::vector<std::string> argv) {
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    if (::posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) pid = -1;
  }
  ~process() {
    if (pid <= 0) return;
    ::kill(pid, SIGTERM);
    (void)wait_exit(pid);
  }
  process(const process&) = delete;
  process& operator=(const process&) = delete;
};

/// Attaches to `server_address` (derived attach port), retrying while the
/// node starts (up to 30 s).
std::unique_ptr<mc::store::attached_client> attach_when_up(mc::runtime::runtime& rt, const std::string& address,
                                                           std::string* why) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    mc::store::attach_options o;
    o.rpc_timeout = std::chrono::seconds(5);
    auto c = mc::store::attached_client::connect(rt, address, o, why);
    if (c) return std::move(*c);
    if (std::chrono::steady_clock::now() > until) return nullptr;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

TEST_SUITE("store attach") {
  TEST_CASE("a real mooncake_client serves attachers on the port derived from its client RPC port") {
    const char* dir = std::getenv("MC_APPS_DIR");
    if (!dir) {
      MESSAGE("MC_APPS_DIR not set: skipped (meson sets it)");
      return;
    }
    // Fixed ports (the attach port is derived from the RPC port): below the
    // ephemeral range and used by no other test.
    const std::string apps = dir, mport = "29371";
    const std::uint16_t rpc = 12945;
    const std::string tiers = R"({"tiers":[{"type":"DRAM","capacity":"64MiB","priority":100}]})";
    process master({cat(apps, "/mooncake_master"), "--rpc_port", mport, "--metrics_port", "0"});
    REQUIRE(master.pid > 0);
    auto node = [&](std::uint16_t port, std::uint16_t te, const char* attach) {
      return std::make_unique<process>(std::vector<std::string>{
          cat(apps, "/mooncake_client"), "--master_server_address", cat("127.0.0.1:", mport), "--port",
          std::to_string(te), "--client_rpc_port", std::to_string(port), "--http_port", "0", "--heartbeat_interval",
          "200ms", "--tiered_backend_config", tiers, cat("--attach=", attach)});
    };
    auto on = node(rpc, 29372, "true");
    auto off = node(rpc + 1, 29373, "false");
    REQUIRE(on->pid > 0);
    REQUIRE(off->pid > 0);
    mc::runtime::runtime rt(2);
    rt.start();
    {
      std::string why;
      auto c = attach_when_up(rt, cat("127.0.0.1:", std::to_string(rpc)), &why);
      REQUIRE_MESSAGE(c, why);
      CHECK(c->attach_endpoint() == cat("127.0.0.1:", std::to_string(mc::store::derived_attach_port(rpc))));
      // The node serves attachers before it is registered with the master (a
      // slow machine may start the master last): a put publishes, so wait
      // until the master knows the node.
      mc::master::master_client m(cat("127.0.0.1:", mport), std::chrono::seconds(2));
      const std::string node_rpc = cat("127.0.0.1:", std::to_string(rpc));
      REQUIRE(eventually([&] {
        auto cl = rt.block_on(m.clients());
        return cl && std::any_of(cl->begin(), cl->end(),
                                 [&](const mc::master::client_status& s) { return s.info.rpc_endpoint == node_rpc; });
      }));
      auto v = random_bytes((1u << 20) + 77, 12);
      REQUIRE(rt.block_on(a_put(*c, "real", one(v))));
      std::vector<std::uint8_t> back(v.size());
      auto g = rt.block_on(a_get(*c, "real", one_mut(back)));
      REQUIRE(g);
      CHECK(checksum(back.data(), back.size()) == checksum(v.data(), v.size()));
      auto s = rt.block_on(a_size(*c, "real"));
      REQUIRE(s);
      CHECK(*s == v.size());
      REQUIRE(rt.block_on(a_remove(*c, "real")));
      auto e = rt.block_on(a_exists(*c, {"real"}));
      CHECK((e[0] && !*e[0]));
      c->stop();
      // --attach=false: nothing listens on its derived port (the node itself
      // serves: wait until its RPC port accepts before asking).
      mc::store::attach_options o;
      o.rpc_timeout = std::chrono::seconds(2);
      CHECK(eventually([&] { return port_open(static_cast<std::uint16_t>(rpc + 1)); }));
      CHECK(!mc::store::attached_client::connect(rt, cat("127.0.0.1:", std::to_string(rpc + 1)), o, &why));
    }
    mc::rpc::shutdown(rt);
    rt.stop();
  }

}  // TEST_SUITE
