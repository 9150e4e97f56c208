#include "server/metrics/registry.h"

#include <utility>

namespace nearprep {
namespace metrics {

void MetricsRegistry::AddCollector(Collector collector) {
  MutexLock lock(&mu_);
  collectors_.push_back(std::move(collector));
}

std::vector<MetricFamily> MetricsRegistry::Collect() const {
  std::vector<MetricFamily> out;
  MutexLock lock(&mu_);
  for (const Collector& c : collectors_) c(&out);
  return out;
}

std::string MetricsRegistry::Render() const {
  return WriteExposition(Collect());
}

}  // namespace metrics
}  // namespace nearprep
