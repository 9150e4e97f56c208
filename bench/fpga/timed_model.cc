// nearprep_fpga_timed_model: the timed C simulation of one
// nearprep_preprocess compute unit (issue 24), replacing the aggregate cycle
// model's "slowest process at II 1" arithmetic.
//
// Runs the C-simulation kernel (every dataflow process on its own thread,
// bounded FIFOs) over a directory of JPEGs in runs of 32 images with timing
// on (hls_sim.h "Timed C simulation"): each process advances its own clock
// by the II and pipeline depth of each loop it runs, from the reviewed table
// fpga_kernels/host/loop_timing.cc (two cases: optimistic and expected);
// FIFO tokens carry their availability time and FIFOs their declared depths
// (a full FIFO stalls the writer); MCU-row blocks carry their release time;
// DDR read bursts pay a latency (table entry DDR.read_latency, or
// --ddr-latency=OPT,EXP); each run pays the network's fill and drain;
// header parsing, Huffman table building and tap computation are counted.
// A run's cycles are the latest end of any process; images/s per compute
// unit = images / sum of run cycles at the Makefile's KERNEL_MHZ (225 MHz).
//
// Output per crop mode: images/s (optimistic / expected), the bottleneck
// (the process busy the most cycles), and per process its busy cycles and
// the cycles it stalled on input (empty FIFO / no block) and output (full
// FIFO) per image. Not a synthesis result: nothing has been synthesised.
//
// Usage: nearprep_fpga_timed_model [IMAGE_DIR] [OUT] [DTYPE 0..3] [MODE|all]
//        [--ddr-latency=OPT,EXP] [--set=ID=OPT,EXP ...]
// --set overrides one table entry's II (or event cycles): a what-if.
// MODE: rrc (random-resized crops, 8-100% of the area), center (87.5% of
// each side), full (whole image); all (default) runs the three.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "dataflow.h"
#include "decode_to_rgb.h"
#include "hls_sim.h"
#include "nearprep_kernel.h"
#include "nearprep_kernel_abi.h"

namespace {

namespace nf = nearprep_fpga;

// The kernel clock: KERNEL_MHZ of fpga_kernels/Makefile (the one place it
// is set; v++ --kernel_frequency).
double ReadKernelClockHz() {
  std::ifstream f(NEARPREP_SOURCE_DIR "/fpga_kernels/Makefile");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("KERNEL_MHZ", 0) == 0) {
      const size_t eq = line.find('=');
      if (eq != std::string::npos) return std::atof(line.c_str() + eq + 1) * 1e6;
    }
  }
  std::fprintf(stderr, "no KERNEL_MHZ in %s/fpga_kernels/Makefile\n", NEARPREP_SOURCE_DIR);
  std::exit(1);
}
const double kClockHz = ReadKernelClockHz();
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


struct ModeResult {
  std::string mode;
  double rate[hls_sim::kCases];
  std::string bottleneck[hls_sim::kCases];
};

