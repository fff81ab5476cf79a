#pragma once
// Runs fio as a child process (the baseline of the file benchmarks) and parses
// its JSON output. Header-only; include <boost/json/src.hpp> in exactly one TU
// of the program (runtime_bench.cpp / tier_bench.cpp do).
#include <boost/json.hpp>

#include <cstdio>
#include <optional>
#include <string>

namespace mc::bench {

struct fio_job {
  std::string filename;
  std::string rw;          // read | write | randread | randwrite
  std::string block_size;  // "1M", "4k"
  std::string size;        // "512M"
  unsigned iodepth = 1;
  std::string extra;  // appended verbatim
};

/// MiB/s (and IOPS) of one fio job with ioengine=io_uring, direct=1 and, like
/// our SSD tier, registered buffers and files (fixedbufs, registerfiles);
/// nullopt if fio is missing or failed (the message is printed to stderr).
struct fio_result {
  double mib_s = 0;
  double iops = 0;
};

inline std::optional<fio_result> run_fio(const fio_job& j) {
  std::string cmd =
      "fio --name=baseline --ioengine=io_uring --direct=1 --fixedbufs --registerfiles --thread"
      " --output-format=json"
      " --filename=" +
      j.filename + " --rw=" + j.rw + " --bs=" + j.block_size + " --size=" + j.size +
      " --iodepth=" + std::to_string(j.iodepth) + " " + j.extra + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return std::nullopt;
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = ::pclose(p);
  auto brace = out.find('{');
  if (rc != 0 || brace == std::string::npos) {
    std::fprintf(stderr, "fio failed (rc %d): %s\n", rc, cmd.c_str());
    return std::nullopt;
  }
  boost::system::error_code ec;
  auto v = boost::json::parse(std::string_view(out).substr(brace), ec);
  if (ec) {
    std::fprintf(stderr, "cannot parse fio output: %s\n", ec.message().c_str());
    return std::nullopt;
  }
  try {
    const auto& job = v.at("jobs").at(0);
    const char* dir = (j.rw.find("read") != std::string::npos) ? "read" : "write";
    const auto& d = job.at(dir);
    fio_result r;
    r.mib_s = d.at("bw_bytes").to_number<double>() / (1024.0 * 1024.0);
    r.iops = d.at("iops").to_number<double>();
    return r;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected fio JSON: %s\n", e.what());
    return std::nullopt;
  }
}

}  // namespace mc::bench
