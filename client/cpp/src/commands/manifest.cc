// `nearprep manifest --root DIR --format tfrecord|tar [--partitions C]
// [--shard-pattern GLOB] [--out FILE]`: writes the dataset manifest
// (server/fleet/manifest.h) and prints its hash (the dataset version).
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "client/cpp/fleet/fleet_cli.h"
#include "client/cpp/src/commands/command.h"
#include "server/fleet/manifest.h"
#include "server/fleet/manifest_scan.h"

namespace nearprep {
namespace {

class ManifestCommand final : public Command {
 public:
  const char* name() const override { return "manifest"; }
  const char* help() const override {
    return "write a fleet manifest (partitions, checksums, hash) over record shards";
  }

  void AddOptions(CLI::App* app) override {
    app->add_option("--root", scan_.root, "folder of the shards")->required();
    app->add_option("--format", scan_.format, "tfrecord or tar")->capture_default_str();
    app->add_option("--partitions", scan_.partitions, "partitions C (capped by the shard count)")
        ->capture_default_str();
    app->add_option("--shard-pattern", scan_.shard_pattern, "which files are shards (fnmatch)")
        ->capture_default_str();
    app->add_option("--out", out_, "manifest file (default ROOT/MANIFEST)");
  }

  int Run() override;

 private:
  fleet::ScanOptions scan_;
  std::string out_;
};

int ManifestCommand::Run() {
  uint64_t refused = 0;
  fleet::ScanOptions o = scan_;
  o.refused = &refused;
  absl::StatusOr<fleet::Manifest> m = fleet::ScanManifest(o);
  if (!m.ok()) return FleetFail(std::string(m.status().message()));
  const std::string text = fleet::SerializeManifest(*m);
  const std::string out = out_.empty() ? scan_.root + "/MANIFEST" : out_;
  {
    std::ofstream f(out + ".tmp", std::ios::binary | std::ios::trunc);
    f << text;
    if (!f.good()) return FleetFail(out + ": cannot write");
  }
  if (std::rename((out + ".tmp").c_str(), out.c_str()) != 0) {
    return FleetFail(out + ": cannot rename into place");
  }
  if (m->num_partitions < o.partitions) {
    // A partition is whole shards: say so rather than cap quietly.
    std::fprintf(stderr,
                 "note: --partitions %u capped to %u: a partition holds at least "
                 "one whole shard and %s has %zu shard%s (pack into more shards "
                 "for more partitions: nearprep pack --shard-size)\n",
                 o.partitions, m->num_partitions, o.root.c_str(), m->shards.size(),
                 m->shards.size() == 1 ? "" : "s");
  }
  std::printf("manifest %s: %llu samples, %zu shards, %u partitions%s\nhash %s\n",
              out.c_str(), static_cast<unsigned long long>(m->num_samples),
              m->shards.size(), m->num_partitions,
              refused ? " (some shards or shard tails refused: see the log)" : "",
              m->hash.c_str());
  return 0;
}

}  // namespace

std::unique_ptr<Command> NewManifestCommand() { return std::make_unique<ManifestCommand>(); }

}  // namespace nearprep
