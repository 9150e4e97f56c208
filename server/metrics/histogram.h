// Histogram: a lock-free distribution of observed values over fixed bucket
// upper bounds, for per-sample and per-batch latencies recorded on hot
// paths (one binary search and three relaxed atomic adds per Observe).
//
// Buckets follow Prometheus: a value v is counted in the first bucket whose
// upper bound is >= v (bounds are inclusive), or in the implicit +Inf
// bucket; Value() reports cumulative counts. A snapshot taken while other
// threads observe is consistent in its counts (count is the sum of the
// buckets it read) but its sum may include an observation whose bucket it
// did not see yet.
//
// Thread-safety: Observe and Value may be called concurrently.
#ifndef NEARPREP_SERVER_METRICS_HISTOGRAM_H_
#define NEARPREP_SERVER_METRICS_HISTOGRAM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "server/metrics/exposition.h"

namespace nearprep {
namespace metrics {

class Histogram {
 public:
  // `upper_bounds`: finite; sorted and de-duplicated here.
  explicit Histogram(std::vector<double> upper_bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void Observe(double value);
  HistogramValue Value() const;
  const std::vector<double>& upper_bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  // Per-bucket (not cumulative) counts; the last one is +Inf.
  const std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<double> sum_{0.0};
};

// Bounds for latencies of one sample or one batch: 50 us .. 10 s, roughly
// 1-2.5-5 per decade.
std::vector<double> LatencyBuckets();
// Bounds for sizes in bytes: 4 KiB .. 64 MiB, powers of 4.
std::vector<double> SizeBuckets();

}  // namespace metrics
}  // namespace nearprep

#endif  // NEARPREP_SERVER_METRICS_HISTOGRAM_H_
