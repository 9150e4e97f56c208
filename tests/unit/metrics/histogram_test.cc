#include "server/metrics/histogram.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace nearprep {
namespace metrics {
namespace {

TEST(HistogramTest, BucketsAreCumulativeWithInclusiveBounds) {
  Histogram h({0.1, 1.0, 10.0});
  for (double v : {0.05, 0.1, 0.5, 1.0, 3.0, 20.0, 30.0}) h.Observe(v);
  const HistogramValue v = h.Value();
  ASSERT_EQ(v.upper_bounds, (std::vector<double>{0.1, 1.0, 10.0}));
  // <=0.1: 0.05, 0.1; <=1: +0.5, 1.0; <=10: +3.0; +Inf: +20, 30.
  EXPECT_EQ(v.cumulative_counts, (std::vector<uint64_t>{2, 4, 5, 7}));
  EXPECT_EQ(v.count, 7u);
  EXPECT_DOUBLE_EQ(v.sum, 0.05 + 0.1 + 0.5 + 1.0 + 3.0 + 20.0 + 30.0);
}

TEST(HistogramTest, SortsAndDeduplicatesBounds) {
  Histogram h({10.0, 1.0, 1.0, 5.0});
  EXPECT_EQ(h.upper_bounds(), (std::vector<double>{1.0, 5.0, 10.0}));
  h.Observe(4.0);
  EXPECT_EQ(h.Value().cumulative_counts, (std::vector<uint64_t>{0, 1, 1, 1}));
}

TEST(HistogramTest, EmptyHistogram) {
  Histogram h(LatencyBuckets());
  const HistogramValue v = h.Value();
  EXPECT_EQ(v.count, 0u);
  EXPECT_EQ(v.sum, 0.0);
  EXPECT_EQ(v.cumulative_counts.size(), LatencyBuckets().size() + 1);
  for (uint64_t c : v.cumulative_counts) EXPECT_EQ(c, 0u);
}

TEST(HistogramTest, ConcurrentObservationsAreAllCounted) {
  Histogram h({1.0, 2.0});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 10000; ++i) h.Observe(t % 2 == 0 ? 0.5 : 1.5);
    });
  }
  for (auto& t : threads) t.join();
  const HistogramValue v = h.Value();
  EXPECT_EQ(v.count, 40000u);
  EXPECT_EQ(v.cumulative_counts, (std::vector<uint64_t>{20000, 40000, 40000}));
  EXPECT_DOUBLE_EQ(v.sum, 20000 * 0.5 + 20000 * 1.5);
}

TEST(HistogramTest, DefaultBucketsAreAscending) {
  for (const auto& b : {LatencyBuckets(), SizeBuckets()}) {
    ASSERT_FALSE(b.empty());
    for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]);
  }
  EXPECT_EQ(SizeBuckets().front(), 4096.0);
  EXPECT_EQ(SizeBuckets().back(), 64.0 * 1024 * 1024);
}

}  // namespace
}  // namespace metrics
}  // namespace nearprep
