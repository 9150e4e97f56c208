// `nearprep info --target HOST:PORT`: the daemon's version, backend, limits,
// counters, decoded-image cache and datasets.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "cli/cli_common.h"
#include "cli/commands/command.h"
#include "cli/request_flags.h"
#include "common/version.h"
#include "nearprep/client.h"

namespace nearprep {
namespace {

class InfoCommand final : public Command {
 public:
  const char* name() const override { return "info"; }
  const char* help() const override { return "server info and datasets"; }

  void AddOptions(CLI::App* app) override {
    app->add_option("--target", target_, "daemon address host:port")
        ->check(TargetValidator(/*list=*/false))
        ->capture_default_str();
    tls_.Register(app);
  }

  int Run() override;

 private:
  std::string target_ = "localhost:7070";
  TlsFlags tls_;
};

int InfoCommand::Run() {
  const std::string& target = target_;
  Client client(tls_.ToClientOptions(target));
  absl::StatusOr<v1::ServerInfo> info = client.Info();
  if (!info.ok()) return Fail(info.status());
  const v1::Limits& l = info->limits();
  const v1::Counters& c = info->counters();
  std::printf("nearprepd %s at %s (this client: nearprep %s)\n",
              info->version().c_str(), target.c_str(), kVersion);
  std::printf("  backend      %s%s%s\n", info->backend().c_str(),
              info->backend_detail().empty() ? "" : "  (",
              info->backend_detail().empty()
                  ? ""
                  : (info->backend_detail() + ")").c_str());
  std::printf("  workers      %u\n", info->workers());
  std::printf("  uptime       %" PRIu64 " s\n", info->uptime_seconds());
  std::printf("  limits       batch <= %u, output pixels <= %" PRIu64
              ", decoded values < %" PRIu64 ", streams <= %u,\n"
              "               %" PRIu64 " MB per stream, prefetch %u\n",
              l.max_batch_size(), l.max_output_pixels(),
              l.max_decoded_pixels(), l.max_concurrent_streams(),
              l.per_stream_memory_bytes() >> 20, l.prefetch_depth());
  std::printf("  counters     streams %" PRIu64 " (%" PRIu64
              " active), batches %" PRIu64 ", samples %" PRIu64
              " ok / %" PRIu64 " failed, %.1f MB sent, %" PRIu64
              " rejected\n",
              c.streams_started(), c.streams_active(), c.batches_sent(),
              c.samples_ok(), c.samples_failed(), c.bytes_sent() / 1e6,
              c.requests_rejected());
  std::printf("               errors: decode %" PRIu64 ", limit %" PRIu64
              ", io %" PRIu64 "; backend fallbacks %" PRIu64 "\n",
              c.decode_errors(), c.limit_errors(), c.io_errors(),
              c.backend_fallbacks());
  // The decoded-image cache, per dataset a stream has read (none: off, an
  // fpga backend, or an older daemon).
  for (const v1::DecodedCacheInfo& d : info->decoded_cache()) {
    const uint64_t lookups = d.hits() + d.misses();
    std::printf("  decoded cache %s: hits %" PRIu64 ", misses %" PRIu64
                " (hit rate %.3f), admitted %" PRIu64 ", evicted %" PRIu64
                " (stale %" PRIu64 "),\n"
                "               %" PRIu64 " entries, %" PRIu64 " of %" PRIu64
                " bytes\n",
                d.dataset().c_str(), d.hits(), d.misses(),
                lookups ? static_cast<double>(d.hits()) / lookups : 0.0,
                d.admitted(), d.evicted(), d.stale(), d.entries(), d.bytes(),
                d.budget_bytes());
  }
  absl::StatusOr<std::vector<v1::DatasetInfo>> ds = client.ListDatasets();
  if (!ds.ok()) return Fail(ds.status());
  std::printf("datasets (%zu)\n", ds->size());
  for (const v1::DatasetInfo& d : *ds) {
    std::printf("  %-20s %-12s %8" PRIu64 " samples  %5u classes",
                d.name().c_str(), d.format().c_str(), d.num_samples(),
                d.num_classes());
    if (d.num_refused() > 0) {
      std::printf("  (%" PRIu64 " refused)", d.num_refused());
    }
    std::printf("\n");
    if (!d.manifest_hash().empty()) {
      // Fleet datasets: the manifest, what this node holds and, with a
      // placement, what it is assigned and still misses.
      std::printf("  %-20s manifest %s: holds %d of %u partitions", "",
                  d.manifest_hash().substr(0, 12).c_str(), d.partitions_held_size(),
                  d.num_partitions());
      if (d.placement_version() > 0) {
        const std::set<uint32_t> held(d.partitions_held().begin(), d.partitions_held().end());
        std::string missing;
        for (uint32_t p : d.partitions_assigned()) {
          if (!held.count(p)) absl::StrAppend(&missing, missing.empty() ? "" : ",", p);
        }
        std::printf("; placement version %" PRIu64 ": %d assigned, missing [%s]",
                    d.placement_version(), d.partitions_assigned_size(), missing.c_str());
      }
      std::printf("\n");
    }
    if (d.class_names_size() > 0) {
      std::string names;
      const int shown = std::min(d.class_names_size(), 6);
      for (int i = 0; i < shown; ++i) {
        absl::StrAppend(&names, i ? ", " : "", d.class_names(i));
      }
      if (shown < d.class_names_size()) absl::StrAppend(&names, ", ...");
      std::printf("  %-20s classes: %s\n", "", names.c_str());
    }
  }
  return 0;
}

}  // namespace

std::unique_ptr<Command> NewInfoCommand() { return std::make_unique<InfoCommand>(); }

}  // namespace nearprep
