// A user's view of the co_await API: an inference process embeds a P2P
// client, stores its KV-cache blocks locally, and reads blocks that other
// nodes produced straight from their owners.
//
//   kv_cache_example --master_server_address 127.0.0.1:50051 [--blocks 8] [--block_bytes 1048576]
//
// It joins the cluster as a client (ephemeral ports), puts N blocks, reads
// them back, lists the blocks the other nodes hold under "demo/" that it can
// see, and leaves.
#include "mc/rpc/client.hpp"
#include "mc/runtime/runtime.hpp"
#include "mc/store/client.hpp"

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

mc::task<int> run(mc::store::client& node, int blocks, std::size_t block_bytes) {
  std::mt19937_64 rng(42);
  std::vector<std::vector<std::byte>> kv(blocks, std::vector<std::byte>(block_bytes));
  for (auto& b : kv)
    for (auto& x : b) x = static_cast<std::byte>(rng());

  // 1. Store this process's blocks (local put; published to the master).
  std::vector<std::string> keys;
  std::vector<std::span<const std::byte>> values;
  for (int i = 0; i < blocks; ++i) {
    keys.push_back("example/" + node.id() + "/layer0/block" + std::to_string(i));
    values.emplace_back(kv[i]);
  }
  auto put = co_await node.batch_put(keys, values);
  for (std::size_t i = 0; i < put.size(); ++i)
    if (!put[i]) {
      std::fprintf(stderr, "put %s: %s\n", keys[i].c_str(), put[i].error().message().c_str());
      co_return 1;
    }
  std::printf("stored %d blocks of %zu bytes\n", blocks, block_bytes);

  // 2. Read them back (local hits) and compare.
  std::vector<std::byte> buf(block_bytes);
  for (int i = 0; i < blocks; ++i) {
    auto n = co_await node.get(keys[i], buf);
    if (!n || *n != block_bytes || std::memcmp(buf.data(), kv[i].data(), block_bytes) != 0) {
      std::fprintf(stderr, "get %s: %s\n", keys[i].c_str(), n ? "content differs" : n.error().message().c_str());
      co_return 1;
    }
  }
  std::printf("read back %d blocks, all identical\n", blocks);

  // 3. A block held elsewhere (e.g. put by `make run`'s CLI) is read from its owner.
  auto info = co_await node.query("demo/block-0");
  if (info) {
    std::vector<std::byte> remote(info->size);
    auto n = co_await node.get("demo/block-0", remote);
    std::printf("demo/block-0: %llu bytes, owner %s, remote get %s\n", static_cast<unsigned long long>(info->size),
                info->replicas.empty() ? "?" : info->replicas[0].client_id.c_str(),
                n ? "ok" : n.error().message().c_str());
  } else {
    std::printf("demo/block-0: %s (put one with mooncake_cli to see a remote read)\n", info.error().message().c_str());
  }

  // 4. Clean up what this example stored.
  for (auto& k : keys) (void)co_await node.remove(k);
  co_return 0;
}

}  // namespace

int main(int argc, char** argv) {
  mc::store::client_options opts;
  opts.client_id.clear();
  opts.port = 0;             // ephemeral TransferEngine port
  opts.client_rpc_port = 0;  // ephemeral RPC port
  opts.tiered_backend_config = R"({"tiers":[{"type":"DRAM","capacity":"256MiB","priority":100}]})";
  int blocks = 8;
  std::size_t block_bytes = 1 << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--master_server_address")
      opts.master_server_address = argv[i + 1];
    else if (a == "--blocks")
      blocks = std::stoi(argv[i + 1]);
    else if (a == "--block_bytes")
      block_bytes = std::stoul(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s --master_server_address HOST:PORT [--blocks N] [--block_bytes N]\n", argv[0]);
      return 2;
    }
  }
  mc::config::option_set none("example", "");
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
    return 1;
  }
  int rc = rt.block_on(run(**node, blocks, block_bytes));
  (*node)->stop();
  node->reset();
  mc::rpc::shutdown(rt);
  rt.stop();
  return rc;
}
