#include "server/metrics/exposition.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace nearprep {
namespace metrics {
namespace {

bool NameChar(char c, bool first, bool colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
    return true;
  }
  if (colon && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

const char* TypeName(MetricType t) {
  switch (t) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// Appends {a="x",b="y"[,extra_name="extra_value"]}, or nothing when there
// are no labels at all.
void AppendLabels(const Labels& labels, const char* extra_name,
                  const std::string& extra_value, std::string* out) {
  if (labels.empty() && extra_name == nullptr) return;
  out->push_back('{');
  bool first = true;
  for (const auto& [name, value] : labels) {
    if (!first) out->push_back(',');
    first = false;
    out->append(name).append("=\"").append(EscapeLabelValue(value));
    out->push_back('"');
  }
  if (extra_name != nullptr) {
    if (!first) out->push_back(',');
    out->append(extra_name).append("=\"").append(extra_value);
    out->push_back('"');
  }
  out->push_back('}');
}

void AppendLine(const std::string& name, const char* suffix,
                const Labels& labels, const char* extra_name,
                const std::string& extra_value, const std::string& value,
                std::string* out) {
  out->append(name).append(suffix);
  AppendLabels(labels, extra_name, extra_value, out);
  out->push_back(' ');
  out->append(value);
  out->push_back('\n');
}

// Why `s` cannot be written, or empty when it can.
std::string SampleProblem(const MetricFamily& f, const Sample& s) {
  for (const auto& l : s.labels) {
    if (!IsValidLabelName(l.first)) return "invalid label name '" + l.first + "'";
    if (f.type == MetricType::kHistogram && l.first == "le") {
      return "label 'le' is reserved for histogram buckets";
    }
  }
  if (f.type == MetricType::kHistogram) {
    const HistogramValue& h = s.histogram;
    if (h.cumulative_counts.size() != h.upper_bounds.size() + 1) {
      return "histogram with " + std::to_string(h.upper_bounds.size()) +
             " bounds but " + std::to_string(h.cumulative_counts.size()) +
             " bucket counts";
    }
  }
  return "";
}

}  // namespace

MetricFamily& MetricFamily::Add(Labels labels, double value) {
  Sample s;
  s.labels = std::move(labels);
  s.value = value;
  samples.push_back(std::move(s));
  return *this;
}

MetricFamily& MetricFamily::Add(Labels labels, HistogramValue histogram) {
  Sample s;
  s.labels = std::move(labels);
  s.histogram = std::move(histogram);
  samples.push_back(std::move(s));
  return *this;
}

MetricFamily CounterFamily(std::string name, std::string help) {
  return MetricFamily{std::move(name), std::move(help), MetricType::kCounter, {}};
}
MetricFamily GaugeFamily(std::string name, std::string help) {
  return MetricFamily{std::move(name), std::move(help), MetricType::kGauge, {}};
}
MetricFamily HistogramFamily(std::string name, std::string help) {
  return MetricFamily{std::move(name), std::move(help), MetricType::kHistogram,
                      {}};
}

bool IsValidMetricName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!NameChar(name[i], i == 0, /*colon=*/true)) return false;
  }
  return true;
}

bool IsValidLabelName(const std::string& name) {
  if (name.empty() || name.compare(0, 2, "__") == 0) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!NameChar(name[i], i == 0, /*colon=*/false)) return false;
  }
  return true;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  if (v == std::trunc(v) && std::fabs(v) <= 9007199254740992.0) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  // The shortest of %.15g .. %.17g that reads back exactly.
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string WriteExposition(const std::vector<MetricFamily>& families) {
  std::string out;
  for (const MetricFamily& f : families) {
    if (!IsValidMetricName(f.name)) {
      out += "# skipped: invalid metric name '" + EscapeHelp(f.name) + "'\n";
      continue;
    }
    out.append("# HELP ").append(f.name).append(" ");
    out.append(EscapeHelp(f.help)).append("\n");
    out.append("# TYPE ").append(f.name).append(" ");
    out.append(TypeName(f.type)).append("\n");
    for (const Sample& s : f.samples) {
      const std::string problem = SampleProblem(f, s);
      if (!problem.empty()) {
        out += "# skipped: a sample of " + f.name + ": " + EscapeHelp(problem) +
               "\n";
        continue;
      }
      if (f.type != MetricType::kHistogram) {
        AppendLine(f.name, "", s.labels, nullptr, "", FormatValue(s.value),
                   &out);
        continue;
      }
      const HistogramValue& h = s.histogram;
      for (size_t i = 0; i < h.upper_bounds.size(); ++i) {
        AppendLine(f.name, "_bucket", s.labels, "le",
                   FormatValue(h.upper_bounds[i]),
                   std::to_string(h.cumulative_counts[i]), &out);
      }
      AppendLine(f.name, "_bucket", s.labels, "le", "+Inf",
                 std::to_string(h.cumulative_counts.back()), &out);
      AppendLine(f.name, "_sum", s.labels, nullptr, "", FormatValue(h.sum),
                 &out);
      AppendLine(f.name, "_count", s.labels, nullptr, "",
                 std::to_string(h.count), &out);
    }
  }
  return out;
}

}  // namespace metrics
}  // namespace nearprep
