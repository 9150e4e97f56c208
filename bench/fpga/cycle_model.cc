// nearprep_fpga_cycle_model: a cycle model of one nearprep_preprocess compute
// unit, from work measured in C simulation.
//
// Runs the C-simulation kernel (every dataflow process on its own thread,
// bounded FIFOs) over a directory of JPEGs in runs of 32 images, with a
// random-resized crop to OUT x OUT, flip, brightness and saturation, and
// reads back the work each process did (hls_sim::TakeWork): iterations of its
// pipelined loops and the number of times such a loop was entered. The model:
//  - every pipelined loop runs at II = 1 (one iteration per cycle) - the
//    target the sources are written for, not a synthesis report;
//  - each loop entry costs kFillDrain extra cycles (pipeline fill and drain);
//  - in DATAFLOW the processes overlap across consecutive images, so the
//    compute unit's cycles per image are those of its slowest process; the
//    FIFOs are assumed deep enough to absorb the rate variations within an
//    image (their depths are the STREAM depths in dataflow.h);
//  - DDR bandwidth is checked separately (bytes per image at the modelled
//    rate against the SmartSSD's DDR4 bank).
// Workloads (MODE): rrc - random-resized crops of 8-100% of the area (the
// training case; default); center - a centre crop of 87.5% of each side (the
// evaluation case); full - the whole image resized.
// Usage: nearprep_fpga_cycle_model [IMAGE_DIR] [OUT] [DTYPE 0..3] [MODE]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dataflow.h"
#include "decode_to_rgb.h"
#include "hls_sim.h"
#include "nearprep_kernel.h"
#include "nearprep_kernel_abi.h"

namespace {

namespace nf = nearprep_fpga;

constexpr double kClockHz = 250e6;  // fpga_kernels/Makefile KERNEL_MHZ
constexpr int kFillDrain = 20;      // cycles per pipelined-loop entry (assumed)
constexpr int kImagesPerRun = 32;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// The II of each function's PIPELINE pragmas in the kernel sources, and the
// functions it calls; a process's II is the largest over its body and its
// callees (transitively).
struct FnInfo {
  int ii = 0;
  std::set<std::string> calls;
};

std::map<std::string, FnInfo> ScanSources(const std::string& src_dir) {
  std::map<std::string, FnInfo> fns;
  const std::regex def(R"(^(?:inline\s+)?[A-Za-z_][\w:<>]*[\s\*&]+([A-Za-z_]\w*)\()");
  const std::regex pipe(R"(#pragma\s+HLS\s+PIPELINE\s+II\s*=\s*(\d+))");
  const std::regex call(R"(\b([A-Z]\w*)\s*\()");
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(src_dir, ec)) {
    if (e.path().extension() != ".cc") continue;
    std::ifstream f(e.path());
    std::string line, cur;
    while (std::getline(f, line)) {
      std::smatch m;
      if (cur.empty() && std::regex_search(line, m, def)) cur = m[1];
      if (cur.empty()) continue;
      if (std::regex_search(line, m, pipe)) {
        fns[cur].ii = std::max(fns[cur].ii, std::atoi(m[1].str().c_str()));
      }
      for (auto it = std::sregex_iterator(line.begin(), line.end(), call);
           it != std::sregex_iterator(); ++it) {
        if ((*it)[1] != cur) fns[cur].calls.insert((*it)[1]);
      }
      if (line.rfind("}", 0) == 0) cur.clear();
    }
  }
  return fns;
}

int ProcessIi(const std::map<std::string, FnInfo>& fns, const std::string& name,
              std::set<std::string>* seen) {
  if (!seen->insert(name).second) return 0;
  const auto it = fns.find(name);
  if (it == fns.end()) return 0;
  int ii = it->second.ii;
  for (const std::string& c : it->second.calls) ii = std::max(ii, ProcessIi(fns, c, seen));
  return ii;
}

}  // namespace

