#pragma once
/// The version every binary prints for `--version`.
#include <string>
#include <string_view>

namespace mc::config {

/// The project version from meson.build (e.g. "0.1.0"). Thread-safe.
std::string_view project_version() noexcept;
/// `git describe --always --dirty --tags` of the source tree at build time, or
/// "unknown" when the tree was not a git checkout (or git was missing). Thread-safe.
std::string_view vcs_revision() noexcept;
/// "<program> <project version> (<revision>)", no newline: what `--version`
/// prints. Thread-safe.
std::string version_line(std::string_view program);

}  // namespace mc::config
