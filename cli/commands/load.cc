// `nearprep load --target A[,B...] --dataset D --streams N [--duration S |
// --epochs E] [--verify] [--json FILE]`: the load test (load_runner.h).
#include <memory>

#include "CLI/CLI.hpp"
#include "cli/commands/command.h"
#include "cli/load_runner.h"

namespace nearprep {
namespace {

class LoadCommand final : public Command {
 public:
  const char* name() const override { return "load"; }
  const char* help() const override {
    return "load test: N concurrent streams, latency percentiles, fairness, "
           "data-stall report, --verify (exit 1 on errors)";
  }
  void AddOptions(CLI::App* app) override { flags_.Register(app); }
  int Run() override { return RunLoad(flags_); }

 private:
  LoadFlags flags_;
};

}  // namespace

std::unique_ptr<Command> NewLoadCommand() { return std::make_unique<LoadCommand>(); }

}  // namespace nearprep
