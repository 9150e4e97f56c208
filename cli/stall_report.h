// The data-stall report: how much of a trainer's wall time went to waiting
// for data, and which stage bounded the supply.
//
// Inputs are what a consumer sees per batch: how long it was blocked in
// Next() for it ("wait"), and the daemon's per-batch stage timings
// (StageTimings: worker time spent reading, decoding and transforming the
// batch's samples, and the wall time the finished batch sat in the
// prefetch queue before it was written to the connection).
//
// Attribution of one batch's wait W (docs/operations.md, "Data stalls"):
//   - min(queue_wait, W) goes to "queue/network": the batch was finished on
//     the server while the trainer waited, so what held it was the write
//     path (gRPC flow control, the network, the client's receive);
//   - the rest goes to producing the batch, split over read / decode /
//     transform in proportion to their worker time in that batch.
// The stage with the largest attributed time bounded the supply. A trainer
// whose stall fraction is below kStallNegligible is compute-bound.
//
// Thread-safety: pure functions and plain values.
#ifndef NEARPREP_CLIENT_CPP_SRC_STALL_REPORT_H_
#define NEARPREP_CLIENT_CPP_SRC_STALL_REPORT_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace nearprep {

// One batch as the consumer saw it.
struct BatchRecord {
  double t_s = 0;      // Arrival, seconds since the load started.
  double wait_s = 0;   // Time blocked in Next() for this batch.
  uint32_t images = 0;
  uint64_t bytes = 0;
  uint64_t read_us = 0, decode_us = 0, transform_us = 0, queue_wait_us = 0;
};

enum StallStage { kStageRead = 0, kStageDecode, kStageTransform,
                  kStageQueueNetwork, kNumStallStages };

// "read", "decode", "transform", "queue/network".
const char* StallStageName(int stage);

// Below this stall fraction a trainer counts as compute-bound.
inline constexpr double kStallNegligible = 0.05;

struct StallSummary {
  double wall_s = 0;          // The trainer's wall time.
  double wait_s = 0;          // Of which blocked waiting for data.
  double stall_fraction = 0;  // wait_s / wall_s.
  std::array<double, kNumStallStages> by_stage_s{};  // Attributed wait.
  int bound_stage = -1;       // Largest by_stage_s; -1 when nothing waited.
  // "decode" etc., or "none (compute-bound)" below kStallNegligible.
  std::string Bound() const;
};

// Splits one batch's wait over the stages (the rule above) and adds it.
void AttributeWait(const BatchRecord& b,
                   std::array<double, kNumStallStages>* by_stage_s);

// The summary of one trainer's batches over `wall_s` seconds.
StallSummary AnalyzeStalls(const std::vector<BatchRecord>& batches,
                           double wall_s);

// Throughput and stall fraction over time, in bins of `bin_s` seconds.
struct TimelineBin {
  double start_s = 0;
  double images_per_s = 0;
  double stall_fraction = 0;  // Waiting time / active trainer time in the bin.
};
struct TrainerSpan {
  double start_s = 0, end_s = 0;     // When the trainer was running.
  const std::vector<BatchRecord>* batches = nullptr;
};
std::vector<TimelineBin> BuildTimeline(const std::vector<TrainerSpan>& trainers,
                                       double total_s, double bin_s);

// A PNG (libpng) with two panels over time: images/s of all trainers
// together, and the stall fraction. INTERNAL when it cannot be written;
// INVALID_ARGUMENT for an empty timeline.
absl::Status WriteStallPlot(const std::string& path,
                            const std::vector<TimelineBin>& timeline,
                            double bin_s, const std::string& title);

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_SRC_STALL_REPORT_H_
