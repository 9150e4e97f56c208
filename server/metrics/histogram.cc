#include "server/metrics/histogram.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace nearprep {
namespace metrics {
namespace {

std::vector<double> Normalize(std::vector<double> b) {
  b.erase(std::remove_if(b.begin(), b.end(),
                         [](double v) { return !std::isfinite(v); }),
          b.end());
  std::sort(b.begin(), b.end());
  b.erase(std::unique(b.begin(), b.end()), b.end());
  return b;
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(Normalize(std::move(upper_bounds))),
      buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::Observe(double value) {
  // First bound >= value; NaN compares false everywhere and lands in +Inf.
  const size_t i = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), value) -
      bounds_.begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  double old = sum_.load(std::memory_order_relaxed);
  while (!sum_.compare_exchange_weak(old, old + value,
                                     std::memory_order_relaxed)) {
  }
}

HistogramValue Histogram::Value() const {
  HistogramValue v;
  v.upper_bounds = bounds_;
  v.cumulative_counts.resize(bounds_.size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += buckets_[i].load(std::memory_order_relaxed);
    v.cumulative_counts[i] = total;
  }
  v.count = total;
  v.sum = sum_.load(std::memory_order_relaxed);
  return v;
}

std::vector<double> LatencyBuckets() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
          0.025,   0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   5.0,  10.0};
}

std::vector<double> SizeBuckets() {
  std::vector<double> b;
  for (double v = 4096; v <= 64.0 * 1024 * 1024; v *= 4) b.push_back(v);
  return b;
}

}  // namespace metrics
}  // namespace nearprep
