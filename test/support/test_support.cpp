#include "test_support.hpp"

#include <filesystem>
#include <stdexcept>
#include <unistd.h>

namespace mc::test {

std::string make_temp_dir(const char* prefix) {
  const char* base = std::getenv("MC_TEST_TMPDIR");
  std::string tmpl = std::string(base ? base : "/var/tmp") + "/" + prefix + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
  return buf.data();
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

}  // namespace mc::test
