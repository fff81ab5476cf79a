// Two engines in two network namespaces talking over a veth pair.
// Exit 77 (skip) when not root or `ip netns` is unavailable.
#include "child_process.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

using mc::transfer::test::child_process;
using namespace std::chrono_literals;

namespace {

int run(const std::string& cmd) {
  int rc = std::system((cmd + " >/dev/null 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 1;
}

struct netns_pair {
  std::string a, b, va, vb;
  bool ok = false;
  netns_pair() {
    auto id = std::to_string(::getpid());
    a = "mc4a-" + id;
    b = "mc4b-" + id;
    va = "mc4a" + id.substr(0, 8);
    vb = "mc4b" + id.substr(0, 8);
    if (run("ip netns add " + a) != 0) return;
    if (run("ip netns add " + b) != 0) return;
    ok = run("ip link add " + va + " type veth peer name " + vb) == 0 &&
         run("ip link set " + va + " netns " + a) == 0 && run("ip link set " + vb + " netns " + b) == 0 &&
         run("ip -n " + a + " addr add 10.199.4.1/24 dev " + va) == 0 &&
         run("ip -n " + b + " addr add 10.199.4.2/24 dev " + vb) == 0 &&
         run("ip -n " + a + " link set " + va + " up") == 0 && run("ip -n " + b + " link set " + vb + " up") == 0 &&
         run("ip -n " + a + " link set lo up") == 0 && run("ip -n " + b + " link set lo up") == 0;
  }
  ~netns_pair() {
    run("ip netns del " + a);  // deleting a namespace deletes its veth end (and the pair)
    run("ip netns del " + b);
    run("ip link del " + va);
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH_TO_transfer_peer_helper\n", argv[0]);
    return 2;
  }
  std::string helper = argv[1];
  if (::geteuid() != 0 || run("ip netns list") != 0) {
    std::printf("skip: needs root and ip netns\n");
    return 77;
  }
  netns_pair ns;
  if (!ns.ok) {
    std::printf("skip: cannot create network namespaces / veth here\n");
    return 77;
  }
  child_process server({"ip", "netns", "exec", ns.b, helper, "serve", "0.0.0.0", std::to_string(8u << 20)});
  auto line = server.read_line(15s);
  if (!line) {
    std::fprintf(stderr, "FAIL: server in %s did not report READY\n", ns.b.c_str());
    return 1;
  }
  std::istringstream in(*line);
  std::string tag, ep, addr, len, token;
  in >> tag >> ep >> addr >> len >> token;
  std::printf("server: %s\n", line->c_str());
  if (tag != "READY" || ep.rfind("10.199.4.2:", 0) != 0) {
    std::fprintf(stderr, "FAIL: unexpected advertised endpoint '%s' (want the veth address)\n", ep.c_str());
    return 1;
  }
  child_process client({"ip", "netns", "exec", ns.a, helper, "client", ep, addr, len, token, "auto"});
  auto via = client.read_line(60s);
  int rc = client.wait();
  server.close_stdin();
  server.wait();
  if (rc != 0 || !via || *via != "VIA 0 tcp") {
    std::fprintf(stderr, "FAIL: client exit %d, %s\n", rc, via ? via->c_str() : "(no VIA line)");
    return 1;
  }
  std::printf("ok: write/read-back over veth between %s and %s (%s)\n", ns.a.c_str(), ns.b.c_str(), via->c_str());
  return 0;
}
