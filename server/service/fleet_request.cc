// See fleet_request.h.
#include "server/service/fleet_request.h"

#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/fleet/manifest.h"
#include "server/fleet/placement.h"

namespace nearprep {

void FillFleetInfo(const Dataset& d, v1::DatasetInfo* info) {
  const fleet::Manifest* m = d.manifest();
  if (m == nullptr) return;
  info->set_manifest_hash(m->hash);
  info->set_num_partitions(m->num_partitions);
  for (uint32_t p : d.partitions_held()) info->add_partitions_held(p);
  if (const fleet::Placement* pl = d.placement(); pl != nullptr) {
    info->set_placement_version(pl->version);
    for (uint32_t p : d.partitions_assigned()) info->add_partitions_assigned(p);
  }
}

absl::Status ApplyExplicitIds(const v1::StreamBatchesRequest& request,
                              const Dataset& d, StreamRequest* r) {
  const fleet::Manifest* m = d.manifest();
  if (!request.manifest_hash().empty()) {
    const std::string have = m ? m->hash : std::string("(none)");
    if (request.manifest_hash() != have) {
      return absl::FailedPreconditionError(absl::StrCat(
          "manifest_hash: the request planned with ", request.manifest_hash(),
          "; dataset '", request.dataset(), "' here has manifest ", have));
    }
  }
  const auto invalid = [](absl::string_view field, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
  };
  if (request.sample_ids_size() == 0) {
    if (request.plan_block_samples() != 0) {
      return invalid("plan_block_samples", "needs sample_ids (the fleet's explicit mode)");
    }
    return absl::OkStatus();
  }
  if (request.plan_block_samples() > kMaxPlanBlockSamples) {
    return invalid("plan_block_samples",
                   absl::StrCat("at most ", kMaxPlanBlockSamples, ", got ",
                                request.plan_block_samples()));
  }
  if (request.sample_ids_size() > kMaxExplicitSampleIds) {
    return invalid("sample_ids", absl::StrCat("at most ", kMaxExplicitSampleIds,
                                              " ids per request, got ",
                                              request.sample_ids_size()));
  }
  if (request.shuffle()) return invalid("shuffle", "must be false with sample_ids");
  if (request.num_shards() > 1 || request.shard_index() != 0) {
    return invalid("num_shards", "must be 0 or 1 (and shard_index 0) with sample_ids");
  }
  if (request.start_batch() != 0 || request.start_position() != 0) {
    return invalid("start_batch", "must be 0 with sample_ids (send the remaining ids)");
  }
  if (request.drop_remainder()) {
    return invalid("drop_remainder", "must be false with sample_ids");
  }
  std::unordered_set<uint64_t> seen;
  seen.reserve(static_cast<size_t>(request.sample_ids_size()));
  r->sample_ids.clear();
  r->sample_ids.reserve(static_cast<size_t>(request.sample_ids_size()));
  for (int i = 0; i < request.sample_ids_size(); ++i) {
    const uint64_t id = request.sample_ids(i);
    const std::string field = absl::StrCat("sample_ids[", i, "]");
    if (id >= d.size()) {
      return invalid(field, absl::StrCat("sample ", id, " is not < num_samples = ", d.size()));
    }
    if (!seen.insert(id).second) {
      return invalid(field, absl::StrCat("sample ", id, " is listed twice"));
    }
    if (!d.Holds(id)) {
      return absl::FailedPreconditionError(absl::StrCat(
          field, ": sample ", id, " is in partition ", m->PartitionOf(id),
          ", which this daemon does not hold (it holds [",
          absl::StrJoin(d.partitions_held(), ","), "] of ", m->num_partitions, ")"));
    }
    r->sample_ids.push_back(id);
  }
  r->shuffle = false;
  r->block_shuffle = false;
  r->plan_block_samples = request.plan_block_samples();
  return absl::OkStatus();
}

}  // namespace nearprep