ModeResult RunMode(const std::vector<std::string>& files, const std::string& mode, int out_size,
                   int dtype) {
  std::mt19937 rng(1);
  const uint64_t slot = static_cast<uint64_t>(out_size) * out_size * 3 * nf::ElementBytes(dtype);
  uint64_t ok = 0, refused = 0, jpeg_bytes = 0, pixels = 0, symbols = 0;
  hls_sim::TakeTiming();  // reset
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
    cfg[nf::kCfgAbiVersion] = nf::kAbiVersion;
    cfg[nf::kCfgJpegBytesLo] = static_cast<uint32_t>(jpeg.size());
    jpeg.resize((jpeg.size() + 63) / 64 * 64);
    std::vector<uint8_t> out((n * slot + 63) / 64 * 64);
    cfg[nf::kCfgOutBytesLo] = static_cast<uint32_t>(n * slot);
    std::vector<uint32_t> status(n * nf::kStatusWords, nf::kStatusNotRun);
    nearprep_preprocess(reinterpret_cast<const WideWord*>(jpeg.data()), desc.data(), cfg.data(),
                        reinterpret_cast<WideWord*>(out.data()), status.data(),
                        static_cast<uint32_t>(n));
    hls_sim::EndKernelCall();
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
  const hls_sim::KernelTiming t = hls_sim::TakeTiming();
  const double images = static_cast<double>(ok + refused);
  std::printf("\n== crops: %s == %zu images, %dx%d %s NHWC, %d per run (%llu runs)\n", mode.c_str(),
              files.size(), out_size, out_size,
              dtype == 0 ? "float32" : dtype == 1 ? "float16" : dtype == 2 ? "bfloat16" : "uint8",
              kImagesPerRun, static_cast<unsigned long long>(t.calls));
  std::printf("decoded OK: %llu, refused: %llu; mean %.0f pixels, %.0f Huffman loop iterations, "
              "%.0f JPEG bytes per image\n",
              static_cast<unsigned long long>(ok), static_cast<unsigned long long>(refused),
              ok ? 1.0 * pixels / ok : 0.0, ok ? 1.0 * symbols / ok : 0.0,
              images ? jpeg_bytes / images : 0.0);
  std::printf("%-15s | %25s | %25s\n", "per image", "optimistic", "expected");
  std::printf("%-15s | %8s %8s %8s | %8s %8s %8s\n", "process", "busy", "in-stall", "out-stall",
              "busy", "in-stall", "out-stall");
  ModeResult r;
  r.mode = mode;
  uint64_t worst[hls_sim::kCases] = {0, 0};
  // Network order (dataflow.h); processes not listed (a rewrite's new ones)
  // follow in the order they ended.
  static const char* const kOrder[] = {
      "ReadControl", "BurstRead",  "ParseHeader",   "Destuff",    "HuffmanDecode",
      "AssembleBlocks", "Idct",    "McuRowReceive", "RasterEmit", "UpsampleColor",
      "CropResize", "ResizeMath",  "PackOutput",    "PackWords",  "BurstWrite",
      "WriteStatus"};
  std::vector<hls_sim::ProcTiming> procs = t.procs;
  auto rank = [](const std::string& n) {
    for (size_t i = 0; i < sizeof(kOrder) / sizeof(kOrder[0]); ++i) {
      if (n == kOrder[i]) return i;
    }
    return sizeof(kOrder) / sizeof(kOrder[0]);
  };
  std::stable_sort(procs.begin(), procs.end(),
                   [&](const hls_sim::ProcTiming& a, const hls_sim::ProcTiming& b) {
                     return rank(a.name) < rank(b.name);
                   });
  for (const hls_sim::ProcTiming& p : procs) {
    if (p.busy[0] == 0 && p.busy[1] == 0) continue;  // DecodeToRgb: only waits for its region
    std::printf("%-15s | %8.0f %8.0f %8.0f | %8.0f %8.0f %8.0f\n", p.name.c_str(),
                p.busy[0] / images, p.stall_in[0] / images, p.stall_out[0] / images,
                p.busy[1] / images, p.stall_in[1] / images, p.stall_out[1] / images);
    for (int c = 0; c < hls_sim::kCases; ++c) {
      if (p.busy[c] > worst[c]) {
        worst[c] = p.busy[c];
        r.bottleneck[c] = p.name;
      }
    }
  }
  for (int c = 0; c < hls_sim::kCases; ++c) {
    r.rate[c] = t.cycles[c] > 0 ? kClockHz * images / static_cast<double>(t.cycles[c]) : 0;
  }
  std::printf("cycles/image (runs of %d, fill and drain included): %.0f optimistic, %.0f expected\n",
              kImagesPerRun, t.cycles[0] / images, t.cycles[1] / images);
  std::printf("bottleneck (most busy cycles): %s (optimistic), %s (expected)\n",
              r.bottleneck[0].c_str(), r.bottleneck[1].c_str());
  std::printf("images/s per compute unit at %.0f MHz: %.0f optimistic, %.0f expected\n",
              kClockHz / 1e6, r.rate[0], r.rate[1]);
  std::printf("DDR at the expected rate: %.0f MB/s read (JPEG), %.0f MB/s written (tensors)\n",
              r.rate[1] * jpeg_bytes / images / 1e6, r.rate[1] * static_cast<double>(slot) / 1e6);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--ddr-latency=", 0) == 0) {
      unsigned opt = 0, exp = 0;
      if (std::sscanf(a.c_str() + 14, "%u,%u", &opt, &exp) != 2) {
        std::fprintf(stderr, "--ddr-latency=OPT,EXP (cycles)\n");
        return 2;
      }
      hls_sim::OverrideTiming("DDR.read_latency", opt, exp);
    } else if (a.rfind("--set=", 0) == 0) {  // --set=ID=OPT,EXP: a what-if on one entry
      const size_t eq = a.find('=', 6);
      unsigned opt = 0, exp = 0;
      if (eq == std::string::npos || std::sscanf(a.c_str() + eq + 1, "%u,%u", &opt, &exp) != 2) {
        std::fprintf(stderr, "--set=ID=OPT,EXP (an id of fpga_kernels/host/loop_timing.cc)\n");
        return 2;
      }
      const std::string id = a.substr(6, eq - 6);
      hls_sim::FindTiming(id.c_str());  // aborts with a message on an unknown id
      hls_sim::OverrideTiming(id.c_str(), opt, exp);
      std::printf("what-if: %s II/cycles %u / %u\n", id.c_str(), opt, exp);
    } else {
      args.push_back(a);
    }
  }
  const char* env = std::getenv("NEARPREP_SAMPLE_IMAGES_DIR");
  const std::string dir = args.size() > 0 ? args[0]
                          : env != nullptr
                              ? env
                              : NEARPREP_SOURCE_DIR "/../shared/datasets/imagenet-sample-200";
  const int out_size = args.size() > 1 ? std::atoi(args[1].c_str()) : 224;
  const int dtype = args.size() > 2 ? std::atoi(args[2].c_str()) : 0;
  const std::string mode = args.size() > 3 ? args[3] : "all";
  if (mode != "rrc" && mode != "center" && mode != "full" && mode != "all") {
    std::fprintf(stderr, "MODE must be rrc, center, full or all\n");
    return 2;
  }
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
  const hls_sim::LoopTiming* ddr = hls_sim::FindTiming("DDR.read_latency");
  std::printf("nearprep_preprocess timed C simulation (NOT synthesised: IIs and depths from "
              "fpga_kernels/host/loop_timing.cc; DDR read latency %u / %u cycles)\n",
              ddr->ii[0], ddr->ii[1]);
  hls_sim::EnableTiming(true);
  std::vector<ModeResult> results;
  for (const char* m : {"rrc", "center", "full"}) {
    if (mode == "all" || mode == m) results.push_back(RunMode(files, m, out_size, dtype));
  }
  std::printf("\nsummary: images/s per compute unit at %.0f MHz (optimistic - expected), "
              "bottleneck (expected)\n", kClockHz / 1e6);
  for (const ModeResult& r : results) {
    std::printf("  %-7s %6.0f - %6.0f   %s\n", r.mode.c_str(), r.rate[0], r.rate[1],
                r.bottleneck[1].c_str());
  }
  return 0;
}
