// Prometheus text exposition format (version 0.0.4): the data model of one
// scrape and the writer that renders it. Ours because prometheus-cpp is not
// packaged in Debian; small on purpose: counters, gauges and histograms, no
// summaries, no exemplars, no OpenMetrics.
//
// A scrape is a list of MetricFamily: a name, its HELP text, its TYPE and
// its samples, each with its own label set. Histograms carry cumulative
// bucket counts (a sample with value v is counted in every bucket whose
// upper bound is >= v); the writer emits NAME_bucket{...,le="B"} for every
// bound and le="+Inf", then NAME_sum and NAME_count.
//
// Escaping (as the format specifies): in HELP, backslash and newline; in
// label values, backslash, double quote and newline. Metric and label names
// are not escaped: a family with an invalid name, or a sample with an
// invalid label name, is left out and a "# skipped: ..." comment says so
// (comments are valid in the format), so a bad name never produces a page
// that scrapers reject as a whole.
//
// Thread-safety: plain values and pure functions.
#ifndef NEARPREP_SERVER_METRICS_EXPOSITION_H_
#define NEARPREP_SERVER_METRICS_EXPOSITION_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace nearprep {
namespace metrics {

enum class MetricType { kCounter, kGauge, kHistogram };

// Label name -> value, in the order they are written.
using Labels = std::vector<std::pair<std::string, std::string>>;

// A histogram at one instant. upper_bounds is ascending and finite;
// cumulative_counts has upper_bounds.size() + 1 entries, the last one (the
// +Inf bucket) equal to count.
struct HistogramValue {
  std::vector<double> upper_bounds;
  std::vector<uint64_t> cumulative_counts;
  double sum = 0;
  uint64_t count = 0;
};

struct Sample {
  Labels labels;
  double value = 0;          // counters and gauges
  HistogramValue histogram;  // histograms
};

struct MetricFamily {
  std::string name;
  std::string help;
  MetricType type = MetricType::kGauge;
  std::vector<Sample> samples;

  // Appends a counter/gauge sample.
  MetricFamily& Add(Labels labels, double value);
  // Appends a histogram sample.
  MetricFamily& Add(Labels labels, HistogramValue histogram);
};

// Shorthands for a family without samples yet.
MetricFamily CounterFamily(std::string name, std::string help);
MetricFamily GaugeFamily(std::string name, std::string help);
MetricFamily HistogramFamily(std::string name, std::string help);

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(const std::string& name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved).
bool IsValidLabelName(const std::string& name);

// A sample value as the format writes it: "+Inf", "-Inf", "NaN", integers
// without exponent or decimals up to 2^53, otherwise the shortest decimal
// that reads back to the same double.
std::string FormatValue(double v);
std::string EscapeLabelValue(const std::string& value);
std::string EscapeHelp(const std::string& help);

// Renders `families` in order. Families without samples still get their
// HELP and TYPE lines.
std::string WriteExposition(const std::vector<MetricFamily>& families);

// The Content-Type of WriteExposition's output.
inline constexpr char kContentType[] =
    "text/plain; version=0.0.4; charset=utf-8";

}  // namespace metrics
}  // namespace nearprep

#endif  // NEARPREP_SERVER_METRICS_EXPOSITION_H_
