// What the fleet commands of `nearprep` share (cli/commands/:
// manifest.cc, fleet_plan.cc, placement.cc, fleet_read.cc): their error
// line, the plan's flags, the check of a batch range against the epoch, and
// reading a manifest or placement file with errors that name the flag.
//
// Thread-safety: for the CLI's one thread.
#ifndef NEARPREP_CLIENT_CPP_FLEET_FLEET_CLI_H_
#define NEARPREP_CLIENT_CPP_FLEET_FLEET_CLI_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/fleet/global_plan.h"

namespace CLI {
class App;
}

namespace nearprep {

// Prints "error: <msg>" to stderr and returns 1 (the exit status).
int FleetFail(const std::string& msg);

// A fleet plan's epoch is < 2^24; kEpochWhy is what --epoch's message adds.
constexpr uint64_t kMaxFleetEpoch = (uint64_t{1} << 24) - 1;
extern const char kEpochWhy[];

// The plan's flags of `fleet-plan` and `fleet-read`: --seed, --epoch (into
// params.epoch), --block-samples, --window, --global-batch, --plan-version,
// --slice-partitions, --slice-samples (v2; 0: G / T, fleet::ResolveSlice),
// --trainers, --rank: the Python FleetClient's keywords (block_samples=,
// rank=, ...). The older spellings --block and --trainer are still accepted,
// with a warning on stderr. Seeds and epochs are checked as typed
// (UnsignedValidator).
struct PlanFlags {
  fleet::PlanParams params;
  uint32_t trainers = 1;
  uint32_t rank = 0;

  void Register(CLI::App* app);
};

// The batch range [start, stop) of `plan` a command reads, checked against
// the epoch's num_batches: a start or stop past the epoch's end is refused
// (it would read nothing and exit 0). stop < 0: to the end. The messages
// name `start_flag` / `stop_flag`.
absl::Status CheckBatchRange(const fleet::GlobalPlan& plan, const std::string& start_flag,
                             uint64_t start, const std::string& stop_flag, int64_t stop);

// The whole file at `path` into *out; false when it cannot be read.
bool ReadWhole(const std::string& path, std::string* out);

// `flag`'s file, parsed by `parse`; the error names the flag and the file.
template <typename T, typename Parse>
absl::StatusOr<T> LoadFor(const std::string& flag, const std::string& path, Parse parse) {
  std::string text;
  if (!ReadWhole(path, &text)) {
    return absl::InvalidArgumentError(flag + ": " + path + ": cannot read");
  }
  absl::StatusOr<T> v = parse(text);
  if (!v.ok()) {
    return absl::InvalidArgumentError(flag + ": " + path + ": " +
                                      std::string(v.status().message()));
  }
  return v;
}

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_FLEET_FLEET_CLI_H_
