// `nearprep fleet-read --targets A,B,...|--targets-dns NAME:PORT|--targets-file PATH
// --manifest M [plan flags]
// [--trainers T --rank k] [transform and output flags]`: reads trainer k's slices of a
// fleet epoch with the C++ fleet client (client/cpp/fleet/fleet_client.h)
// and prints "EPOCH POSITION SAMPLE_ID SHA256-of-tensor|error:CODE" lines.
// The plan's flags are fleet-plan's (PlanFlags); what each sample becomes
// (--dataset, transform, output, TLS) is RequestFlags', with `nearprep
// stream`'s names.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "cli/commands/command.h"
#include "cli/fleet_cli.h"
#include "cli/request_flags.h"
#include "client/cpp/fleet/fleet_client.h"
#include "client/cpp/fleet/membership.h"
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
  // Membership (client/cpp/fleet/membership.h): instead of --targets.
  std::string targets_dns_, targets_file_, dns_server_;
  int membership_interval_ms_ = 0;
  PlanFlags plan_;  // --epoch: the epoch read
  uint64_t start_ = 0;
  int64_t stop_ = -1;
  int step_ms_ = 0;  // simulated trainer step after each batch
  int prefetch_ = 2;
  uint32_t response_batch_ = 0;
  int rpc_timeout_ms_ = 10000;
  int probe_interval_ms_ = 500;
  double hedge_ = FleetClientOptions().hedge, hedge_min_s_ = 0.05, verify_fraction_ = 0;
  int hedge_samples_ = 4;
  std::string replica_routing_ = "first";
  RequestFlags request_;  // --dataset, transform, output, --tls-*: the same for every node
};

