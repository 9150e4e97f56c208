// Fleet datasets in the wire adapter (issue 14, docs/protocol.md "Fleet
// datasets"): DatasetInfo's manifest fields, and the explicit-ids request
// mode (StreamBatchesRequest.sample_ids, manifest_hash).
//
// Thread-safety: pure functions.
#ifndef NEARPREP_SERVER_SERVICE_FLEET_REQUEST_H_
#define NEARPREP_SERVER_SERVICE_FLEET_REQUEST_H_

#include "absl/status/status.h"
#include "nearprep/v1/nearprep.pb.h"
#include "server/data/dataset.h"
#include "server/pipeline/pipeline.h"

namespace nearprep {

inline constexpr int kMaxExplicitSampleIds = 65536;
inline constexpr uint64_t kMaxPlanBlockSamples = uint64_t{1} << 20;

// DatasetInfo.manifest_hash / num_partitions / partitions_held, and with a
// placement placement_version / partitions_assigned.
void FillFleetInfo(const Dataset& d, v1::DatasetInfo* info);

// Applies the explicit mode to a validated request *r (no-op when the
// request has no sample_ids and no manifest_hash). INVALID_ARGUMENT naming
// the field for a field explicit mode does not combine with, an id out of
// range or repeated, too many ids, plan_block_samples without sample_ids or
// over kMaxPlanBlockSamples; FAILED_PRECONDITION for an id in a
// partition this daemon does not hold or a manifest_hash that differs.
absl::Status ApplyExplicitIds(const v1::StreamBatchesRequest& request,
                              const Dataset& d, StreamRequest* r);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_SERVICE_FLEET_REQUEST_H_
