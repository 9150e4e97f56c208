// See fleet_cli.h.
#include "client/cpp/fleet/fleet_cli.h"

#include <cstdio>
#include <fstream>
#include <algorithm>
#include <iostream>
#include <sstream>
#include <thread>
#include <chrono>

#include "CLI/CLI.hpp"
#include "absl/strings/str_split.h"
#include "client/cpp/fleet/fleet_client.h"
#include "client/cpp/src/request_flags.h"
#include "client/cpp/src/vocabulary.h"
#include "server/fleet/global_plan.h"
#include "server/fleet/manifest.h"
#include "server/fleet/manifest_scan.h"
#include "server/fleet/placement.h"

namespace nearprep {

struct FleetCommands {
  CLI::App* manifest = nullptr;
  fleet::ScanOptions scan;
  std::string manifest_out;

  CLI::App* plan = nullptr;
  std::string plan_manifest;
  fleet::PlanParams params;
  uint32_t trainers = 1;
  uint32_t trainer = 0;
  int64_t batch = -1;

  CLI::App* placement = nullptr;
  std::string pl_manifest, pl_nodes, pl_previous, pl_out, pl_shards_for, pl_placement;
  uint32_t pl_replicas = 0;
  uint64_t pl_version = 0;

  CLI::App* read = nullptr;
  std::string read_targets, read_dataset = "ds", read_manifest;
  fleet::PlanParams read_params;
  uint32_t read_trainers = 1, read_trainer = 0;
  uint64_t read_epoch = 0, read_start = 0;
  int64_t read_stop = -1;
  int read_step_ms = 0;  // simulated trainer step after each batch
  int read_prefetch = 2;
  uint32_t read_response_batch = 0;
  int read_rpc_timeout_ms = 10000;
  TlsFlags read_tls;  // --tls-*, --token-file: the same for every node
  uint32_t height = 224, width = 224;
  std::string crop = "none", dtype = "float32";
  float flip = 0;
};

namespace {

int Fail(const std::string& msg) {
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  return 1;
}

constexpr uint64_t kMaxFleetEpoch = (uint64_t{1} << 24) - 1;
const char kEpochWhy[] = " (a fleet plan's epoch is < 2^24)";

// The batch range [start, stop) of `plan` a command reads, checked against
// the epoch's num_batches: a start or stop past the epoch's end is refused
// (it would read nothing and exit 0). stop < 0: to the end.
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

int RunManifest(const FleetCommands& c) {
  uint64_t refused = 0;
  fleet::ScanOptions o = c.scan;
  o.refused = &refused;
  absl::StatusOr<fleet::Manifest> m = fleet::ScanManifest(o);
  if (!m.ok()) return Fail(std::string(m.status().message()));
  const std::string text = fleet::SerializeManifest(*m);
  const std::string out = c.manifest_out.empty() ? c.scan.root + "/MANIFEST" : c.manifest_out;
  {
    std::ofstream f(out + ".tmp", std::ios::binary | std::ios::trunc);
    f << text;
    if (!f.good()) return Fail(out + ": cannot write");
  }
  if (std::rename((out + ".tmp").c_str(), out.c_str()) != 0) {
    return Fail(out + ": cannot rename into place");
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

// The whole file at `path` into *out; false when it cannot be read.
bool ReadWhole(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return f.good() || f.eof();
}

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

std::string Parts(const std::vector<uint32_t>& v) {
  std::string out;
  for (uint32_t p : v) out += (out.empty() ? "" : ",") + std::to_string(p);
  return "[" + out + "]";
}

int RunPlacement(const FleetCommands& c) {
  absl::StatusOr<fleet::Manifest> m =
      LoadFor<fleet::Manifest>("--manifest", c.pl_manifest, fleet::ParseManifest);
  if (!m.ok()) return Fail(std::string(m.status().message()));
  const bool compute = !c.pl_nodes.empty() || !c.pl_out.empty() || c.pl_replicas != 0 ||
                       c.pl_version != 0 || !c.pl_previous.empty();
  const bool shards = !c.pl_shards_for.empty() || !c.pl_placement.empty();
  if (compute == shards) {
    return Fail("give either --nodes --replicas --version --out [--previous] (compute a "
                "placement) or --shards-for NODE --placement FILE (list a node's shards)");
  }
  if (shards) {
    if (c.pl_shards_for.empty()) return Fail("--shards-for: required with --placement");
    if (c.pl_placement.empty()) return Fail("--placement: required with --shards-for");
    absl::StatusOr<fleet::Placement> p =
        LoadFor<fleet::Placement>("--placement", c.pl_placement, fleet::ParsePlacement);
    if (!p.ok()) return Fail(std::string(p.status().message()));
    if (p->manifest_hash != m->hash || p->num_partitions != m->num_partitions) {
      return Fail("--placement: " + c.pl_placement + " is for manifest " + p->manifest_hash +
                  ", --manifest " + c.pl_manifest + " is " + m->hash);
    }
    absl::StatusOr<std::vector<std::string>> names = fleet::ShardsFor(*p, *m, c.pl_shards_for);
    if (!names.ok()) return Fail("--shards-for: " + std::string(names.status().message()));
    std::string out;
    for (const std::string& n : *names) out += n + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  if (c.pl_nodes.empty()) return Fail("--nodes: required (NAME,NAME,...)");
  if (c.pl_replicas == 0) return Fail("--replicas: required (R >= 1)");
  if (c.pl_version == 0) return Fail("--version: required (>= 1, greater than --previous's)");
  if (c.pl_out.empty()) return Fail("--out: required");
  const std::vector<std::string> nodes = absl::StrSplit(c.pl_nodes, ',');
  if (c.pl_replicas > nodes.size()) {
    return Fail("--replicas: R = " + std::to_string(c.pl_replicas) + " is more than the " +
                std::to_string(nodes.size()) + " nodes of --nodes");
  }
  absl::StatusOr<fleet::Placement> p = fleet::ComputePlacement(
      m->hash, m->num_partitions, nodes, c.pl_replicas, c.pl_version);
  if (!p.ok()) return Fail("--" + std::string(p.status().message()));
  std::string moves;
  if (!c.pl_previous.empty()) {
    absl::StatusOr<fleet::Placement> prev =
        LoadFor<fleet::Placement>("--previous", c.pl_previous, fleet::ParsePlacement);
    if (!prev.ok()) return Fail(std::string(prev.status().message()));
    if (absl::Status st = fleet::CheckSuccessor(*prev, *p); !st.ok()) {
      return Fail("--version: " + std::string(st.message()) + " (--previous " +
                  c.pl_previous + ")");
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
    std::ofstream f(c.pl_out + ".tmp", std::ios::binary | std::ios::trunc);
    f << text;
    if (!f.good()) return Fail("--out: " + c.pl_out + ": cannot write");
  }
  if (std::rename((c.pl_out + ".tmp").c_str(), c.pl_out.c_str()) != 0) {
    return Fail("--out: " + c.pl_out + ": cannot rename into place");
  }
  std::printf("placement %s: version %llu, %zu nodes, %u replicas of %u partitions\nhash %s\n%s",
              c.pl_out.c_str(), static_cast<unsigned long long>(p->version), p->nodes.size(),
              p->replicas, p->num_partitions, p->hash.c_str(), moves.c_str());
  return 0;
}

int RunPlan(const FleetCommands& c) {
  std::ifstream f(c.plan_manifest, std::ios::binary);
  if (!f) return Fail(c.plan_manifest + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  absl::StatusOr<fleet::Manifest> m = fleet::ParseManifest(ss.str());
  if (!m.ok()) return Fail(std::string(m.status().message()));
  absl::Status st = fleet::CheckTrainers(c.params.global_batch, c.trainers);
  if (!st.ok()) return Fail(std::string(st.message()));
  if (c.trainer >= c.trainers) return Fail("--trainer: must be < --trainers");
  auto plan = fleet::GlobalPlan::Create(m->partition_start, c.params);
  if (!plan.ok()) return Fail(std::string(plan.status().message()));
  if (c.batch >= 0) {
    absl::Status range = CheckBatchRange(**plan, "--batch", static_cast<uint64_t>(c.batch),
                                         "", -1);
    if (!range.ok()) return Fail(std::string(range.message()));
  }
  uint64_t a = 0, b = (*plan)->size();
  // A header naming the columns (a comment line: skip lines starting '#').
  std::string out = "# position sample_id partition  (seed " + std::to_string(c.params.seed) +
                    ", epoch " + std::to_string(c.params.epoch) + ", trainer " +
                    std::to_string(c.trainer) + " of " + std::to_string(c.trainers) + ")\n";
  const auto emit = [&](uint64_t lo, uint64_t hi) {
    for (uint64_t p = lo; p < hi; ++p) {
      const fleet::GlobalPlan::Entry e = (*plan)->At(p);
      out += std::to_string(p) + " " + std::to_string(e.sample_id) + " " +
             std::to_string(e.partition) + "\n";
    }
  };
  if (c.batch >= 0) {
    std::tie(a, b) = (*plan)->Slice(static_cast<uint64_t>(c.batch), c.trainer, c.trainers);
    emit(a, b);
  } else {
    for (uint64_t g = 0; g < (*plan)->num_batches(); ++g) {
      std::tie(a, b) = (*plan)->Slice(g, c.trainer, c.trainers);
      emit(a, b);
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int RunRead(const FleetCommands& c) {
  std::ifstream f(c.read_manifest, std::ios::binary);
  if (!f) return Fail(c.read_manifest + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  absl::StatusOr<fleet::Manifest> m = fleet::ParseManifest(ss.str());
  if (!m.ok()) return Fail(std::string(m.status().message()));
  {
    // The epoch's plan, to refuse positions past its end before any node
    // is contacted (they used to read nothing and exit 0).
    fleet::PlanParams p = c.read_params;
    p.epoch = c.read_epoch;
    auto plan = fleet::GlobalPlan::Create(m->partition_start, p);
    if (!plan.ok()) return Fail(std::string(plan.status().message()));
    absl::Status range =
        CheckBatchRange(**plan, "--start-batch", c.read_start, "--stop-batch", c.read_stop);
    if (!range.ok()) return Fail(std::string(range.message()));
  }
  FleetClientOptions o;
  o.targets = absl::StrSplit(c.read_targets, ',', absl::SkipEmpty());
  o.dataset = c.read_dataset;
  o.manifest = *m;
  o.plan = c.read_params;
  o.trainers = c.read_trainers;
  o.rank = c.read_trainer;
  o.prefetch = c.read_prefetch;
  o.response_batch = c.read_response_batch;
  o.rpc_timeout = std::chrono::milliseconds(c.read_rpc_timeout_ms);
  // TLS files and the bearer token ($NEARPREP_TOKEN_FILE / $NEARPREP_TOKEN
  // or --token-file), sent to every node alike.
  o.credentials = c.read_tls.ToClientOptions("");
  o.request.mutable_transform()->set_height(c.height);
  o.request.mutable_transform()->set_width(c.width);
  o.request.mutable_transform()->set_flip_probability(c.flip);
  // The same names as `nearprep stream` and the Python client (vocabulary.h).
  absl::StatusOr<int> crop = ParseEnumValue(v1::CropMode_descriptor(), "--crop", c.crop);
  if (!crop.ok()) return Fail(std::string(crop.status().message()));
  o.request.mutable_transform()->set_crop(static_cast<v1::CropMode>(*crop));
  absl::StatusOr<int> dtype = ParseEnumValue(v1::DType_descriptor(), "--dtype", c.dtype);
  if (!dtype.ok()) return Fail(std::string(dtype.status().message()));
  o.request.mutable_output()->set_dtype(static_cast<v1::DType>(*dtype));
  o.on_event = [](const std::string& e) { std::fprintf(stderr, "event: %s\n", e.c_str()); };
  absl::StatusOr<std::unique_ptr<FleetClient>> fc = FleetClient::Create(o);
  if (!fc.ok()) return Fail(std::string(fc.status().message()));
  const uint64_t end = c.read_stop >= 0 ? static_cast<uint64_t>(c.read_stop)
                                        : (*fc)->NumBatches(c.read_epoch);
  for (uint64_t g = c.read_start; g < end; ++g) {
    absl::StatusOr<FleetBatch> b = (*fc)->ReadBatch(c.read_epoch, g);
    if (!b.ok()) return Fail(b.status().ToString());  // "CODE: message"
    std::vector<std::pair<uint64_t, std::string>> lines;
    for (const FleetSample& s : b->samples) {
      lines.emplace_back(s.position, std::to_string(s.sample_id) + " " + fleet::Sha256Hex(s.tensor));
    }
    for (const FleetSampleError& e : b->errors) {
      lines.emplace_back(e.position, std::to_string(e.sample_id) + " error:" + e.code);
    }
    std::sort(lines.begin(), lines.end());
    for (const auto& [p, text] : lines) {
      std::printf("%llu %llu %s\n", static_cast<unsigned long long>(c.read_epoch),
                  static_cast<unsigned long long>(p), text.c_str());
    }
    std::fflush(stdout);
    if (c.read_step_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(c.read_step_ms));
    }
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

std::shared_ptr<FleetCommands> AddFleetCommands(CLI::App* app) {
  auto c = std::make_shared<FleetCommands>();
  c->manifest = app->add_subcommand(
      "manifest", "write a fleet manifest (partitions, checksums, hash) over record shards");
  c->manifest->add_option("--root", c->scan.root, "folder of the shards")->required();
  c->manifest->add_option("--format", c->scan.format, "tfrecord or tar")
      ->capture_default_str();
  c->manifest->add_option("--partitions", c->scan.partitions,
                          "partitions C (capped by the shard count)")
      ->capture_default_str();
  c->manifest->add_option("--shard-pattern", c->scan.shard_pattern,
                          "which files are shards (fnmatch)")
      ->capture_default_str();
  c->manifest->add_option("--out", c->manifest_out, "manifest file (default ROOT/MANIFEST)");

  c->plan = app->add_subcommand(
      "fleet-plan",
      "print positions of the fleet's global epoch plan: a '#' header line, then "
      "POSITION SAMPLE_ID PARTITION per line");
  c->plan->add_option("--manifest", c->plan_manifest, "manifest file")->required();
  c->plan->add_option("--seed", c->params.seed,
                      "seed of the epoch order (the trainers' and the daemons' common seed)")
      ->check(UnsignedValidator(UINT64_MAX))
      ->capture_default_str();
  c->plan->add_option("--epoch", c->params.epoch,
                      "epoch number: each epoch has its own order under one seed (< 2^24)")
      ->check(UnsignedValidator(kMaxFleetEpoch, kEpochWhy))
      ->capture_default_str();
  c->plan->add_option("--block", c->params.block_samples, "block B in samples")
      ->capture_default_str();
  c->plan->add_option("--window", c->params.window, "window W")->capture_default_str();
  c->plan->add_option("--global-batch", c->params.global_batch, "global batch G")
      ->capture_default_str();
  c->plan->add_option("--trainers", c->trainers, "trainers T")->capture_default_str();
  c->plan->add_option("--trainer", c->trainer, "trainer k")->capture_default_str();
  c->plan->add_option("--batch", c->batch, "one global batch (default: all)")
      ->check(UnsignedValidator(INT64_MAX));

  c->placement = app->add_subcommand(
      "placement",
      "compute a versioned fleet placement (each partition on the R nodes with the highest "
      "rendezvous score), or list the shards a node must hold under one");
  c->placement->add_option("--manifest", c->pl_manifest, "manifest file")->required();
  c->placement->add_option("--nodes", c->pl_nodes, "node names NAME,NAME,... (compute)");
  c->placement->add_option("--replicas", c->pl_replicas, "replicas R per partition (compute)");
  c->placement->add_option("--version", c->pl_version,
                           "placement version (>= 1, greater than --previous's) (compute)");
  c->placement->add_option("--previous", c->pl_previous,
                           "the placement in use: checks the version, prints what moves");
  c->placement->add_option("--out", c->pl_out, "placement file to write (compute)");
  c->placement->add_option("--shards-for", c->pl_shards_for,
                           "print the shard names NODE must hold, one per line");
  c->placement->add_option("--placement", c->pl_placement, "placement file (--shards-for)");

  c->read = app->add_subcommand(
      "fleet-read", "read a trainer's slices of a fleet epoch (C++ fleet client); prints "
                    "EPOCH POSITION SAMPLE_ID SHA256-of-tensor|error:CODE");
  c->read->add_option("--targets", c->read_targets, "host:port,host:port,...")
      ->check(TargetValidator(/*list=*/true))
      ->required();
  c->read_tls.Register(c->read);
  c->read->add_option("--dataset", c->read_dataset)->capture_default_str();
  c->read->add_option("--manifest", c->read_manifest, "manifest file")->required();
  c->read->add_option("--seed", c->read_params.seed,
                      "seed of the epoch order and the random draws")
      ->check(UnsignedValidator(UINT64_MAX))
      ->capture_default_str();
  c->read->add_option("--block", c->read_params.block_samples)->capture_default_str();
  c->read->add_option("--window", c->read_params.window)->capture_default_str();
  c->read->add_option("--global-batch", c->read_params.global_batch)->capture_default_str();
  c->read->add_option("--trainers", c->read_trainers)->capture_default_str();
  c->read->add_option("--trainer", c->read_trainer)->capture_default_str();
  c->read->add_option("--epoch", c->read_epoch,
                      "epoch number (its own order and draws; < 2^24)")
      ->check(UnsignedValidator(kMaxFleetEpoch, kEpochWhy))
      ->capture_default_str();
  c->read->add_option("--start-batch", c->read_start,
                      "first global batch (< the epoch's number of global batches)")
      ->check(UnsignedValidator(UINT64_MAX))
      ->capture_default_str();
  c->read->add_option("--stop-batch", c->read_stop,
                      "global batch to stop before (<= the epoch's number of global batches; "
                      "default: the end of the epoch)")
      ->check(UnsignedValidator(INT64_MAX));
  c->read->add_option("--step-ms", c->read_step_ms,
                      "simulated trainer step: sleep this long after each batch")
      ->check(CLI::Range(0, 3600000))
      ->capture_default_str();
  c->read->add_option("--prefetch", c->read_prefetch, "global batches fetched ahead (>= 1)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  c->read->add_option("--rpc-timeout-ms", c->read_rpc_timeout_ms,
                      "deadline of each request to a node (0: none); a node that does not "
                      "answer in time is failed over")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  c->read->add_option("--response-batch", c->read_response_batch,
                      "samples per response message (0: one message per node request)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  c->read->add_option("--height", c->height)->capture_default_str();
  c->read->add_option("--width", c->width)->capture_default_str();
  c->read->add_option("--crop", c->crop, EnumHelp(v1::CropMode_descriptor()))
      ->check(EnumValidator(v1::CropMode_descriptor()))
      ->capture_default_str();
  c->read->add_option("--flip-probability,--flip", c->flip,
                      "left-right flip probability (--flip: older spelling, deprecated, "
                      "still accepted)")
      ->capture_default_str();
  c->read->add_option("--dtype", c->dtype, EnumHelp(v1::DType_descriptor()))
      ->check(EnumValidator(v1::DType_descriptor()))
      ->capture_default_str();
  return c;
}

int RunFleetCommands(const FleetCommands& c) {
  if (c.manifest->parsed()) return RunManifest(c);
  if (c.plan->parsed()) return RunPlan(c);
  if (c.placement->parsed()) return RunPlacement(c);
  if (c.read->parsed()) return RunRead(c);
  return -1;
}

}  // namespace nearprep
