// `nearprep placement --manifest M --nodes a,b,c --replicas R --version V
// [--max-load F] [--previous OLD] --out FILE` writes a placement
// (server/fleet/placement.h): each partition on the R nodes with the highest
// rendezvous score (with --max-load F >= 1: among the nodes holding fewer
// than ceil(F * C * R / n)); with --previous, checks that V is greater and
// prints what each node gains and loses. `nearprep placement --manifest M --placement FILE --shards-for NODE`
// prints the shard names NODE must hold, one per line.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/commands/command.h"
#include "cli/fleet_cli.h"
#include "server/fleet/manifest.h"
#include "server/fleet/placement.h"

namespace nearprep {
namespace {

std::string Parts(const std::vector<uint32_t>& v) {
  std::string out;
  for (uint32_t p : v) out += (out.empty() ? "" : ",") + std::to_string(p);
  return "[" + out + "]";
}

class PlacementCommand final : public Command {
 public:
  const char* name() const override { return "placement"; }
  const char* help() const override {
    return "compute a versioned fleet placement (each partition on the R nodes with the "
           "highest rendezvous score), or list the shards a node must hold under one";
  }

  void AddOptions(CLI::App* app) override {
    app->add_option("--manifest", manifest_, "manifest file")->required();
    app->add_option("--nodes", nodes_, "node names NAME,NAME,... (compute)");
    app->add_option("--replicas", replicas_, "replicas R per partition (compute)");
    app->add_option("--version", version_,
                    "placement version (>= 1, greater than --previous's) (compute)");
    max_load_opt_ = app->add_option(
        "--max-load", max_load_,
        "bounded load: no node holds more than ceil(F * C * R / n) partitions where "
        "possible (F >= 1; default: pure rendezvous) (compute)");
    app->add_option("--previous", previous_,
                    "the placement in use: checks the version, prints what moves");
    app->add_option("--out", out_, "placement file to write (compute)");
    app->add_option("--shards-for", shards_for_,
                    "print the shard names NODE must hold, one per line");
    app->add_option("--placement", placement_, "placement file (--shards-for)");
  }

  int Run() override;

 private:
  std::string manifest_, nodes_, previous_, out_, shards_for_, placement_;
  uint32_t replicas_ = 0;
  uint64_t version_ = 0;
  double max_load_ = 0.0;
  CLI::Option* max_load_opt_ = nullptr;
};

int PlacementCommand::Run() {
  absl::StatusOr<fleet::Manifest> m =
      LoadFor<fleet::Manifest>("--manifest", manifest_, fleet::ParseManifest);
  if (!m.ok()) return FleetFail(std::string(m.status().message()));
  const bool bounded = max_load_opt_ != nullptr && max_load_opt_->count() > 0;
  const bool compute = !nodes_.empty() || !out_.empty() || replicas_ != 0 ||
                       version_ != 0 || !previous_.empty() || bounded;
  const bool shards = !shards_for_.empty() || !placement_.empty();
  if (compute == shards) {
    return FleetFail("give either --nodes --replicas --version --out [--previous] (compute a "
                "placement) or --shards-for NODE --placement FILE (list a node's shards)");
  }
  if (shards) {
    if (shards_for_.empty()) return FleetFail("--shards-for: required with --placement");
    if (placement_.empty()) return FleetFail("--placement: required with --shards-for");
    absl::StatusOr<fleet::Placement> p =
        LoadFor<fleet::Placement>("--placement", placement_, fleet::ParsePlacement);
    if (!p.ok()) return FleetFail(std::string(p.status().message()));
    if (p->manifest_hash != m->hash || p->num_partitions != m->num_partitions) {
      return FleetFail("--placement: " + placement_ + " is for manifest " + p->manifest_hash +
                  ", --manifest " + manifest_ + " is " + m->hash);
    }
    absl::StatusOr<std::vector<std::string>> names = fleet::ShardsFor(*p, *m, shards_for_);
    if (!names.ok()) return FleetFail("--shards-for: " + std::string(names.status().message()));
    std::string out;
    for (const std::string& n : *names) out += n + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  if (nodes_.empty()) return FleetFail("--nodes: required (NAME,NAME,...)");
  if (replicas_ == 0) return FleetFail("--replicas: required (R >= 1)");
  if (version_ == 0) return FleetFail("--version: required (>= 1, greater than --previous's)");
  if (out_.empty()) return FleetFail("--out: required");
  if (bounded && !(max_load_ >= 1.0)) {
    return FleetFail("--max-load: F = " + absl::StrCat(max_load_) +
                     " must be >= 1 (a node holds at most ceil(F * C * R / n) partitions)");
  }
  const std::vector<std::string> nodes = absl::StrSplit(nodes_, ',');
  if (replicas_ > nodes.size()) {
    return FleetFail("--replicas: R = " + std::to_string(replicas_) + " is more than the " +
                std::to_string(nodes.size()) + " nodes of --nodes");
  }
  absl::StatusOr<fleet::Placement> p = fleet::ComputePlacement(
      m->hash, m->num_partitions, nodes, replicas_, version_, bounded ? max_load_ : 0.0);
  if (!p.ok()) return FleetFail("--" + std::string(p.status().message()));
  std::string moves;
  if (bounded) {
    size_t most = 0;
    for (const auto& [name, parts] : p->nodes) most = std::max(most, parts.size());
    moves += "bounded load: cap " +
             std::to_string(fleet::PlacementCap(max_load_, p->num_partitions, p->replicas,
                                                p->nodes.size())) +
             " partitions per node (--max-load " + absl::StrCat(max_load_) +
             "), most held " + std::to_string(most) + "\n";
  }
  if (!previous_.empty()) {
    absl::StatusOr<fleet::Placement> prev =
        LoadFor<fleet::Placement>("--previous", previous_, fleet::ParsePlacement);
    if (!prev.ok()) return FleetFail(std::string(prev.status().message()));
    if (absl::Status st = fleet::CheckSuccessor(*prev, *p); !st.ok()) {
      return FleetFail("--version: " + std::string(st.message()) + " (--previous " +
                  previous_ + ")");
    }
    if (prev->manifest_hash != p->manifest_hash) {
      moves += "previous placement is for manifest " + prev->manifest_hash +
               ": every shard of the new manifest is to be placed\n";
    } else {
      uint64_t copies = 0;
      for (const fleet::PlacementMove& mv : fleet::DiffPlacements(*prev, *p)) {
        moves += "node " + mv.node + " gains " + Parts(mv.gains) + " loses " +
                 Parts(mv.losses) + "\n";
        copies += mv.gains.size();
      }
      moves += "partition copies to make: " + std::to_string(copies) + "\n";
    }
  }
  const std::string text = fleet::SerializePlacement(*p);
  {
    std::ofstream f(out_ + ".tmp", std::ios::binary | std::ios::trunc);
    f << text;
    if (!f.good()) return FleetFail("--out: " + out_ + ": cannot write");
  }
  if (std::rename((out_ + ".tmp").c_str(), out_.c_str()) != 0) {
    return FleetFail("--out: " + out_ + ": cannot rename into place");
  }
  std::printf("placement %s: version %llu, %zu nodes, %u replicas of %u partitions\nhash %s\n%s",
              out_.c_str(), static_cast<unsigned long long>(p->version), p->nodes.size(),
              p->replicas, p->num_partitions, p->hash.c_str(), moves.c_str());
  return 0;
}

}  // namespace

std::unique_ptr<Command> NewPlacementCommand() { return std::make_unique<PlacementCommand>(); }

}  // namespace nearprep
