// The daemon's metrics: maps the live counters of the service, the stream
// registry, the pipeline and the backend onto Prometheus families
// (server/metrics). No gRPC here and no HTTP: nearprepd registers
// CollectServerMetrics with its MetricsRegistry and serves that.
//
// Names and units follow Prometheus conventions (_seconds, _bytes, _total).
// Labels have bounded cardinality: dataset (the configured ones), backend
// (one per daemon), kind (a fixed set per metric); never a stream or a
// client address. docs/operations.md lists every metric; kMetricNames below
// is that list for tests (the Grafana dashboard's test checks every query
// against it).
//
// Thread-safety: CollectServerMetrics may run concurrently with serving.
#ifndef NEARPREP_SERVER_SERVICE_SERVER_METRICS_H_
#define NEARPREP_SERVER_SERVICE_SERVER_METRICS_H_

#include <vector>

#include "server/metrics/exposition.h"
#include "server/service/server.h"

namespace nearprep {

// Appends the nearprep_* families of `server` (process_* come from
// metrics::CollectProcessMetrics). `server` outlives the call.
void CollectServerMetrics(NearprepServer& server,
                          std::vector<metrics::MetricFamily>* out);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_SERVICE_SERVER_METRICS_H_
