// `nearprep bench --dataset DIR [--threads N] [--batch-size B]`: the
// in-process pipeline benchmark (bench/pipeline's library, which every build
// has: it needs only the server's own libraries, not Google Benchmark).
#include <iostream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "bench/pipeline/pipeline_bench.h"
#include "cli/cli_common.h"
#include "cli/commands/command.h"

namespace nearprep {
namespace {

class BenchCommand final : public Command {
 public:
  const char* name() const override { return "bench"; }
  const char* help() const override { return "in-process pipeline throughput (no network)"; }

  void AddOptions(CLI::App* app) override {
    app->add_option("--dataset", options_.dataset_root, "image-folder dataset root")
        ->capture_default_str();
    app->add_option("--threads", options_.threads, "worker threads (0: one and all cores)");
    app->add_option("--batch-size", options_.batch_size, "batch size")->capture_default_str();
  }

  int Run() override {
    absl::Status st = RunPipelineBench(options_, std::cout);
    if (!st.ok()) return Fail(st);
    return 0;
  }

 private:
  PipelineBenchOptions options_ = [] {
    PipelineBenchOptions o;
    o.dataset_root = "../shared/datasets/imagenet-sample-200";
    o.threads = 0;
    o.batch_size = 32;
    return o;
  }();
};

}  // namespace

std::unique_ptr<Command> NewBenchCommand() { return std::make_unique<BenchCommand>(); }

}  // namespace nearprep