int main(int argc, char** argv) {
  const char* env = std::getenv("NEARPREP_SAMPLE_IMAGES_DIR");
  const std::string dir = argc > 1 ? argv[1]
                          : env != nullptr
                              ? env
                              : NEARPREP_SOURCE_DIR "/../shared/datasets/imagenet-sample-200";
  const int out_size = argc > 2 ? std::atoi(argv[2]) : 224;
  const int dtype = argc > 3 ? std::atoi(argv[3]) : 0;
  const std::string mode = argc > 4 ? argv[4] : "rrc";
  if (mode != "rrc" && mode != "center" && mode != "full") {
    std::fprintf(stderr, "MODE must be rrc, center or full\n");
    return 2;
  }
  const auto fns = ScanSources(NEARPREP_SOURCE_DIR "/fpga_kernels/src");
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::string ext = it->path().extension().string();
    if (it->is_regular_file() && (ext == ".JPEG" || ext == ".jpeg" || ext == ".jpg")) {
      files.push_back(it->path().string());
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "no JPEGs under %s\n", dir.c_str());
    return 1;
  }
  std::mt19937 rng(1);
  const uint64_t slot = static_cast<uint64_t>(out_size) * out_size * 3 * nf::ElementBytes(dtype);
  uint64_t ok = 0, refused = 0, jpeg_bytes = 0, pixels = 0, symbols = 0;
  hls_sim::TakeWork();  // reset
  for (size_t start = 0; start < files.size(); start += kImagesPerRun) {
    const size_t n = std::min<size_t>(kImagesPerRun, files.size() - start);
    std::vector<uint8_t> jpeg;
    std::vector<uint32_t> desc(n * nf::kDescWords, 0);
    for (size_t i = 0; i < n; ++i) {
      const std::vector<uint8_t> f = ReadFile(files[start + i]);
      jpeg.resize((jpeg.size() + 4095) / 4096 * 4096);  // 4 KiB aligned, as the host does
      uint32_t* d = &desc[i * nf::kDescWords];
      d[nf::kDescJpegOffsetLo] = static_cast<uint32_t>(jpeg.size());
      d[nf::kDescJpegSize] = static_cast<uint32_t>(f.size());
      jpeg.insert(jpeg.end(), f.begin(), f.end());
      jpeg_bytes += f.size();
      int h = 0, w = 0, c = 0;
      nf::PeekJpegSize(f.data(), static_cast<uint32_t>(f.size()), &h, &w, &c);
      // rrc: a random crop of 8% to 100% of the area (aspect kept simple);
      // center: 87.5% of each side; full: the whole image.
      const double frac = mode == "rrc"      ? std::sqrt(0.08 + 0.92 * std::uniform_real_distribution<>(0, 1)(rng))
                          : mode == "center" ? 0.875
                                             : 1.0;
      const int ch = std::max(1, static_cast<int>(h * frac)), cw = std::max(1, static_cast<int>(w * frac));
      d[nf::kDescCropH] = static_cast<uint32_t>(ch);
      d[nf::kDescCropW] = static_cast<uint32_t>(cw);
      d[nf::kDescCropY] = static_cast<uint32_t>(mode == "rrc" ? rng() % (h - ch + 1) : (h - ch) / 2);
      d[nf::kDescCropX] = static_cast<uint32_t>(mode == "rrc" ? rng() % (w - cw + 1) : (w - cw) / 2);
      d[nf::kDescFlags] = (rng() & 1 ? nf::kFlagFlip : 0) | nf::kFlagSaturation;
      d[nf::kDescBrightness] = Bits(0.1f);
      d[nf::kDescSaturation] = Bits(1.2f);
      d[nf::kDescOutOffsetLo] = static_cast<uint32_t>(i * slot);
    }
    std::vector<uint32_t> cfg(nf::kCfgWords, 0);
    cfg[nf::kCfgOutHeight] = static_cast<uint32_t>(out_size);
    cfg[nf::kCfgOutWidth] = static_cast<uint32_t>(out_size);
    cfg[nf::kCfgDType] = static_cast<uint32_t>(dtype);
    cfg[nf::kCfgFlags] = nf::kCfgClip;
    cfg[nf::kCfgStd0] = cfg[nf::kCfgStd1] = cfg[nf::kCfgStd2] = Bits(1.0f);
    cfg[nf::kCfgMaxValuesLo] = 1u << 29;
    cfg[nf::kCfgJpegBytesLo] = static_cast<uint32_t>(jpeg.size());
    jpeg.resize((jpeg.size() + 63) / 64 * 64);
    std::vector<uint8_t> out((n * slot + 63) / 64 * 64);
    cfg[nf::kCfgOutBytesLo] = static_cast<uint32_t>(n * slot);
    std::vector<uint32_t> status(n * nf::kStatusWords, nf::kStatusNotRun);
    uint8_t scratch[64];
    nearprep_preprocess(reinterpret_cast<const WideWord*>(jpeg.data()), desc.data(), cfg.data(),
                        reinterpret_cast<WideWord*>(out.data()), status.data(), scratch,
                        static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i) {
      const uint32_t* st = &status[i * nf::kStatusWords];
      if (st[nf::kStCode] != nf::kStatusOk) {
        ++refused;
        continue;
      }
      ++ok;
      pixels += static_cast<uint64_t>(st[nf::kStHeight]) * st[nf::kStWidth];
      symbols += st[nf::kStCyclesEntropy];
    }
  }
  const auto work = hls_sim::TakeWork();
  const double images = static_cast<double>(ok + refused);
  std::printf("nearprep_preprocess cycle model: %zu images from %s, %dx%d %s NHWC, %d per run, "
              "crops: %s\n",
              files.size(), dir.c_str(), out_size, out_size,
              dtype == 0 ? "float32" : dtype == 1 ? "float16" : dtype == 2 ? "bfloat16" : "uint8",
              kImagesPerRun, mode.c_str());
  std::printf("decoded OK: %llu, refused: %llu; mean %.0f pixels, %.0f Huffman loop iterations, "
              "%.0f JPEG bytes per image\n",
              static_cast<unsigned long long>(ok), static_cast<unsigned long long>(refused),
              ok ? 1.0 * pixels / ok : 0.0, ok ? 1.0 * symbols / ok : 0.0,
              images ? jpeg_bytes / images : 0.0);
  std::printf("%-16s %3s %14s %16s %16s\n", "process", "II", "iterations/img",
              "loop entries/img", "model cycles/img");
  double worst = 0, sum = 0;
  std::string worst_name;
  for (const auto& [name, w] : work) {
    std::set<std::string> seen;
    const int ii_found = ProcessIi(fns, name, &seen);
    if (ii_found == 0) {
      std::fprintf(stderr, "no PIPELINE pragma found for process %s under %s\n", name.c_str(),
                   NEARPREP_SOURCE_DIR "/fpga_kernels/src");
      return 1;
    }
    const double it = w.iterations / images, en = w.loop_entries / images;
    const double cyc = ii_found * it + kFillDrain * en;
    std::printf("%-16s %3d %14.0f %16.0f %16.0f\n", name.c_str(), ii_found, it, en, cyc);
    sum += cyc;
    if (cyc > worst) {
      worst = cyc;
      worst_name = name;
    }
  }
  const double rate = kClockHz / worst;
  std::printf("assumptions: each process at its PIPELINE II (column II), %d cycles fill/drain per loop entry, "
              "%.0f MHz, processes overlap across images (DATAFLOW)\n",
              kFillDrain, kClockHz / 1e6);
  std::printf("bottleneck: %s, %.0f cycles/image -> %.0f images/s per compute unit\n",
              worst_name.c_str(), worst, rate);
  std::printf("no overlap (sum of processes): %.0f cycles/image -> %.0f images/s\n", sum,
              kClockHz / sum);
  std::printf("DDR traffic at that rate: %.0f MB/s read (JPEG), %.0f MB/s written (tensors)\n",
              rate * jpeg_bytes / images / 1e6, rate * static_cast<double>(slot) / 1e6);
  return 0;
}
