#pragma once
/// Builds Prometheus text exposition (format 0.0.4), as `promtool check
/// metrics` accepts it: one HELP and TYPE line per family, escaped label
/// values, cumulative histogram buckets ending in +Inf, _sum and _count.
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mc::http {

struct label {
  std::string_view name;
  std::string_view value;
};

/// Not thread-safe; build one per scrape.
class exposition {
 public:
  /// Starts a family. `type`: counter, gauge, histogram. Counter names should
  /// end in _total. Call once per family, before its samples.
  exposition& family(std::string_view name, std::string_view type, std::string_view help);
  /// One sample of the current family (name may carry a suffix, e.g. _bucket).
  exposition& sample(std::string_view name, std::initializer_list<label> labels, double value);
  exposition& sample(std::string_view name, std::initializer_list<label> labels, std::uint64_t value) {
    return sample(name, labels, static_cast<double>(value));
  }
  /// Shortcut: family + one sample without labels.
  exposition& single(std::string_view name, std::string_view type, std::string_view help, double value);
  /// Histogram samples for `labels` (family() must have been called with
  /// type histogram). `counts` is non-cumulative with bounds.size() + 1
  /// entries (the last one above every bound).
  exposition& histogram(std::string_view name, std::initializer_list<label> labels, std::span<const double> bounds,
                        std::span<const std::uint64_t> counts, double sum);

  const std::string& text() const noexcept { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void write_labels(std::initializer_list<label> labels, std::string_view extra_name = {},
                    std::string_view extra_value = {});
  std::string out_;
};

/// The content type of the exposition.
inline constexpr std::string_view prometheus_content_type = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace mc::http
