// The check behind `nearprep load --verify`: one (stream, epoch) received
// every sample id of its shard exactly once, in shard order. A sample the
// daemon skipped (Batch.errors, ERROR_POLICY_SKIP) counts as delivered: it
// was accounted for, it just has no image.
//
// The expected ids come from the normative epoch plan (server/data/
// epoch_plan.h): shard k of n of the (seed, epoch) order.
//
// Thread-safety: pure functions and plain values.
#ifndef NEARPREP_CLIENT_CPP_SRC_LOAD_VERIFY_H_
#define NEARPREP_CLIENT_CPP_SRC_LOAD_VERIFY_H_

#include <cstdint>
#include <string>
#include <vector>

namespace nearprep {

// What one stream received for one epoch.
struct EpochDelivery {
  std::vector<uint64_t> received;  // Batch.sample_ids, in arrival order.
  std::vector<uint64_t> skipped;   // Batch.errors[].sample_id.
  uint64_t end_position = 0;       // next_position of the last batch.
  uint64_t batches = 0;
};

struct VerifyResult {
  bool ok = true;
  uint64_t expected = 0;     // Ids the stream should have delivered.
  uint64_t delivered = 0;    // received + skipped, duplicates included.
  uint64_t missing = 0;      // Expected ids never delivered.
  uint64_t duplicated = 0;   // Ids delivered more than once (each counted once).
  uint64_t unexpected = 0;   // Delivered ids not in the expected part.
  uint64_t out_of_order = 0; // Received ids at a shard position before the previous one.
  std::string detail;        // Empty when ok; else the first problems found.
};

// The sample ids of shard `shard_index` of `num_shards` of the epoch order of
// a dataset of `num_samples` samples, in shard order.
std::vector<uint64_t> ExpectedShard(uint64_t num_samples, uint64_t seed,
                                    uint64_t epoch, bool shuffle,
                                    uint32_t shard_index, uint32_t num_shards);

// Checks `d` against `shard` (ExpectedShard). `whole_shard`: the request
// asked for the entire shard (no max_batches, no drop_remainder), so every
// id of the shard must have been delivered; otherwise the expected part is
// the shard's first d.end_position ids.
VerifyResult VerifyDelivery(const std::vector<uint64_t>& shard,
                            const EpochDelivery& d, bool whole_shard);

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_SRC_LOAD_VERIFY_H_
