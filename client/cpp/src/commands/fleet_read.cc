// `nearprep fleet-read --targets A,B,... --manifest M [plan flags]
// [--trainers T --trainer k] [--height --width --crop --flip --dtype]`: reads trainer k's slices of a
// fleet epoch with the C++ fleet client (client/cpp/fleet/fleet_client.h)
// and prints "EPOCH POSITION SAMPLE_ID SHA256-of-tensor|error:CODE" lines.
// The plan's flags are fleet-plan's (PlanFlags).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_split.h"
#include "client/cpp/fleet/fleet_cli.h"
#include "client/cpp/fleet/fleet_client.h"
#include "client/cpp/src/commands/command.h"
#include "client/cpp/src/request_flags.h"
#include "client/cpp/src/vocabulary.h"
#include "server/fleet/global_plan.h"
#include "server/fleet/manifest.h"

namespace nearprep {
namespace {

class FleetReadCommand final : public Command {
 public:
  const char* name() const override { return "fleet-read"; }
  const char* help() const override {
    return "read a trainer's slices of a fleet epoch (C++ fleet client); prints "
           "EPOCH POSITION SAMPLE_ID SHA256-of-tensor|error:CODE";
  }

  void AddOptions(CLI::App* app) override;
  int Run() override;

 private:
  std::string targets_, manifest_;
  PlanFlags plan_;  // --epoch: the epoch read
  uint64_t start_ = 0;
  int64_t stop_ = -1;
  int step_ms_ = 0;  // simulated trainer step after each batch
  int prefetch_ = 2;
  uint32_t response_batch_ = 0;
  int rpc_timeout_ms_ = 10000;
  std::string dataset_ = "ds";
  TlsFlags tls_;  // --tls-*, --token-file: the same for every node
  uint32_t height_ = 224, width_ = 224;
  std::string crop_ = "none", dtype_ = "float32";
  float flip_ = 0;
};

void FleetReadCommand::AddOptions(CLI::App* app) {
  app->add_option("--targets", targets_, "host:port,host:port,...")
      ->check(TargetValidator(/*list=*/true))
      ->required();
  tls_.Register(app);
  app->add_option("--dataset", dataset_)->capture_default_str();
  app->add_option("--manifest", manifest_, "manifest file")->required();
  plan_.Register(app);
  app->add_option("--start-batch", start_,
                  "first global batch (< the epoch's number of global batches)")
      ->check(UnsignedValidator(UINT64_MAX))
      ->capture_default_str();
  app->add_option("--stop-batch", stop_,
                  "global batch to stop before (<= the epoch's number of global batches; "
                  "default: the end of the epoch)")
      ->check(UnsignedValidator(INT64_MAX));
  app->add_option("--step-ms", step_ms_, "simulated trainer step: sleep this long after each batch")
      ->check(CLI::Range(0, 3600000))
      ->capture_default_str();
  app->add_option("--prefetch", prefetch_, "global batches fetched ahead (>= 1)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app->add_option("--rpc-timeout-ms", rpc_timeout_ms_,
                  "deadline of each request to a node (0: none); a node that does not "
                  "answer in time is failed over")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--response-batch", response_batch_,
                  "samples per response message (0: one message per node request)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app->add_option("--height", height_)->capture_default_str();
  app->add_option("--width", width_)->capture_default_str();
  app->add_option("--crop", crop_, EnumHelp(v1::CropMode_descriptor()))
      ->check(EnumValidator(v1::CropMode_descriptor()))
      ->capture_default_str();
  app->add_option("--flip-probability,--flip", flip_,
                  "left-right flip probability (--flip: older spelling, deprecated, "
                  "still accepted)")
      ->capture_default_str();
  app->add_option("--dtype", dtype_, EnumHelp(v1::DType_descriptor()))
      ->check(EnumValidator(v1::DType_descriptor()))
      ->capture_default_str();
}

int FleetReadCommand::Run() {
  const uint64_t epoch = plan_.params.epoch;
  std::ifstream f(manifest_, std::ios::binary);
  if (!f) return FleetFail(manifest_ + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  absl::StatusOr<fleet::Manifest> m = fleet::ParseManifest(ss.str());
  if (!m.ok()) return FleetFail(std::string(m.status().message()));
  {
    // The epoch's plan, to refuse positions past its end before any node
    // is contacted (they used to read nothing and exit 0).
    auto plan = fleet::GlobalPlan::Create(m->partition_start, plan_.params);
    if (!plan.ok()) return FleetFail(std::string(plan.status().message()));
    absl::Status range = CheckBatchRange(**plan, "--start-batch", start_, "--stop-batch", stop_);
    if (!range.ok()) return FleetFail(std::string(range.message()));
  }
  FleetClientOptions o;
  o.targets = absl::StrSplit(targets_, ',', absl::SkipEmpty());
  o.dataset = dataset_;
  o.manifest = *m;
  o.plan = plan_.params;
  o.trainers = plan_.trainers;
  o.rank = plan_.trainer;
  o.prefetch = prefetch_;
  o.response_batch = response_batch_;
  o.rpc_timeout = std::chrono::milliseconds(rpc_timeout_ms_);
  // TLS files and the bearer token ($NEARPREP_TOKEN_FILE / $NEARPREP_TOKEN
  // or --token-file), sent to every node alike.
  o.credentials = tls_.ToClientOptions("");
  o.request.mutable_transform()->set_height(height_);
  o.request.mutable_transform()->set_width(width_);
  o.request.mutable_transform()->set_flip_probability(flip_);
  // The same names as `nearprep stream` and the Python client (vocabulary.h).
  absl::StatusOr<int> crop = ParseEnumValue(v1::CropMode_descriptor(), "--crop", crop_);
  if (!crop.ok()) return FleetFail(std::string(crop.status().message()));
  o.request.mutable_transform()->set_crop(static_cast<v1::CropMode>(*crop));
  absl::StatusOr<int> dtype = ParseEnumValue(v1::DType_descriptor(), "--dtype", dtype_);
  if (!dtype.ok()) return FleetFail(std::string(dtype.status().message()));
  o.request.mutable_output()->set_dtype(static_cast<v1::DType>(*dtype));
  o.on_event = [](const std::string& e) { std::fprintf(stderr, "event: %s\n", e.c_str()); };
  absl::StatusOr<std::unique_ptr<FleetClient>> fc = FleetClient::Create(o);
  if (!fc.ok()) return FleetFail(std::string(fc.status().message()));
  const uint64_t end = stop_ >= 0 ? static_cast<uint64_t>(stop_) : (*fc)->NumBatches(epoch);
  for (uint64_t g = start_; g < end; ++g) {
    absl::StatusOr<FleetBatch> b = (*fc)->ReadBatch(epoch, g);
    if (!b.ok()) return FleetFail(b.status().ToString());  // "CODE: message"
    std::vector<std::pair<uint64_t, std::string>> lines;
    for (const FleetSample& s : b->samples) {
      lines.emplace_back(s.position,
                         std::to_string(s.sample_id) + " " + fleet::Sha256Hex(s.tensor));
    }
    for (const FleetSampleError& e : b->errors) {
      lines.emplace_back(e.position, std::to_string(e.sample_id) + " error:" + e.code);
    }
    std::sort(lines.begin(), lines.end());
    for (const auto& [p, text] : lines) {
      std::printf("%llu %llu %s\n", static_cast<unsigned long long>(epoch),
                  static_cast<unsigned long long>(p), text.c_str());
    }
    std::fflush(stdout);
    if (step_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms_));
  }
  const FleetClient::Stats st = (*fc)->stats();
  std::fprintf(stderr,
               "requests %llu failovers %llu duplicates_dropped %llu waits %llu "
               "kept_partial %llu retries %llu\n",
               static_cast<unsigned long long>(st.requests),
               static_cast<unsigned long long>(st.failovers),
               static_cast<unsigned long long>(st.duplicates_dropped),
               static_cast<unsigned long long>(st.waits),
               static_cast<unsigned long long>(st.kept_partial),
               static_cast<unsigned long long>(st.retries));
  return 0;
}

}  // namespace

std::unique_ptr<Command> NewFleetReadCommand() { return std::make_unique<FleetReadCommand>(); }

}  // namespace nearprep
