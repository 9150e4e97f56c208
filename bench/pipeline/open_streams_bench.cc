// What opening S streams of the same (dataset, seed, epoch) costs the
// daemon's pipeline: wall time of the S OpenStream calls and the resident
// memory they add (VmRSS before and after, the streams held open), on an
// in-memory dataset of N samples. A backend that writes zeros serves the
// few samples the streams' first batches ask for (batch 1, 1x1 uint8), so
// what is measured is the per-stream setup: the epoch order and the shard.
//
//   nearprep_bench_open_streams --samples 1000000 --streams 8 [--shards 1]
//
// Prints one line: samples, streams, open_ms, rss_added_mib.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "server/backend/backend.h"
#include "server/data/dataset.h"
#include "server/pipeline/pipeline.h"
#include "server/storage/mem_storage.h"

namespace nearprep {
namespace {

class ZeroBackend : public Backend {
 public:
  std::string name() const override { return "zero"; }
  void Process(const WorkContext& ctx, SampleWork* samples,
               size_t n) override {
    const size_t bytes = ctx.output.SampleBytes(ctx.spec);
    for (size_t i = 0; i < n; ++i) {
      std::memset(samples[i].out, 0, bytes);
      samples[i].status = absl::OkStatus();
    }
  }
};

double RssMib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::stod(line.substr(6)) / 1024.0;
    }
  }
  return 0;
}

int Run(int argc, char** argv) {
  CLI::App app{"open S streams of one (dataset, seed, epoch)"};
  uint64_t samples = 1000000;
  int streams = 8;
  uint32_t shards = 1;
  app.add_option("--samples", samples, "samples in the dataset");
  app.add_option("--streams", streams, "streams to open");
  app.add_option("--shards", shards,
                 "num_shards of each stream (stream i reads shard i % shards)");
  CLI11_PARSE(app, argc, argv);

  auto storage = std::make_shared<MemStorage>();
  for (uint64_t i = 0; i < samples; ++i) {
    char path[32];
    std::snprintf(path, sizeof path, "c0/s%08llu.jpg",
                  static_cast<unsigned long long>(i));
    storage->AddFile(path, std::string("x"));
  }
  DatasetConfig config;
  config.name = "big";
  auto ds = Dataset::Open(config, storage);
  if (!ds.ok()) {
    std::fprintf(stderr, "%s\n", ds.status().ToString().c_str());
    return 1;
  }
  PipelineOptions o;
  o.workers = 1;
  o.prefetch_depth = 1;
  Pipeline pipeline(o, std::make_shared<ZeroBackend>());

  StreamRequest r;
  r.context.source = std::make_shared<const SampleSource>(**ds);
  r.context.seed = 1234;
  r.context.epoch = 5;
  r.shuffle = true;
  r.batch_size = 1;
  r.context.spec.height = 1;
  r.context.spec.width = 1;
  r.context.output.dtype = DType::kUint8;
  r.num_shards = shards;

  const double rss0 = RssMib();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<BatchStream>> open;
  for (int i = 0; i < streams; ++i) {
    r.shard_index = static_cast<uint32_t>(i) % shards;
    auto s = pipeline.OpenStream(r);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
      return 1;
    }
    open.push_back(std::move(*s));
  }
  const double ms = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - t0)
                        .count();
  // Each stream's first batch, so every stream is set up and running.
  for (auto& s : open) {
    auto b = s->NextBlocking();
    if (!b.ok()) return 1;
  }
  const double rss1 = RssMib();
  std::printf("samples=%llu streams=%d shards=%u open_ms=%.1f "
              "rss_added_mib=%.1f\n",
              static_cast<unsigned long long>(samples), streams, shards, ms,
              rss1 - rss0);
  return 0;
}

}  // namespace
}  // namespace nearprep

int main(int argc, char** argv) { return nearprep::Run(argc, argv); }
