// nearprep_bench_records: reading an epoch from disk with a cold page cache,
// for the same images stored as an image folder (global shuffle), as
// TFRecord shards with the global shuffle, and as TFRecord shards with the
// block shuffle. Before each run every file of the dataset is dropped from
// the page cache (posix_fadvise DONTNEED), so reads come from the device.
//
// Read stage alone: a stream's SampleSource over the epoch order, one thread
// (the daemon's read path: block reads for the block shuffle).
// Figures: MB/s and images/s of the read stage, and the read sizes the
// dataset issued (its own counters: reads, bytes, bytes per read, O_DIRECT
// reads and buffered fallbacks).
//
// End to end (--e2e): the same epoch, cold cache again, each sample read
// (SampleSource::Read: a view into the block buffer for the block
// shuffle, no copy) and then decoded and transformed by PreprocessJpeg
// (224x224 random-resized crop, flip, brightness, saturation: the README's
// TF_COMPAT pipeline), one thread: images/s of read + decode + transform.
//
//   nearprep_bench_records --folder DIR --tfrecord DIR [--repeat N] [--e2e]
//       [--open-blocks K --window W --block-samples B]
// (`nearprep pack --source DIR --out TFDIR` makes the TFRecord copy.)
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "server/data/block_shuffle.h"
#include "server/data/dataset.h"
#include "server/data/epoch_plan.h"
#include "server/data/sample_source.h"
#include "server/image/preprocess.h"

namespace {

using Clock = std::chrono::steady_clock;

void DropPageCache(const std::string& root) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

struct Row {
  std::string name;
  double seconds = 0;
  uint64_t images = 0, payload = 0, reads = 0, bytes = 0, direct = 0,
           fallbacks = 0;
};

nearprep::TransformSpec TrainSpec() {
  nearprep::TransformSpec t;
  t.crop = nearprep::CropMode::kRandomResized;
  t.flip_probability = 0.5f;
  t.brightness_max_delta = 32.0f / 255.0f;
  t.saturation_enabled = true;
  t.saturation_lower = 0.5f;
  t.saturation_upper = 1.5f;
  return t;
}

Row Run(const std::string& name, const std::string& root,
        const std::string& format, bool block, const nearprep::BlockShuffleParams& bp,
        uint64_t seed, bool e2e) {
  nearprep::DatasetConfig c;
  c.name = name;
  c.format = format;
  c.root = root;
  auto ds = nearprep::Dataset::Open(c);
  if (!ds.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), ds.status().ToString().c_str());
    std::exit(1);
  }
  nearprep::BlockShuffleParams p = bp;
  if (p.block_samples == 0) p.block_samples = (*ds)->block_samples();
  const auto order =
      block ? nearprep::BlockShuffledOrder((*ds)->size(), seed, 0, p)
            : nearprep::EpochOrder((*ds)->size(), seed, 0, true);
  DropPageCache(root);
  const auto& k = (*ds)->store().read_counters();
  const uint64_t r0 = k.reads, b0 = k.bytes, d0 = k.direct_reads,
                 f0 = k.buffered_fallbacks;
  std::vector<uint8_t> buf;
  const nearprep::TransformSpec spec = TrainSpec();
  const nearprep::OutputSpec output;
  std::vector<uint8_t> tensor(output.SampleBytes(spec));
  Row row;
  row.name = name;
  const auto t0 = Clock::now();
  nearprep::SampleSourceOptions reads;
  reads.block_samples = block ? p.block_samples : 0;
  const nearprep::SampleSource source(**ds, reads);
  for (uint64_t id : order) {
    absl::StatusOr<nearprep::SampleView> v = source.Read(id, &buf);
    if (!v.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), v.status().ToString().c_str());
      std::exit(1);
    }
    if (e2e) {
      nearprep::SampleParams params;
      nearprep::StageTimes times;
      const auto draw = [&](int h, int w) {
        return nearprep::DrawSampleParams(spec, seed, 0, id, h, w);
      };
      absl::Status s = nearprep::PreprocessJpeg(
          v->data, v->size, spec, output, nearprep::DecodeLimits{}, draw,
          &params, tensor.data(), &times);
      if (!s.ok()) {
        std::fprintf(stderr, "%s: sample %llu: %s\n", name.c_str(),
                     static_cast<unsigned long long>(id), s.ToString().c_str());
        std::exit(1);
      }
    }
    row.payload += v->size;
    ++row.images;
  }
  row.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  row.reads = k.reads - r0;
  row.bytes = k.bytes - b0;
  row.direct = k.direct_reads - d0;
  row.fallbacks = k.buffered_fallbacks - f0;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cold-cache read stage: image folder vs TFRecord (global / block shuffle)"};
  std::string folder, tfrecord;
  int repeat = 3;
  nearprep::BlockShuffleParams bp;
  bp.block_samples = 0;
  app.add_option("--folder", folder, "image-folder dataset")->required();
  app.add_option("--tfrecord", tfrecord, "the same images as TFRecord shards")->required();
  app.add_option("--repeat", repeat, "runs per configuration (median)")->capture_default_str();
  bool e2e = false;
  app.add_flag("--e2e", e2e, "also time read + decode + transform (one thread)");
  app.add_option("--block-samples", bp.block_samples, "0: the dataset's");
  app.add_option("--open-blocks", bp.open_blocks)->capture_default_str();
  app.add_option("--window", bp.window)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  struct Config {
    std::string name, root, format;
    bool block;
  };
  const std::vector<Config> configs = {
      {"image folder, global shuffle", folder, "image_folder", false},
      {"TFRecord, global shuffle", tfrecord, "tfrecord", false},
      {"TFRecord, block shuffle", tfrecord, "tfrecord", true}};
  const auto medians = [&](bool with_decode) {
    std::vector<Row> median;
    for (const auto& cfg : configs) {
      std::vector<Row> rows;
      for (int r = 0; r < repeat; ++r) {
        rows.push_back(Run(cfg.name, cfg.root, cfg.format, cfg.block, bp,
                           1 + r, with_decode));
      }
      std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
        return a.seconds < b.seconds;
      });
      median.push_back(rows[rows.size() / 2]);
    }
    return median;
  };
  const auto print = [](const char* title, const std::vector<Row>& median) {
    const double base = median[0].images / median[0].seconds;
    std::printf("| %s | images/s | MB/s | x image folder | reads | bytes/read | O_DIRECT | buffered fallback |\n", title);
    std::printf("|---|---|---|---|---|---|---|---|\n");
    for (const auto& r : median) {
      const double ips = r.images / r.seconds;
      std::printf("| %s | %.0f | %.1f | %.2f | %llu | %.0f | %llu | %llu |\n",
                  r.name.c_str(), ips, r.bytes / r.seconds / 1e6, ips / base,
                  static_cast<unsigned long long>(r.reads),
                  r.reads ? static_cast<double>(r.bytes) / r.reads : 0.0,
                  static_cast<unsigned long long>(r.direct),
                  static_cast<unsigned long long>(r.fallbacks));
    }
  };
  print("read stage, cold page cache", medians(false));
  if (e2e) {
    std::printf("\n");
    print("read + decode + transform (1 thread), cold page cache", medians(true));
  }
  return 0;
}