void FleetReadCommand::AddOptions(CLI::App* app) {
  CLI::Option* targets = app->add_option("--targets", targets_, "host:port,host:port,...")
                             ->check(TargetValidator(/*list=*/true));
  CLI::Option* dns =
      app->add_option("--targets-dns", targets_dns_,
                      "the nodes: every A/AAAA address of NAME (a Kubernetes headless "
                      "Service), port PORT; resolved again every --membership-interval-ms")
          ->type_name("NAME:PORT");
  CLI::Option* file = app->add_option("--targets-file", targets_file_,
                                      "the nodes: one host:port per line (# comments), read "
                                      "again every --membership-interval-ms")
                          ->type_name("PATH");
  targets->excludes(dns)->excludes(file);
  dns->excludes(file);
  app->add_option("--membership-interval-ms", membership_interval_ms_,
                  "how often --targets-dns is resolved / --targets-file read again "
                  "(0: 30000 for DNS, 1000 for a file); changes apply between batches")
      ->check(CLI::Range(0, 86400000))
      ->capture_default_str();
  app->add_option("--dns-server", dns_server_,
                  "--targets-dns: ask this IPv4:PORT nameserver instead of /etc/resolv.conf's "
                  "(a test hook)")
      ->needs(dns);
  request_.dataset = "ds";
  request_.RegisterSampleFlags(app);
  app->get_option("--dataset")->required(false)->capture_default_str();
  // The fleet client checks each answer's tensor size (no decompression)
  // and prints no per-sample parameters.
  for (const char* flag : {"--compression", "--compression-level", "--include-params"}) {
    app->remove_option(app->get_option(flag));
  }
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
  app->add_option("--probe-interval-ms", probe_interval_ms_,
                  "how often a dead node is probed again (ListDatasets)")
      ->check(CLI::Range(10, 3600000))
      ->capture_default_str();
  // Hedged requests and verification: FleetClientOptions' (fleet_client.h),
  // the Python FleetClient's hedge=, hedge_min=, hedge_samples=,
  // verify_fraction= (docs/protocol.md).
  app->add_option("--hedge", hedge_,
                  "hedged requests: 0 (off) or a latency percentile in (0, 1); a node "
                  "request slower than that percentile of the last 64 requests of its size "
                  "class (all nodes) is also sent, split, to the other replicas, the first "
                  "answer wins")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app->add_option("--hedge-min", hedge_min_s_,
                  "seconds: a request is never hedged sooner than this")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app->add_option("--hedge-samples", hedge_samples_,
                  "latencies a request size class needs before its requests are hedged "
                  "(1-64)")
      ->check(CLI::Range(1, kFleetHedgeWindow))
      ->capture_default_str();
  app->add_option("--verify-fraction", verify_fraction_,
                  "share of positions (in [0, 1]) also fetched from a second replica and "
                  "compared; a mismatch is settled by a third, the minority node marked dead")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app->add_option("--replica-routing", replica_routing_,
                  "which live holder serves a partition: first (the highest rendezvous "
                  "score) or spread (rotated by global batch over the live holders, so "
                  "every replica serves; the data is the same)")
      ->capture_default_str();
  app->add_option("--response-batch", response_batch_,
                  "samples per response message (0: one message per node request)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
}

int FleetReadCommand::Run() {
  if (targets_.empty() && targets_dns_.empty() && targets_file_.empty()) {
    // A flag error like any missing required flag (exit 2), before anything
    // is read: one of the three must say where the nodes are.
    std::fprintf(stderr, "error: give the nodes: --targets, --targets-dns or --targets-file\n");
    return 2;
  }
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
    auto plan = fleet::GlobalPlan::Create(m->partition_start,
                                          fleet::ResolveSlice(plan_.params, plan_.trainers));
    if (!plan.ok()) return FleetFail(std::string(plan.status().message()));
    absl::Status range = CheckBatchRange(**plan, "--start-batch", start_, "--stop-batch", stop_);
    if (!range.ok()) return FleetFail(std::string(range.message()));
  }
  // What each sample becomes, with `nearprep stream`'s names and checks; the
  // fleet client fills in the dataset, ids, batch size, seed, epoch and
  // manifest hash of each node request.
  absl::StatusOr<v1::StreamBatchesRequest> req = request_.ToRequest();
  if (!req.ok()) return FleetFail(std::string(req.status().message()));
  FleetClientOptions o;
  if (!targets_dns_.empty() || !targets_file_.empty()) {
    MembershipOptions mo;
    mo.file = targets_file_;
    mo.dns_server = dns_server_;
    mo.interval = std::chrono::milliseconds(membership_interval_ms_);
    if (!targets_dns_.empty()) {
      const size_t colon = targets_dns_.rfind(':');
      uint32_t port = 0;
      if (colon == std::string::npos || colon == 0 ||
          !absl::SimpleAtoi(targets_dns_.substr(colon + 1), &port) || port == 0 ||
          port > 65535) {
        return FleetFail("--targets-dns: expected NAME:PORT, got '" + targets_dns_ + "'");
      }
      mo.dns_name = targets_dns_.substr(0, colon);
      mo.dns_port = static_cast<uint16_t>(port);
    }
    mo.on_event = [](const std::string& e) { std::fprintf(stderr, "event: %s\n", e.c_str()); };
    absl::StatusOr<std::unique_ptr<Membership>> ms = Membership::Create(mo);
    if (!ms.ok()) {
      return FleetFail(std::string(targets_dns_.empty() ? "--targets-file: " : "--targets-dns: ") +
                       std::string(ms.status().message()));
    }
    o.membership = std::move(*ms);
  } else {
    o.targets = absl::StrSplit(targets_, ',', absl::SkipEmpty());
  }
  o.dataset = request_.dataset;
  o.manifest = *m;
  o.plan = fleet::ResolveSlice(plan_.params, plan_.trainers);  // v2: L = 0 is G / T
  o.trainers = plan_.trainers;
  o.rank = plan_.rank;
  o.prefetch = prefetch_;
  o.response_batch = response_batch_;
  o.rpc_timeout = std::chrono::milliseconds(rpc_timeout_ms_);
  o.probe_interval = std::chrono::milliseconds(probe_interval_ms_);
  o.hedge = hedge_;
  // (CLI::Range lets NaN through; the client refuses a NaN --hedge or
  // --verify-fraction, naming it.)
  if (!(hedge_min_s_ >= 0 && hedge_min_s_ <= 3600)) {
    return FleetFail("--hedge-min: must be a number of seconds in [0, 3600]");
  }
  o.hedge_min = std::chrono::milliseconds(std::llround(hedge_min_s_ * 1000));
  o.hedge_samples = hedge_samples_;
  o.verify_fraction = verify_fraction_;
  absl::StatusOr<FleetReplicaRouting> routing = ParseFleetReplicaRouting(replica_routing_);
  if (!routing.ok()) {
    return FleetFail("--replica-routing: must be first or spread, got '" + replica_routing_ +
                     "'");
  }
  o.replica_routing = *routing;
  // TLS files and the bearer token ($NEARPREP_TOKEN_FILE / $NEARPREP_TOKEN
  // or --token-file), sent to every node alike.
  o.credentials = request_.tls.ToClientOptions("");
  *o.request.mutable_transform() = req->transform();
  *o.request.mutable_output() = req->output();
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
               "kept_partial %llu retries %llu hedges %llu hedge_wins %llu verified %llu "
               "verify_mismatches %llu verify_unresolved %llu\n",
               static_cast<unsigned long long>(st.requests),
               static_cast<unsigned long long>(st.failovers),
               static_cast<unsigned long long>(st.duplicates_dropped),
               static_cast<unsigned long long>(st.waits),
               static_cast<unsigned long long>(st.kept_partial),
               static_cast<unsigned long long>(st.retries),
               static_cast<unsigned long long>(st.hedges),
               static_cast<unsigned long long>(st.hedge_wins),
               static_cast<unsigned long long>(st.verified),
               static_cast<unsigned long long>(st.verify_mismatches),
               static_cast<unsigned long long>(st.verify_unresolved));
  return 0;
}

}  // namespace

std::unique_ptr<Command> NewFleetReadCommand() { return std::make_unique<FleetReadCommand>(); }

}  // namespace nearprep
