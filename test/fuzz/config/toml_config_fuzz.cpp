// Fuzz target `toml_config`: the TOML configuration file of the node binaries
// (`--config FILE`, mc::config::option_set::parse -> load_file) with their real
// option declarations. The first byte picks mooncake_client (even) or
// mooncake_master (odd); the rest is the file's text, written to an
// in-memory file (memfd_create, made once) that parse() opens as
// /proc/self/fd/N: nothing is written to disk, no path comes from the input,
// and the client's tiered_backend_config is only checked when it is inline
// JSON (node_options.hpp).
//
// Invariants: either an error whose message starts with the program's name
// and names the file (every TOML or key error does), or options that the
// binary's own validation (resolve: the [[tiers]] tables too; validate)
// accepts or refuses with a message, with durations the binaries can use,
// and whose values, rendered as `--name=value` flags, parse to the same
// values in a fresh option set.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "node_options.hpp"

namespace {

int fd = -1;
std::string path;

void write_file(const std::uint8_t* data, std::size_t size) {
  mc::fuzz::check_that(::ftruncate(fd, 0) == 0);
  std::size_t done = 0;
  while (done < size) {
    auto n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    mc::fuzz::check_that(n > 0);
    done += static_cast<std::size_t>(n);
  }
}

template <class Cfg>
void run(const std::string& program) {
  Cfg a;
  auto r = a.set.parse(std::vector<std::string>{"--config", path});
  mc::fuzz::check_outcome(r, program);
  if (r.what == mc::config::outcome::kind::error) {
    mc::fuzz::check_that(r.message.find(path) != std::string::npos);  // names the file
    return;
  }
  mc::fuzz::check_that(r.what == mc::config::outcome::kind::run);
  Cfg b;
  auto again = b.set.parse(a.render());
  mc::fuzz::check_that(again.what == mc::config::outcome::kind::run);
  mc::fuzz::check_that(a.same_as(b));
  a.check();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  mc::fuzz::clear_option_environment();
  fd = ::memfd_create("mc-fuzz-node.toml", MFD_CLOEXEC);
  mc::fuzz::check_that(fd >= 0);
  path = "/proc/self/fd/" + std::to_string(fd);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  write_file(data + 1, size - 1);
  if (data[0] % 2 == 0)
    run<mc::fuzz::client_cfg>("mooncake_client");
  else
    run<mc::fuzz::master_cfg>("mooncake_master");
  return 0;
}
