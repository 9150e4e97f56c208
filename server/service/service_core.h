// ServiceCore: what nearprep.v1.Preprocessor does, without gRPC (the shape of
// tf.data service's worker: DataServiceWorkerImpl does the work,
// GrpcWorkerImpl only adapts the calls). The adapter
// (preprocessor_service.cc) parses the raw request, authorizes the caller
// from what the transport established, and hands the parsed message here:
// the listing, the server's description (ServerInfo), admission and opening
// of a stream (request_validation, StreamRegistry), and the service's
// counters live here. Messages are the generated protobuf classes
// (nearprep.pb.h: protobuf, no gRPC header).
//
// Thread-safety: thread-safe; counters are atomics.
#ifndef NEARPREP_SERVER_SERVICE_SERVICE_CORE_H_
#define NEARPREP_SERVER_SERVICE_SERVICE_CORE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nearprep/v1/nearprep.pb.h"
#include "server/data/dataset.h"
#include "server/metrics/histogram.h"
#include "server/pipeline/pipeline.h"
#include "server/service/request_validation.h"
#include "server/service/stream_registry.h"

namespace nearprep {

// Live counters of the service (the stream registry, the pipeline and the
// backend keep theirs).
struct ServiceCounters {
  std::atomic<uint64_t> batches_sent{0};
  std::atomic<uint64_t> bytes_sent{0};
  // StreamBatches calls refused before their first batch (ServerInfo's
  // requests_rejected): request_errors (a malformed or invalid request)
  // plus those the registry refused (draining, max_concurrent_streams).
  std::atomic<uint64_t> requests_rejected{0};
  std::atomic<uint64_t> request_errors{0};
  // Per batch: from the start of its write to its completion (the transport
  // took the message; a slow client's flow control shows here), in seconds.
  metrics::Histogram send_seconds{metrics::LatencyBuckets()};
  // Per batch: the serialized message's bytes.
  metrics::Histogram batch_bytes{metrics::SizeBuckets()};
};

// What was sent per dataset (the set of datasets is fixed at start, so the
// label's cardinality is bounded by the configuration).
struct DatasetCounters {
  std::atomic<uint64_t> batches_sent{0};
  std::atomic<uint64_t> samples_sent{0};
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> streams_started{0};
};

class ServiceCore {
 public:
  // `datasets` and `pipeline` must outlive the core. `backend_why`: why the
  // factory chose the backend (appended to ServerInfo.backend_detail).
  ServiceCore(std::vector<const Dataset*> datasets, Pipeline* pipeline,
              ServiceLimits limits, std::string backend_why);
  ~ServiceCore();
  ServiceCore(const ServiceCore&) = delete;
  ServiceCore& operator=(const ServiceCore&) = delete;

  // ListDatasets: the datasets `visible` allows (empty function: all), by
  // name.
  void FillDatasetList(const std::function<bool(const std::string&)>& visible,
                       v1::ListDatasetsResponse* response) const;

  // GetServerInfo's answer.
  void FillServerInfo(v1::ServerInfo* info) const;

  // A StreamBatches call whose caller may read `request.dataset()`:
  // validated, admitted and opened (the stream's counters are `dataset`,
  // nullptr for a name not configured). A refusal is counted here
  // (requests_rejected; request_errors when the request itself was at
  // fault) and returned: validation's error naming the field, or the
  // registry's (UNAVAILABLE while draining, RESOURCE_EXHAUSTED at
  // max_concurrent_streams).
  struct OpenedStream {
    std::shared_ptr<StreamRegistry::Entry> entry;
    DatasetCounters* dataset = nullptr;
  };
  absl::StatusOr<OpenedStream> OpenStream(
      const v1::StreamBatchesRequest& request, const std::string& origin);

  // A call the adapter refused itself (unparseable bytes: `invalid`; the
  // caller not authorized: not).
  void CountRejected(bool invalid);
  // One batch written: `bytes` of message, `samples` images, `send_seconds`
  // from its write's start to its completion. `dataset` may be nullptr.
  void CountBatchSent(DatasetCounters* dataset, uint64_t bytes,
                      uint32_t samples, double send_seconds);

  // Admission, live streams and draining (the daemon's shutdown uses it).
  StreamRegistry& streams() { return streams_; }
  const StreamRegistry& streams() const { return streams_; }
  const ServiceCounters& counters() const { return counters_; }
  // Per dataset name, every configured dataset.
  const std::map<std::string, std::unique_ptr<DatasetCounters>>&
  dataset_counters() const {
    return dataset_counters_;
  }

 private:
  const Dataset* FindDataset(const std::string& name) const;

  std::map<std::string, const Dataset*> datasets_;
  std::vector<std::string> dataset_names_;  // as configured, for messages
  Pipeline* pipeline_;
  ServiceLimits limits_;
  std::string backend_why_;
  std::chrono::steady_clock::time_point start_time_;
  ServiceCounters counters_;
  std::map<std::string, std::unique_ptr<DatasetCounters>> dataset_counters_;
  StreamRegistry streams_;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_SERVICE_SERVICE_CORE_H_
