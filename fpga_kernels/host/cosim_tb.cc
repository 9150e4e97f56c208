// cosim_tb.cc: the C/RTL co-simulation testbench of nearprep_preprocess for
// fpga_kernels/first_vitis_hour.sh (Vitis HLS csim_design / cosim_design).
// Never built by CMake: the unit tests run the same kernel in C simulation.
//
//   cosim_tb write DIR  -> runs the kernel (csim_design: the C++ model) on the
//                          JPEGs listed in DIR/list.txt and writes DIR/golden.bin
//   cosim_tb check DIR  -> runs it again (cosim_design: the RTL) and compares
//                          the output tensors and status records with golden.bin
// One run of all images, 32x32 float32 NHWC, a centre crop, no flip, clip on;
// tiny images keep RTL simulation to minutes. Exit status 0 when equal.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "hls_compat.h"
#include "nearprep_kernel.h"
#include "nearprep_kernel_abi.h"

namespace nf = nearprep_fpga;

namespace {

constexpr int kOut = 32;

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "write") != 0 && std::strcmp(argv[1], "check") != 0)) {
    std::fprintf(stderr, "usage: cosim_tb write|check DIR (DIR/list.txt: one JPEG name per line)\n");
    return 2;
  }
  const std::string dir = argv[2];
  std::ifstream list(dir + "/list.txt");
  std::vector<std::string> names;
  for (std::string line; std::getline(list, line);) {
    if (!line.empty()) names.push_back(line);
  }
  if (names.empty()) {
    std::fprintf(stderr, "no images in %s/list.txt\n", dir.c_str());
    return 2;
  }
  const uint32_t n = static_cast<uint32_t>(names.size());
  const uint64_t slot = static_cast<uint64_t>(kOut) * kOut * 3 * 4;
  std::vector<uint8_t> jpeg;
  std::vector<uint32_t> desc(n * nf::kDescWords, 0);
  for (uint32_t i = 0; i < n; ++i) {
    const std::vector<uint8_t> f = ReadFile(dir + "/" + names[i]);
    if (f.size() < 4) {
      std::fprintf(stderr, "cannot read %s/%s\n", dir.c_str(), names[i].c_str());
      return 2;
    }
    jpeg.resize((jpeg.size() + 63) / 64 * 64);
    uint32_t* d = &desc[i * nf::kDescWords];
    d[nf::kDescJpegOffsetLo] = static_cast<uint32_t>(jpeg.size());
    d[nf::kDescJpegSize] = static_cast<uint32_t>(f.size());
    d[nf::kDescFlags] = nf::kFlagWholeImage;
    d[nf::kDescBrightness] = Bits(0.0f);
    d[nf::kDescSaturation] = Bits(1.0f);
    d[nf::kDescOutOffsetLo] = static_cast<uint32_t>(i * slot);
    jpeg.insert(jpeg.end(), f.begin(), f.end());
  }
  std::vector<uint32_t> cfg(nf::kCfgWords, 0);
  cfg[nf::kCfgOutHeight] = kOut;
  cfg[nf::kCfgOutWidth] = kOut;
  cfg[nf::kCfgDType] = 0;
  cfg[nf::kCfgFlags] = nf::kCfgClip;
  cfg[nf::kCfgStd0] = cfg[nf::kCfgStd1] = cfg[nf::kCfgStd2] = Bits(1.0f);
  cfg[nf::kCfgMaxValuesLo] = 1u << 29;
  cfg[nf::kCfgAbiVersion] = nf::kAbiVersion;
  cfg[nf::kCfgJpegBytesLo] = static_cast<uint32_t>(jpeg.size());
  jpeg.resize((jpeg.size() + 63) / 64 * 64);
  std::vector<uint8_t> out((n * slot + 63) / 64 * 64, 0);
  cfg[nf::kCfgOutBytesLo] = static_cast<uint32_t>(n * slot);
  std::vector<uint32_t> status(n * nf::kStatusWords, nf::kStatusNotRun);
  nearprep_preprocess(reinterpret_cast<const WideWord*>(jpeg.data()), desc.data(), cfg.data(),
                      reinterpret_cast<WideWord*>(out.data()), status.data(), n);
  std::vector<uint8_t> result(out);
  const uint8_t* st = reinterpret_cast<const uint8_t*>(status.data());
  result.insert(result.end(), st, st + status.size() * 4);
  for (uint32_t i = 0; i < n; ++i) {
    std::printf("%s: status %u (%s), %ux%u\n", names[i].c_str(),
                status[i * nf::kStatusWords + nf::kStCode],
                nf::KernelStatusName(status[i * nf::kStatusWords + nf::kStCode]),
                status[i * nf::kStatusWords + nf::kStWidth],
                status[i * nf::kStatusWords + nf::kStHeight]);
  }
  const std::string golden = dir + "/golden.bin";
  if (std::strcmp(argv[1], "write") == 0) {
    std::ofstream g(golden, std::ios::binary);
    g.write(reinterpret_cast<const char*>(result.data()), static_cast<std::streamsize>(result.size()));
    std::printf("wrote %s (%zu bytes)\n", golden.c_str(), result.size());
    return g ? 0 : 1;
  }
  const std::vector<uint8_t> want = ReadFile(golden);
  if (want != result) {
    size_t k = 0;
    while (k < want.size() && k < result.size() && want[k] == result[k]) ++k;
    std::printf("MISMATCH with %s at byte %zu (sizes %zu / %zu)\n", golden.c_str(), k, want.size(),
                result.size());
    return 1;
  }
  std::printf("RTL output == C simulation output (%zu bytes)\n", result.size());
  return 0;
}
