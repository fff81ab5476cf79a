// Fuzz target `python_setup`: the Python API's configuration (the dict of
// `MooncakeDistributedStore.setup(config)` / `setup_p2p_real_client`, and the
// keyword form of `setup()`): mc::python::parse_setup() turns key/value
// strings into a node's client_options through the node's own flag parser.
// No Python: parse_setup() takes the strings the extension extracts.
//
// Input, two forms: 'T' then lines `key=value` (the seed corpus: the dicts
// the Python tests and the positional setup() pass, as the extension turns
// them into strings with str()); otherwise (key, value) pairs drawn by
// FuzzedDataProvider, keys mostly the known ones (Mooncake's and
// mooncake_client's flags), sometimes arbitrary. An input whose value names an existing path is skipped: several
// options read a file they name (tiered_backend_config, auth_token_file), and
// a target must not read the machine's files (or block on a FIFO).
// Invariants: an error always carries a message; a parsed configuration has
// at least one tier, every tier passes validate_tiers(), and a hostname.
#include <fuzzer/FuzzedDataProvider.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mc/tiered/tier_config.hpp"
#include "session.hpp"

namespace {

const char* const known_keys[] = {"local_hostname",
                                  "metadata_server",
                                  "global_segment_size",
                                  "local_buffer_size",
                                  "protocol",
                                  "rdma_devices",
                                  "master_server_addr",
                                  "engine",
                                  "enable_ssd_offload",
                                  "ssd_offload_path",
                                  "tenant_id",
                                  "ipc_socket_path",
                                  "enable_client_http_server",
                                  "client_http_port",
                                  "lock_shard_count",
                                  "master_server_address",
                                  "client_id",
                                  "client_rpc_port",
                                  "rpc_thread_num",
                                  "tiered_backend_config",
                                  "device_names",
                                  "rpc_timeout",
                                  "heartbeat_interval",
                                  "transfer_transport",
                                  "max_inline_value_bytes",
                                  "inline_threshold",
                                  "max_batch_keys",
                                  "max_inflight_bytes",
                                  "rdma_bounce_bytes",
                                  "http_port",
                                  "port",
                                  "deployment_mode",
                                  "attach",
                                  "attach_port"};

const char* const typical_values[] = {"127.0.0.1",
                                      "127.0.0.1:17812",
                                      "[::1]:1",
                                      "localhost",
                                      "P2PHANDSHAKE",
                                      "16MB",
                                      "0",
                                      "4 GiB",
                                      "tcp",
                                      "rdma",
                                      "127.0.0.1:50051",
                                      "None",
                                      "True",
                                      "false",
                                      "1",
                                      "",
                                      "{\"tiers\":[{\"type\":\"DRAM\",\"capacity\":\"64MiB\"}]}",
                                      "{\"tiers\":[{\"type\":\"SSD\",\"capacity\":1,\"path\":\"x\"}]}",
                                      "10s",
                                      "500ms",
                                      "65536",
                                      "P2P",
                                      "-1",
                                      "18446744073709551616"};

bool names_a_path(const std::string& v) {
  struct stat st {};
  return !v.empty() && ::stat(v.c_str(), &st) == 0;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> text_form(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> kv;
  while (!text.empty() && kv.size() < 64) {
    auto nl = text.find('\n');
    auto line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    kv.emplace_back(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
  }
  return kv;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::pair<std::string, std::string>> kv;
  if (size > 0 && data[0] == 'T') {
    kv = text_form(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
    for (auto& [k, v] : kv)
      if (names_a_path(v)) return 0;
  } else {
    FuzzedDataProvider in(data, size);
    const std::size_t n = in.ConsumeIntegralInRange<std::size_t>(0, 24);
    for (std::size_t i = 0; i < n && in.remaining_bytes() > 0; ++i) {
      std::string key =
          in.ConsumeBool()
              ? known_keys[in.ConsumeIntegralInRange<std::size_t>(0, sizeof known_keys / sizeof *known_keys - 1)]
              : in.ConsumeRandomLengthString(64);
      std::string value = in.ConsumeBool() ? typical_values[in.ConsumeIntegralInRange<std::size_t>(
                                                 0, sizeof typical_values / sizeof *typical_values - 1)]
                                           : in.ConsumeRandomLengthString(256);
      if (names_a_path(value)) return 0;
      kv.emplace_back(std::move(key), std::move(value));
    }
  }
  std::string why;
  auto cfg = mc::python::parse_setup(kv, &why);
  if (!cfg) {
    if (why.empty()) std::abort();  // every refusal says why
    return 0;
  }
  if (cfg->opts.tiers.empty() || !mc::tiered::validate_tiers(cfg->opts.tiers)) std::abort();
  return 0;
}
