#pragma once
// inference_bench's settings and its command line (bench/README.md lists the
// options; --help prints them).
#include "bench_options.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace mc::bench::inference {

struct settings {
  std::vector<std::string> configs{"tcp", "shm"};
  std::vector<std::string> cases;  // empty: all
  std::size_t vllm_pieces = 64;    // pieces per 2 MiB vllm value
  bool small_pages = false;        // caller buffers without the huge-page advice
  int runs = 3;
  double seconds = 0.5;
  std::string apps_dir;
  std::vector<std::string> owner_flags;  // appended to the owner mooncake_client's command line
  std::string ours_only;                 // "put" / "get": big cases measure only ours (A/B of builds, profiling)
};

/// Fills `s` from the command line (and the environment / a --config file,
/// as every bench); exits with a message on a bad option.
inline void parse(int argc, char** argv, settings& s) {
  std::uint64_t runs = static_cast<std::uint64_t>(s.runs);
  bool quick = false;
  mc::config::option_set set("inference_bench",
                             "Connector-shaped batches (sglang: 128 x 1 MiB; vllm: 64 x 2 MiB in 64 x 32 KiB pieces;\n"
                             "lmcache: 32 MiB puts one at a time, gets in batches of 4; small: 4 KiB in batches of 32\n"
                             "and single gets at 1 and 8 in flight) against a mooncake_client owner, with a raw TCP\n"
                             "pump / memcpy / Redis (libhiredis, pipelined) measured in the same run. Default: 3 runs\n"
                             "of 0.5 s per measurement (< 5 min); --quick: 2 runs of 0.12 s (< 1.5 min) unless\n"
                             "--runs / --seconds are given.");
  set.add("quick", &quick, "2 runs of 0.12 s")
      .add_list("configs", &s.configs, "tcp and/or shm")
      .add_list("cases", &s.cases, "sglang,vllm,lmcache,small (empty: all)")
      .add("runs", &runs, "repetitions per measurement", 1, 1000)
      .add("seconds", &s.seconds, "duration of one measurement", 0, 3600)
      .add("apps", &s.apps_dir, "directory of mooncake_master and mooncake_client")
      .add_list("owner-flags", &s.owner_flags,
                "extra flags for the owner mooncake_client, comma-separated (e.g. --transfer_spread_bytes=0)")
      .add("vllm-pieces", &s.vllm_pieces,
           "pieces per vllm value (a power of two, 1..512; cases named vllm_pN when not 64), to see the "
           "per-piece cost",
           1, 512)
      .add("ours-only", &s.ours_only,
           "put or get: the big cases measure only ours, `runs` times `seconds` each, one line per run and no "
           "baselines or target rows (to compare two builds with --apps, or to profile the processes)")
      .add("small-pages", &s.small_pages,
           "caller buffers in 4 KiB pages (default: 2 MiB-aligned and advised for transparent huge pages, like a "
           "KV pool; the big cases are then named *_4kpages and carry no target)");
  mc::bench::parse_options(set, argc, argv);
  if ((s.vllm_pieces & (s.vllm_pieces - 1)) != 0)
    mc::bench::option_error("inference_bench", "--vllm-pieces takes a power of two in 1..512");
  mc::bench::check_choices("inference_bench", "configs", s.configs, {"tcp", "shm"});
  mc::bench::check_choices("inference_bench", "cases", s.cases, {"sglang", "vllm", "lmcache", "small"});
  if (!s.ours_only.empty() && s.ours_only != "put" && s.ours_only != "get")
    mc::bench::option_error("inference_bench", "--ours-only takes put or get");
  s.runs = static_cast<int>(runs);
  if (quick) {
    if (!set.was_set("runs")) s.runs = 2;
    if (!set.was_set("seconds")) s.seconds = 0.12;
  }
}

}  // namespace mc::bench::inference
