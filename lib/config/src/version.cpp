#include "mc/config/version.hpp"

#include "build_version.hpp"

namespace mc::config {

std::string_view project_version() noexcept { return MC_PROJECT_VERSION; }

std::string_view vcs_revision() noexcept {
  std::string_view v = MC_VCS_REVISION;
  return v.empty() ? std::string_view("unknown") : v;
}

std::string version_line(std::string_view program) {
  std::string out(program);
  out += ' ';
  out += project_version();
  out += " (";
  out += vcs_revision();
  out += ')';
  return out;
}

}  // namespace mc::config
