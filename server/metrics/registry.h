// MetricsRegistry: what one scrape collects. Metrics live where they are
// counted (atomics and Histograms in the pipeline, the service, the
// backend); the registry only holds collectors, functions that read those
// values at scrape time and append MetricFamily entries. So the counting
// code knows nothing of Prometheus or HTTP, and a scrape costs nothing
// between scrapes.
//
// Thread-safety: thread-safe. Collectors run on the scraping thread, one
// scrape at a time, and must not call back into the registry; the objects a
// collector reads must outlive the registry (or the collector's removal by
// destroying the registry).
#ifndef NEARPREP_SERVER_METRICS_REGISTRY_H_
#define NEARPREP_SERVER_METRICS_REGISTRY_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "server/metrics/exposition.h"

namespace nearprep {
namespace metrics {

class MetricsRegistry {
 public:
  using Collector = std::function<void(std::vector<MetricFamily>* out)>;

  void AddCollector(Collector collector) ABSL_LOCKS_EXCLUDED(mu_);

  // Runs every collector, in the order they were added.
  std::vector<MetricFamily> Collect() const ABSL_LOCKS_EXCLUDED(mu_);
  // Collect() in the text exposition format.
  std::string Render() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable Mutex mu_;
  std::vector<Collector> collectors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metrics
}  // namespace nearprep

#endif  // NEARPREP_SERVER_METRICS_REGISTRY_H_
