// `nearprep manifest --root DIR --format tfrecord|tar [--partitions C]
// [--shard-pattern GLOB] [--out FILE] [--digests]`: writes the dataset
// manifest (server/fleet/manifest.h) and prints its hash (the dataset
// version); --digests also writes OUT.digests, one SHA-256 per sample.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "cli/commands/command.h"
#include "cli/fleet_cli.h"
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
    app->add_flag("--digests", digests_,
                  "also write per-sample SHA-256 digests (OUT.digests beside the "
                  "manifest, named in it): daemons then check every sample read");
  }

  int Run() override;

 private:
  fleet::ScanOptions scan_;
  std::string out_;
  bool digests_ = false;
};

// Writes `bytes` to `path` through a temporary file renamed into place.
bool WriteWhole(const std::string& path, const std::string& bytes) {
  {
    std::ofstream f(path + ".tmp", std::ios::binary | std::ios::trunc);
    f << bytes;
    if (!f.good()) return false;
  }
  return std::rename((path + ".tmp").c_str(), path.c_str()) == 0;
}

int ManifestCommand::Run() {
  uint64_t refused = 0;
  fleet::ScanOptions o = scan_;
  o.refused = &refused;
  std::string digests;
  if (digests_) o.digests = &digests;
  absl::StatusOr<fleet::Manifest> m = fleet::ScanManifest(o);
  if (!m.ok()) return FleetFail(std::string(m.status().message()));
  const std::string out = out_.empty() ? scan_.root + "/MANIFEST" : out_;
  if (digests_) {
    const size_t slash = out.rfind('/');
    m->digests_file = (slash == std::string::npos ? out : out.substr(slash + 1)) + ".digests";
    const std::string file = fleet::SampleDigestsHeader(m->num_samples) + digests;
    m->digests_sha256 = fleet::Sha256Hex(file);
    m->hash = fleet::Sha256Hex(fleet::SerializeManifest(*m));
    if (!WriteWhole(out + ".digests", file)) return FleetFail(out + ".digests: cannot write");
  }
  const std::string text = fleet::SerializeManifest(*m);
  if (!WriteWhole(out, text)) return FleetFail(out + ": cannot write or rename into place");
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
