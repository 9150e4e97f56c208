// `nearprep fleet-plan --manifest FILE --seed S --epoch E --block-samples B
// --window W --global-batch G [--trainers T --rank k] [--batch g]`:
// prints "POSITION SAMPLE_ID PARTITION" lines of the global plan
// (server/fleet/global_plan.h): the whole epoch, one global batch, or
// trainer k's slice of it. tests/python/test_fleet_plan.py compares the
// Python plan with it.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>

#include "CLI/CLI.hpp"
#include "cli/commands/command.h"
#include "cli/fleet_cli.h"
#include "cli/request_flags.h"
#include "server/fleet/global_plan.h"
#include "server/fleet/manifest.h"

namespace nearprep {
namespace {

class FleetPlanCommand final : public Command {
 public:
  const char* name() const override { return "fleet-plan"; }
  const char* help() const override {
    return "print positions of the fleet's global epoch plan: a '#' header line, then "
           "POSITION SAMPLE_ID PARTITION per line";
  }

  void AddOptions(CLI::App* app) override {
    app->add_option("--manifest", manifest_, "manifest file")->required();
    plan_.Register(app);
    app->add_option("--batch", batch_, "one global batch (default: all)")
        ->check(UnsignedValidator(INT64_MAX));
  }

  int Run() override;

 private:
  std::string manifest_;
  PlanFlags plan_;
  int64_t batch_ = -1;
};

int FleetPlanCommand::Run() {
  const fleet::PlanParams params = fleet::ResolveSlice(plan_.params, plan_.trainers);
  const uint32_t trainers = plan_.trainers;
  const uint32_t trainer = plan_.rank;
  std::ifstream f(manifest_, std::ios::binary);
  if (!f) return FleetFail(manifest_ + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  absl::StatusOr<fleet::Manifest> m = fleet::ParseManifest(ss.str());
  if (!m.ok()) return FleetFail(std::string(m.status().message()));
  absl::Status st = fleet::CheckTrainers(params.global_batch, trainers);
  if (!st.ok()) return FleetFail(std::string(st.message()));
  if (trainer >= trainers) return FleetFail("--rank: must be < --trainers");
  auto plan = fleet::GlobalPlan::Create(m->partition_start, params);
  if (!plan.ok()) return FleetFail(std::string(plan.status().message()));
  if (batch_ >= 0) {
    absl::Status range = CheckBatchRange(**plan, "--batch", static_cast<uint64_t>(batch_),
                                         "", -1);
    if (!range.ok()) return FleetFail(std::string(range.message()));
  }
  uint64_t a = 0, b = (*plan)->size();
  // A header naming the columns (a comment line: skip lines starting '#').
  std::string out = "# position sample_id partition  (seed " + std::to_string(params.seed) +
                    ", epoch " + std::to_string(params.epoch) + ", trainer " +
                    std::to_string(trainer) + " of " + std::to_string(trainers) + ", " +
                    fleet::PlanAlgorithm(params) +
                    (params.version != 1
                         ? ", K " + std::to_string(params.slice_partitions) + ", L " +
                               std::to_string(params.slice_samples)
                         : std::string()) +
                    ")\n";
  const auto emit = [&](uint64_t lo, uint64_t hi) {
    for (uint64_t p = lo; p < hi; ++p) {
      const fleet::GlobalPlan::Entry e = (*plan)->At(p);
      out += std::to_string(p) + " " + std::to_string(e.sample_id) + " " +
             std::to_string(e.partition) + "\n";
    }
  };
  if (batch_ >= 0) {
    std::tie(a, b) = (*plan)->Slice(static_cast<uint64_t>(batch_), trainer, trainers);
    emit(a, b);
  } else {
    for (uint64_t g = 0; g < (*plan)->num_batches(); ++g) {
      std::tie(a, b) = (*plan)->Slice(g, trainer, trainers);
      emit(a, b);
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

std::unique_ptr<Command> NewFleetPlanCommand() { return std::make_unique<FleetPlanCommand>(); }

}  // namespace nearprep
