#include "server/metrics/exposition.h"

#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace nearprep {
namespace metrics {
namespace {

TEST(ExpositionTest, WritesSmallRegistryExactly) {
  std::vector<MetricFamily> f;
  f.push_back(CounterFamily("np_batches_total", "Batches sent.")
                  .Add({{"dataset", "a"}}, 3)
                  .Add({{"dataset", "b"}}, 12));
  f.push_back(GaugeFamily("np_streams", "Live streams.").Add({}, 2));
  HistogramValue h;
  h.upper_bounds = {0.001, 0.01};
  h.cumulative_counts = {1, 3, 4};
  h.sum = 0.5;
  h.count = 4;
  f.push_back(HistogramFamily("np_wait_seconds", "Wait.")
                  .Add({{"kind", "x"}}, h));
  EXPECT_EQ(WriteExposition(f),
            "# HELP np_batches_total Batches sent.\n"
            "# TYPE np_batches_total counter\n"
            "np_batches_total{dataset=\"a\"} 3\n"
            "np_batches_total{dataset=\"b\"} 12\n"
            "# HELP np_streams Live streams.\n"
            "# TYPE np_streams gauge\n"
            "np_streams 2\n"
            "# HELP np_wait_seconds Wait.\n"
            "# TYPE np_wait_seconds histogram\n"
            "np_wait_seconds_bucket{kind=\"x\",le=\"0.001\"} 1\n"
            "np_wait_seconds_bucket{kind=\"x\",le=\"0.01\"} 3\n"
            "np_wait_seconds_bucket{kind=\"x\",le=\"+Inf\"} 4\n"
            "np_wait_seconds_sum{kind=\"x\"} 0.5\n"
            "np_wait_seconds_count{kind=\"x\"} 4\n");
}

TEST(ExpositionTest, FamilyWithoutSamplesKeepsHelpAndType) {
  EXPECT_EQ(WriteExposition({GaugeFamily("np_g", "G.")}),
            "# HELP np_g G.\n# TYPE np_g gauge\n");
}

TEST(ExpositionTest, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(EscapeHelp("x\\y\nz \"q\""), "x\\\\y\\nz \"q\"");
  std::vector<MetricFamily> f;
  f.push_back(GaugeFamily("np_g", "line1\nline2 \\ end")
                  .Add({{"dataset", "we\"ird\\name\n"}}, 1));
  EXPECT_EQ(WriteExposition(f),
            "# HELP np_g line1\\nline2 \\\\ end\n"
            "# TYPE np_g gauge\n"
            "np_g{dataset=\"we\\\"ird\\\\name\\n\"} 1\n");
}

TEST(ExpositionTest, FormatsValues) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(42), "42");
  EXPECT_EQ(FormatValue(-7), "-7");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(1e-05), "1e-05");
  // 15 digits would read back as 0.3: the writer uses 17.
  EXPECT_EQ(FormatValue(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatValue(9007199254740992.0), "9007199254740992");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::quiet_NaN()), "NaN");
  // Every formatted value parses back to itself.
  for (double v : {0.1, 1.0 / 3.0, 123456.789, 1e300, 5e-324, 0.00005}) {
    EXPECT_EQ(std::strtod(FormatValue(v).c_str(), nullptr), v) << FormatValue(v);
  }
}

TEST(ExpositionTest, ValidatesNames) {
  EXPECT_TRUE(IsValidMetricName("nearprep_x_total"));
  EXPECT_TRUE(IsValidMetricName("a:b_c9"));
  EXPECT_TRUE(IsValidMetricName("_x"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("9x"));
  EXPECT_FALSE(IsValidMetricName("a-b"));
  EXPECT_FALSE(IsValidMetricName("a b"));
  EXPECT_TRUE(IsValidLabelName("dataset"));
  EXPECT_TRUE(IsValidLabelName("_x1"));
  EXPECT_FALSE(IsValidLabelName("__name__"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("1a"));
  EXPECT_FALSE(IsValidLabelName(""));
}

TEST(ExpositionTest, SkipsInvalidNamesWithAComment) {
  std::vector<MetricFamily> f;
  f.push_back(GaugeFamily("bad-name", "x").Add({}, 1));
  f.push_back(GaugeFamily("np_ok", "ok")
                  .Add({{"bad label", "v"}}, 1)
                  .Add({{"good", "v"}}, 2));
  HistogramValue h;
  h.upper_bounds = {1};
  h.cumulative_counts = {1};  // one count short
  f.push_back(HistogramFamily("np_h", "h").Add({}, h));
  HistogramValue h2;
  h2.upper_bounds = {};
  h2.cumulative_counts = {0};
  f.push_back(HistogramFamily("np_h2", "h2").Add({{"le", "1"}}, h2));
  EXPECT_EQ(WriteExposition(f),
            "# skipped: invalid metric name 'bad-name'\n"
            "# HELP np_ok ok\n"
            "# TYPE np_ok gauge\n"
            "# skipped: a sample of np_ok: invalid label name 'bad label'\n"
            "np_ok{good=\"v\"} 2\n"
            "# HELP np_h h\n"
            "# TYPE np_h histogram\n"
            "# skipped: a sample of np_h: histogram with 1 bounds but 1 "
            "bucket counts\n"
            "# HELP np_h2 h2\n"
            "# TYPE np_h2 histogram\n"
            "# skipped: a sample of np_h2: label 'le' is reserved for "
            "histogram buckets\n");
}

TEST(ExpositionTest, HistogramWithoutLabelsHasOnlyLe) {
  HistogramValue h;
  h.upper_bounds = {1};
  h.cumulative_counts = {0, 2};
  h.sum = 7;
  h.count = 2;
  EXPECT_EQ(WriteExposition({HistogramFamily("np_h", "h").Add({}, h)}),
            "# HELP np_h h\n# TYPE np_h histogram\n"
            "np_h_bucket{le=\"1\"} 0\n"
            "np_h_bucket{le=\"+Inf\"} 2\n"
            "np_h_sum 7\n"
            "np_h_count 2\n");
}

}  // namespace
}  // namespace metrics
}  // namespace nearprep
