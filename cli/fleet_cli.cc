// See fleet_cli.h.
#include "cli/fleet_cli.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "CLI/CLI.hpp"
#include "cli/request_flags.h"

namespace nearprep {

const char kEpochWhy[] = " (a fleet plan's epoch is < 2^24)";

int FleetFail(const std::string& msg) {
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  return 1;
}

namespace {

// `old_name`, the older spelling of `new_name`: bound to the same value,
// marked deprecated in --help, and a warning on stderr when given.
template <typename T>
void AddDeprecatedAlias(CLI::App* app, const std::string& old_name,
                        const std::string& new_name, T* value) {
  app->add_option(old_name, *value,
                  "older spelling of " + new_name + ", deprecated, still accepted")
      ->each([old_name, new_name](const std::string&) {
        std::fprintf(stderr, "warning: %s is deprecated (still accepted): use %s\n",
                     old_name.c_str(), new_name.c_str());
      });
}

}  // namespace

void PlanFlags::Register(CLI::App* app) {
  app->add_option("--seed", params.seed,
                  "seed of the epoch order and the random draws (the trainers' and the "
                  "daemons' common seed)")
      ->check(UnsignedValidator(UINT64_MAX))
      ->capture_default_str();
  app->add_option("--epoch", params.epoch,
                  "epoch number: each epoch has its own order and draws under one seed "
                  "(< 2^24)")
      ->check(UnsignedValidator(kMaxFleetEpoch, kEpochWhy))
      ->capture_default_str();
  app->add_option("--block-samples", params.block_samples,
                  "block B in samples (Python: block_samples=)")
      ->capture_default_str();
  AddDeprecatedAlias(app, "--block", "--block-samples", &params.block_samples);
  app->add_option("--window", params.window, "window W")->capture_default_str();
  app->add_option("--global-batch", params.global_batch, "global batch G")
      ->capture_default_str();
  app->add_option("--plan-version", params.version,
                  "plan algorithm: 1 (nearprep-fleet-plan/1: partitions interleaved position "
                  "by position), 2 (nearprep-fleet-plan/2: at most K partitions per slice) or 3 "
                  "(nearprep-fleet-plan/3: as 2, no per-round order of all partitions; for "
                  "hundreds of partitions and more)")
      ->check(CLI::Range(1, 3))
      ->capture_default_str();
  app->add_option("--slice-partitions", params.slice_partitions,
                  "plan v2/v3: K, the most partitions in an aligned slice of L positions "
                  "(K divides L)")
      ->capture_default_str();
  app->add_option("--slice-samples", params.slice_samples,
                  "plan v2/v3: L, the slice the K bound is for (divides G; 0: G / --trainers)")
      ->capture_default_str();
  app->add_option("--trainers", trainers, "trainers T")->capture_default_str();
  app->add_option("--rank", rank, "this trainer's index k in [0, T) (Python: rank=)")
      ->capture_default_str();
  AddDeprecatedAlias(app, "--trainer", "--rank", &rank);
}

absl::Status CheckBatchRange(const fleet::GlobalPlan& plan, const std::string& start_flag,
                             uint64_t start, const std::string& stop_flag, int64_t stop) {
  const uint64_t nb = plan.num_batches();
  const std::string of = " (epoch " + std::to_string(plan.params().epoch) + " has " +
                         std::to_string(nb) + " global batches of G = " +
                         std::to_string(plan.params().global_batch) + ")";
  if (start >= nb) {
    return absl::OutOfRangeError(start_flag + ": must be in [0, " + std::to_string(nb) + ")" +
                                 of + ", got " + std::to_string(start));
  }
  if (stop >= 0 && (static_cast<uint64_t>(stop) <= start || static_cast<uint64_t>(stop) > nb)) {
    return absl::OutOfRangeError(stop_flag + ": must be in [" + std::to_string(start + 1) +
                                 ", " + std::to_string(nb) + "]" + of + ", got " +
                                 std::to_string(stop));
  }
  return absl::OkStatus();
}

bool ReadWhole(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return f.good() || f.eof();
}

}  // namespace nearprep
