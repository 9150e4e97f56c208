// The gRPC adapter of nearprep.v1.Preprocessor (callback API). Each handler
// converts the request, forwards to code without gRPC headers
// (request_validation.h, StreamRegistry, the pipeline) and converts the
// result back.
//
// Every method is registered "raw": StreamBatches so that batches can be
// written as grpc::ByteBuffers that reference the pipeline's batch memory
// (see batch_serializer.h), and all of them so that requests are parsed
// here: malformed bytes are INVALID_ARGUMENT naming the message type (gRPC's
// own parse failure would answer with a code and no message). One ServerWriteReactor per stream, in the shape of gRPC's
// route_guide callback server: the constructor asks the stream for its first
// result; each result is written (StartWrite) or ends the call (Finish); each
// completed write (OnWriteDone) asks for the next. No thread per stream, and
// the next batch is taken only when the previous write completed, so a slow
// client slows its stream's prefetch window down (backpressure).
//
// Thread-safety: all methods are called concurrently by gRPC; the class is
// thread-safe. It must outlive the grpc::Server it is registered with.
#ifndef NEARPREP_SERVER_SERVICE_PREPROCESSOR_SERVICE_H_
#define NEARPREP_SERVER_SERVICE_PREPROCESSOR_SERVICE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "nearprep/v1/nearprep.grpc.pb.h"
#include "server/authz/authorizer.h"
#include "server/data/dataset.h"
#include "server/metrics/histogram.h"
#include "server/pipeline/pipeline.h"
#include "server/service/request_validation.h"
#include "server/service/stream_registry.h"

namespace nearprep {

// Live counters kept by the adapter (the stream registry, the pipeline and
// the backend keep theirs).
struct ServiceCounters {
  std::atomic<uint64_t> batches_sent{0};
  std::atomic<uint64_t> bytes_sent{0};
  // StreamBatches calls refused before their first batch (ServerInfo's
  // requests_rejected): request_errors (a malformed or invalid request)
  // plus those the registry refused (draining, max_concurrent_streams).
  std::atomic<uint64_t> requests_rejected{0};
  std::atomic<uint64_t> request_errors{0};
  // Per batch: from StartWrite to its completion (gRPC took the message;
  // a slow client's flow control shows here), in seconds.
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

class PreprocessorService final
    : public v1::Preprocessor::WithRawCallbackMethod_ListDatasets<
          v1::Preprocessor::WithRawCallbackMethod_StreamBatches<
              v1::Preprocessor::WithRawCallbackMethod_GetServerInfo<
                  v1::Preprocessor::CallbackService>>> {
 public:
  // `datasets`, `pipeline` and `authorizer` must outlive the service.
  // `authorizer` checks every ListDatasets, StreamBatches and GetServerInfo
  // call (server/authz; nullptr: none is checked).
  PreprocessorService(std::vector<const Dataset*> datasets, Pipeline* pipeline,
                      ServiceLimits limits, std::string backend_why,
                      authz::Authorizer* authorizer = nullptr);
  ~PreprocessorService() override;

  grpc::ServerUnaryReactor* ListDatasets(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* StreamBatches(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;

  // Fills `info` (also used by GetServerInfo).
  void FillServerInfo(v1::ServerInfo* info) const;

  // Admission, live streams and draining (the daemon's shutdown uses it).
  StreamRegistry& streams() { return streams_; }

  const ServiceCounters& counters() const { return counters_; }

  // Metadata key and per-process random value with which the server's own
  // in-process GetServerInfo (NearprepServer::CheckServing, the watchdog)
  // skips authorization; it never leaves the process.
  static constexpr const char* kInternalKeyHeader = "nearprep-internal-key";
  const std::string& internal_key() const { return internal_key_; }
  // Per dataset name, every configured dataset.
  const std::map<std::string, std::unique_ptr<DatasetCounters>>&
  dataset_counters() const {
    return dataset_counters_;
  }

 private:
  class BatchWriter;

  const Dataset* FindDataset(const std::string& name) const;

  std::map<std::string, const Dataset*> datasets_;
  std::vector<std::string> dataset_names_;  // as configured, for messages
  Pipeline* pipeline_;
  ServiceLimits limits_;
  authz::Authorizer* authorizer_;
  std::string internal_key_;
  // Why the factory chose the backend; appended to the backend's live
  // detail() (which may carry counters) in GetServerInfo.
  std::string backend_why_;
  std::chrono::steady_clock::time_point start_time_;
  ServiceCounters counters_;
  std::map<std::string, std::unique_ptr<DatasetCounters>> dataset_counters_;
  StreamRegistry streams_;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_SERVICE_PREPROCESSOR_SERVICE_H_
