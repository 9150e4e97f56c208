// Turns a wire StreamBatchesRequest into the pipeline's validated
// StreamRequest: every field is range-checked, "0 means default" fields are
// resolved, and the daemon's limits are enforced.
//
// Errors (absl codes map one to one onto gRPC codes):
//   INVALID_ARGUMENT   a field is malformed; the message starts with the
//                      field's path ("transform.height: must be in
//                      [1, 16384], got 0").
//   NOT_FOUND          the dataset is not served by this daemon.
//   RESOURCE_EXHAUSTED the request is well formed but exceeds a configured
//                      limit (max_batch_size, max_output_pixels,
//                      per_stream_memory_bytes).
//
// Includes protobuf message headers but no gRPC headers, so it is testable
// without a server.
//
// Thread-safety: pure functions.
#ifndef NEARPREP_SERVER_SERVICE_REQUEST_VALIDATION_H_
#define NEARPREP_SERVER_SERVICE_REQUEST_VALIDATION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nearprep/v1/nearprep.pb.h"
#include "server/data/dataset.h"
#include "server/pipeline/pipeline.h"

namespace nearprep {

// Limits the daemon enforces on requests (ServerInfo.limits).
struct ServiceLimits {
  uint32_t max_batch_size = 256;
  // Output height * width.
  uint64_t max_output_pixels = uint64_t{1024} * 1024;
  // Decoded height * width * components (TensorFlow refuses >= 2^29).
  uint64_t max_decoded_pixels = uint64_t{1} << 29;
  uint32_t max_concurrent_streams = 64;
  uint64_t per_stream_memory_bytes = uint64_t{1} << 30;
};

// Hard bound on each output side, independent of the configured limits: the
// (nearprep.v1.range) max of transform.height and transform.width in
// nearprep.proto (request_validation_test ties the two).
inline constexpr uint32_t kMaxOutputSide = 16384;

// Finds a dataset by name; nullptr when unknown.
using DatasetLookup = std::function<const Dataset*(const std::string&)>;

// Validates `request`. On success the StreamRequest is complete (dataset set,
// defaults resolved, limits copied in).
// `served` (the daemon's dataset names) only improves the NOT_FOUND message
// of an unknown name: it suggests the closest one (ClosestName).
absl::StatusOr<StreamRequest> ValidateStreamRequest(
    const v1::StreamBatchesRequest& request, const DatasetLookup& lookup,
    const ServiceLimits& limits, const std::vector<std::string>& served = {});

// The name of `candidates` nearest to `name` by edit distance (insertions,
// deletions, substitutions, swaps of neighbours; case-insensitive), when it
// is close enough to be a typo (at most 1 edit per 3 characters, at least
// 1); empty otherwise.
std::string ClosestName(const std::string& name,
                        const std::vector<std::string>& candidates);

// Validates only the transform (prefix "transform." in messages).
absl::StatusOr<TransformSpec> ValidateTransform(const v1::Transform& t);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_SERVICE_REQUEST_VALIDATION_H_
