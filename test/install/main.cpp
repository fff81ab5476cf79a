// Built by test/install/install_test.sh OUTSIDE the source tree, against the
// installed headers and libraries, with only `pkg-config --cflags --libs
// mooncake-p2p`. Joins a running cluster as a client (ephemeral ports), writes
// a random value onto the node given by --target (remote write), puts another
// one locally, reads both back through the store, compares, and checks with
// the master that each is held where it was put.
//
//   install_smoke --master_server_address HOST:PORT --target HOST:RPC_PORT
#include "mc/rpc/client.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/store/client.hpp"

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

std::vector<std::byte> random_bytes(std::mt19937_64& rng, std::size_t n) {
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

mc::task<int> roundtrip(mc::store::client& node, const std::string& key, const std::vector<std::byte>& value,
                        const mc::store::put_options& where, const std::string& holder) {
  if (auto put = co_await node.put(key, value, where); !put) {
    std::fprintf(stderr, "put %s: %s\n", key.c_str(), put.error().message().c_str());
    co_return 1;
  }
  std::vector<std::byte> back(value.size() + 1);
  auto n = co_await node.get(key, back);
  if (!n || *n != value.size() || std::memcmp(back.data(), value.data(), value.size()) != 0) {
    std::fprintf(stderr, "get %s: %s\n", key.c_str(), n ? "content differs" : n.error().message().c_str());
    co_return 1;
  }
  auto info = co_await node.query(key);
  bool held = false;
  if (info)
    for (const auto& r : info->replicas) held = held || r.client_id == holder;
  if (!info || info->size != value.size() || !held) {
    std::fprintf(stderr, "query %s: %s\n", key.c_str(),
                 info ? ("wrong size or not held by " + holder).c_str() : info.error().message().c_str());
    co_return 1;
  }
  std::printf("%s: %zu bytes stored on %s and read back identical\n", key.c_str(), value.size(),
              info->replicas[0].client_id.c_str());
  (void)co_await node.remove(key);
  co_return 0;
}

mc::task<int> run(mc::store::client& node, const std::string& target) {
  std::mt19937_64 rng(std::random_device{}());
  auto remote = random_bytes(rng, 1000003);
  auto local = random_bytes(rng, 4097);
  // Named locals, no temporaries in the co_await expressions: GCC 12 destroys
  // a class temporary of a co_await full-expression twice (GCC PR 99576).
  const std::string remote_key = "install-test/remote/" + node.id();
  const std::string local_key = "install-test/local/" + node.id();
  const mc::store::put_options onto_target{mc::store::placement::remote, target};
  const mc::store::put_options here{};
  int rc = co_await roundtrip(node, remote_key, remote, onto_target, target);
  if (rc == 0) rc = co_await roundtrip(node, local_key, local, here, node.id());
  co_return rc;
}

}  // namespace

int main(int argc, char** argv) {
  mc::store::client_options opts;
  opts.port = 0;             // ephemeral TransferEngine port
  opts.client_rpc_port = 0;  // ephemeral RPC port
  opts.tiered_backend_config = R"({"tiers":[{"type":"DRAM","capacity":"64MiB","priority":100}]})";
  std::string target;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--master_server_address")
      opts.master_server_address = argv[i + 1];
    else if (a == "--target")
      target = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: %s --master_server_address HOST:PORT --target HOST:RPC_PORT\n", argv[0]);
      return 2;
    }
  }
  mc::config::option_set none("install_smoke", "");
  if (auto err = mc::store::resolve(opts, none); !err.empty()) {
    std::fprintf(stderr, "%s\n", err.c_str());
    return 2;
  }
  mc::runtime::runtime rt(2);
  rt.start();
  std::string why;
  auto node = mc::store::client::start(rt, opts, &why);
  if (!node) {
    std::fprintf(stderr, "cannot start the client: %s\n", why.c_str());
    mc::rpc::shutdown(rt);
    rt.stop();
    return 1;
  }
  int rc = rt.block_on(run(**node, target));
  (*node)->stop();
  node->reset();
  mc::rpc::shutdown(rt);
  rt.stop();
  return rc;
}
