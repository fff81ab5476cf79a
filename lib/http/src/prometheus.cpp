#include "mc/http/prometheus.hpp"

#include "text.hpp"

namespace mc::http {

namespace {
void escape_help(std::string& out, std::string_view s) {
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out.push_back(c);
  }
}
void escape_label(std::string& out, std::string_view s) {
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"')
      out += "\\\"";
    else
      out.push_back(c);
  }
}
}  // namespace

exposition& exposition::family(std::string_view name, std::string_view type, std::string_view help) {
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  escape_help(out_, help);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
  return *this;
}

void exposition::write_labels(std::initializer_list<label> labels, std::string_view extra_name,
                              std::string_view extra_value) {
  if (labels.size() == 0 && extra_name.empty()) return;
  out_ += '{';
  bool first = true;
  auto one = [&](std::string_view n, std::string_view v) {
    if (!first) out_ += ',';
    first = false;
    out_ += n;
    out_ += "=\"";
    escape_label(out_, v);
    out_ += '"';
  };
  for (auto& l : labels) one(l.name, l.value);
  if (!extra_name.empty()) one(extra_name, extra_value);
  out_ += '}';
}

exposition& exposition::sample(std::string_view name, std::initializer_list<label> labels, double value) {
  out_ += name;
  write_labels(labels);
  out_ += ' ';
  out_ += detail::format_number(value);
  out_ += '\n';
  return *this;
}

exposition& exposition::single(std::string_view name, std::string_view type, std::string_view help, double value) {
  family(name, type, help);
  return sample(name, {}, value);
}

exposition& exposition::histogram(std::string_view name, std::initializer_list<label> labels,
                                  std::span<const double> bounds, std::span<const std::uint64_t> counts, double sum) {
  std::string bucket = std::string(name) + "_bucket";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i <= bounds.size(); ++i) {
    cumulative += i < counts.size() ? counts[i] : 0;
    out_ += bucket;
    write_labels(labels, "le", i < bounds.size() ? detail::format_number(bounds[i]) : "+Inf");
    out_ += ' ';
    out_ += detail::format_number(static_cast<double>(cumulative));
    out_ += '\n';
  }
  out_ += name;
  out_ += "_sum";
  write_labels(labels);
  out_ += ' ' + detail::format_number(sum) + '\n';
  out_ += name;
  out_ += "_count";
  write_labels(labels);
  out_ += ' ' + detail::format_number(static_cast<double>(cumulative)) + '\n';
  return *this;
}

}  // namespace mc::http
