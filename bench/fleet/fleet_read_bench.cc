// The C++ FleetClient's receive cost, trainer side: one trainer reads whole
// epochs of a fleet dataset from running daemons and reports images/s and
// this process's CPU (user + system, every thread: the prefetch jobs that
// receive and copy the tensors) per global batch and per image. It touches
// one byte of each sample (no hashing: `nearprep fleet-read` hashes every
// tensor, which would hide the receive cost). The source uses only
// FleetSample::tensor's data()/size(), so it builds against older clients
// too (to compare receive paths).
//
//   nearprep_bench_fleet_read --targets A,B --manifest M [--dataset ds]
//       [--seed 1] [--block 8] [--window 16] [--global-batch 64]
//       [--epochs 2] [--height 224] [--width 224] [--dtype float32|uint8]
//       [--prefetch 2]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "client/cpp/fleet/fleet_client.h"
#include "server/fleet/manifest.h"

namespace {

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

int Usage(const char* why) {
  std::fprintf(stderr, "nearprep_bench_fleet_read: %s (see the source's header)\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string targets, manifest_path, dataset = "ds", dtype = "float32";
  uint64_t seed = 1, epochs = 2;
  uint32_t block = 8, window = 16, global_batch = 64, height = 224, width = 224;
  int prefetch = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--targets") targets = v;
    else if (k == "--manifest") manifest_path = v;
    else if (k == "--dataset") dataset = v;
    else if (k == "--dtype") dtype = v;
    else if (k == "--seed") seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--epochs") epochs = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--block") block = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--window") window = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--global-batch") global_batch = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--height") height = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--width") width = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--prefetch") prefetch = std::stoi(v);
    else return Usage(("unknown option " + k).c_str());
  }
  if (targets.empty() || manifest_path.empty()) return Usage("--targets and --manifest are needed");
  std::ifstream f(manifest_path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  absl::StatusOr<nearprep::fleet::Manifest> m = nearprep::fleet::ParseManifest(ss.str());
  if (!m.ok()) return Usage(std::string(m.status().message()).c_str());

  nearprep::FleetClientOptions o;
  o.targets = absl::StrSplit(targets, ',', absl::SkipEmpty());
  o.dataset = dataset;
  o.manifest = *m;
  o.plan.seed = seed;
  o.plan.block_samples = block;
  o.plan.window = window;
  o.plan.global_batch = global_batch;
  o.prefetch = prefetch;
  o.request.mutable_transform()->set_height(height);
  o.request.mutable_transform()->set_width(width);
  o.request.mutable_transform()->set_crop(nearprep::v1::CROP_MODE_RANDOM_RESIZED);
  o.request.mutable_transform()->set_flip_probability(0.5f);
  o.request.mutable_output()->set_dtype(dtype == "uint8" ? nearprep::v1::DTYPE_UINT8
                                                         : nearprep::v1::DTYPE_FLOAT32);
  auto fc = nearprep::FleetClient::Create(o);
  if (!fc.ok()) return Usage(std::string(fc.status().message()).c_str());

  uint64_t batches = 0, images = 0, bytes = 0, touched = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = CpuSeconds();
  for (uint64_t e = 0; e < epochs; ++e) {
    const uint64_t n = (*fc)->NumBatches(e);
    for (uint64_t g = 0; g < n; ++g) {
      absl::StatusOr<nearprep::FleetBatch> b = (*fc)->ReadBatch(e, g);
      if (!b.ok()) {
        std::fprintf(stderr, "epoch %llu batch %llu: %s\n", static_cast<unsigned long long>(e),
                     static_cast<unsigned long long>(g), b.status().ToString().c_str());
        return 1;
      }
      ++batches;
      for (const nearprep::FleetSample& s : b->samples) {
        ++images;
        bytes += s.tensor.size();
        if (!s.tensor.empty()) touched += static_cast<unsigned char>(s.tensor.data()[0]);
      }
    }
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = CpuSeconds() - c0;
  std::printf(
      "batches %llu images %llu MiB %.1f wall_s %.3f images_per_s %.1f cpu_s %.3f "
      "cpu_ms_per_batch %.3f cpu_us_per_image %.1f (checksum %llu)\n",
      static_cast<unsigned long long>(batches), static_cast<unsigned long long>(images),
      static_cast<double>(bytes) / (1 << 20), wall, static_cast<double>(images) / wall, cpu,
      batches ? cpu * 1e3 / static_cast<double>(batches) : 0.0,
      images ? cpu * 1e6 / static_cast<double>(images) : 0.0,
      static_cast<unsigned long long>(touched));
  return 0;
}
