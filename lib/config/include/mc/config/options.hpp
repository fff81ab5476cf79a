#pragma once
/// Command-line flags (Mooncake's names, `--flag value` and `--flag=value`),
/// an optional TOML file (`--config FILE`, same key names) and environment
/// variables, with one precedence: defaults < file < environment < flags.
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mc::config {

/// Parses "512MiB", "16GB", "4k", "1048576" into bytes. Every unit is a power
/// of 1024 (K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB), as Mooncake and the tier
/// configuration read them. nullopt if invalid.
std::optional<std::uint64_t> parse_size(std::string_view text);
/// The longest duration parse_duration_ms() accepts: 365 days. Every
/// deadline or timeout a node derives from a duration option (now() + it,
/// a multiple of it, in steady_clock nanoseconds) then stays far inside
/// 64 bits; a larger number was silently wrapped before.
inline constexpr std::chrono::milliseconds max_duration = std::chrono::hours(24 * 365);
/// Parses "10s", "500ms", "2m", "250us" (a bare number means milliseconds).
/// nullopt if invalid or longer than max_duration.
std::optional<std::chrono::milliseconds> parse_duration_ms(std::string_view text);

struct outcome {
  enum class kind { run, help, version, error };
  kind what = kind::run;
  std::string message;  ///< the help text, the version line (no newline), or the error
};

/// A set of named options bound to variables. Not thread-safe; use at startup.
class option_set {
 public:
  option_set(std::string program, std::string summary);

  /// Binds options. `name` has no leading dashes. Defaults are the current
  /// values of the targets, shown by --help.
  option_set& add(std::string name, std::string* target, std::string help);
  option_set& add(std::string name, bool* target, std::string help);
  /// Integer in [min, max].
  option_set& add(std::string name, std::uint64_t* target, std::string help, std::uint64_t min = 0,
                  std::uint64_t max = UINT64_MAX);
  option_set& add(std::string name, std::uint16_t* target, std::string help, std::uint16_t min = 0,
                  std::uint16_t max = UINT16_MAX);
  /// Byte size with units ("512MiB").
  option_set& add_size(std::string name, std::uint64_t* target, std::string help);
  /// Duration ("10s", "500ms"; bare number = ms).
  option_set& add(std::string name, std::chrono::milliseconds* target, std::string help);
  /// Finite real number in [min, max] ("0.05", "2", "1e-3").
  option_set& add(std::string name, double* target, std::string help, double min, double max);
  /// Comma-separated lists ("tcp,shm"; "1,16,64"; "64K,1M"). Empty items are an
  /// error; the whole list replaces the default. Integers are bounded to
  /// [min, max]; a list holds at most max_list_items items. In a TOML file the
  /// value is either such a string or an array of strings / integers.
  static constexpr std::size_t max_list_items = 1024;
  option_set& add_list(std::string name, std::vector<std::string>* target, std::string help);
  option_set& add_list(std::string name, std::vector<std::uint64_t>* target, std::string help, std::uint64_t min = 0,
                       std::uint64_t max = UINT64_MAX);
  /// List of byte sizes with units, as add_size().
  option_set& add_size_list(std::string name, std::vector<std::uint64_t>* target, std::string help);
  /// Free-form validator: returns an error message or nullopt.
  option_set& add_custom(std::string name, std::string default_text, std::string help,
                         std::function<std::optional<std::string>(std::string_view)> set);
  /// The environment variable `var`, when set, assigns option `name`.
  option_set& env(std::string var, std::string name);
  /// A TOML key that the application reads itself from file_text() (e.g. the
  /// `tiers` array of tables); it is not an error in the file.
  option_set& allow_file_key(std::string key);
  /// Accepts a lone `--` on the command line: every argument after it is kept,
  /// unparsed, in rest() (e.g. flags handed on to another option set). Without
  /// this call `--` is an error. `what` names them in --help ("CLIENT-FLAGS").
  option_set& accept_rest(std::string what);
  /// The arguments after `--` (empty without one). Valid after parse().
  const std::vector<std::string>& rest() const { return rest_; }

  /// Parses argv (argv[0] skipped). `--help`/`-h` yields kind::help; `--version`
  /// yields kind::version with mc::config::version_line(program); `--config
  /// FILE` loads a TOML file first. Every error names the option or key.
  outcome parse(int argc, const char* const* argv);
  /// Same for tests: arguments without argv[0].
  outcome parse(const std::vector<std::string>& args);

  std::string help() const;
  /// Text of the --config file, empty if none was given.
  const std::string& file_text() const { return file_text_; }
  const std::string& file_path() const { return file_path_; }
  /// Whether the --config file contained top-level key `key` (one registered
  /// with allow_file_key()).
  bool file_has_key(std::string_view key) const;
  /// Whether an option was set explicitly (file, env or flag).
  bool was_set(std::string_view name) const;

 private:
  struct option {
    std::string name;
    std::string default_text;
    std::string help;
    std::function<std::optional<std::string>(std::string_view)> set;
    bool is_bool = false;
    bool is_list = false;  ///< a TOML array is accepted
    bool set_explicitly = false;
    std::string env_var;
  };
  option* find(std::string_view name);
  std::optional<std::string> assign(option& o, std::string_view value, std::string_view source);
  std::optional<std::string> load_file(const std::string& path);

  std::string program_;
  std::string summary_;
  std::vector<option> options_;
  std::vector<std::string> file_keys_;
  std::vector<std::string> file_keys_seen_;
  std::string file_text_;
  std::string file_path_;
  std::string rest_what_;  ///< non-empty: `--` is accepted
  std::vector<std::string> rest_;
};

}  // namespace mc::config
