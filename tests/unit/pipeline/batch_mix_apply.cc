// nearprep_batch_mix_apply: the C++ side of tests/python/test_batch_mix.py,
// which compares server/pipeline/batch_mix's draws and op with the Python
// twin (client/python/nearprep/batch_mix.py) and torchvision's formula.
//
// Usage:
//   nearprep_batch_mix_apply draw
//       Reads lines "mixup_alpha cutmix_alpha seed epoch shard batch H W"
//       from stdin (alphas as decimal or 0x-prefixed float32 bits, the rest
//       as unsigned decimal) and prints one line per input line:
//       "kind lambda_bits y1 x1 y2 x2" (kind 0 none, 1 MixUp, 2 CutMix;
//       lambda as the 8 hex digits of its float32 bits).
//   nearprep_batch_mix_apply apply KIND LAMBDA_BITS Y1 X1 Y2 X2 DTYPE LAYOUT
//                                  N H W IN OUT
//       Applies ApplyBatchMix to the raw tensor in file IN (N images of
//       DTYPE 0 f32 | 1 f16 | 2 bf16 | 3 u8, LAYOUT 0 NHWC | 1 NCHW, native
//       byte order) and writes the result to OUT.
//   nearprep_batch_mix_apply time KIND LAMBDA_BITS Y1 X1 Y2 X2 DTYPE LAYOUT
//                                 N H W IN REPEAT
//       For bench/python/augment_ops_bench.py: runs the same ApplyBatchMix
//       REPEAT times, each on a fresh copy of IN's tensor (the copy is
//       outside the timed interval), and prints
//       "TIME MEDIAN MIN" (seconds per call over the REPEAT calls).
//   nearprep_batch_mix_apply convcheck
//       Compares BatchMixStore with server/image's StoreElement on ~1.1M
//       float32 bit patterns (a stride over all 2^32 and the neighbourhoods
//       of every rounding boundary), and checks that BatchMixLoad and
//       BatchMixStore round-trip every float16, bfloat16 and uint8 value.
//       Prints the number of checks; exit status 1 on the first mismatch.
// Exit status 2 on bad usage or I/O errors.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "server/image/tf_ops_internal.h"
#include "server/pipeline/batch_mix.h"

namespace {

float ParseFloat(const std::string& s) {
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    const uint32_t bits = static_cast<uint32_t>(std::strtoul(s.c_str(), nullptr, 16));
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  return std::strtof(s.c_str(), nullptr);
}

uint32_t FloatBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

int Draw() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::istringstream in(line);
    std::string ma, ca;
    uint64_t seed = 0, epoch = 0, batch = 0;
    uint32_t shard = 0;
    int h = 0, w = 0;
    if (!(in >> ma >> ca >> seed >> epoch >> shard >> batch >> h >> w)) {
      std::fprintf(stderr, "bad draw line: %s\n", line.c_str());
      return 2;
    }
    nearprep::BatchMixSpec spec;
    spec.mixup_alpha = ParseFloat(ma);
    spec.cutmix_alpha = ParseFloat(ca);
    const nearprep::BatchMixParams p =
        nearprep::DrawBatchMix(spec, seed, epoch, shard, batch, h, w);
    std::printf("%d %08" PRIx32 " %d %d %d %d\n", static_cast<int>(p.kind),
                FloatBits(p.lambda), p.y1, p.x1, p.y2, p.x2);
  }
  return 0;
}

// apply (repeat 0: writes argv[12]) or time (repeat > 0).
int Apply(char** argv, int repeat) {
  nearprep::BatchMixParams p;
  p.kind = static_cast<nearprep::BatchMixKind>(std::atoi(argv[0]));
  p.lambda = ParseFloat(argv[1]);
  p.y1 = std::atoi(argv[2]);
  p.x1 = std::atoi(argv[3]);
  p.y2 = std::atoi(argv[4]);
  p.x2 = std::atoi(argv[5]);
  const auto dtype = static_cast<nearprep::DType>(std::atoi(argv[6]));
  const auto layout = static_cast<nearprep::Layout>(std::atoi(argv[7]));
  const int n = std::atoi(argv[8]), h = std::atoi(argv[9]), w = std::atoi(argv[10]);
  if (n <= 0 || h <= 0 || w <= 0) return 2;
  const size_t bytes = static_cast<size_t>(n) * static_cast<size_t>(h) *
                       static_cast<size_t>(w) * 3 * nearprep::DTypeSize(dtype);
  std::vector<uint8_t> tensor(bytes);
  FILE* f = std::fopen(argv[11], "rb");
  if (f == nullptr) return 2;
  const size_t got = std::fread(tensor.data(), 1, bytes, f);
  std::fclose(f);
  if (got != bytes) {
    std::fprintf(stderr, "%s: %zu bytes, want %zu\n", argv[11], got, bytes);
    return 2;
  }
  std::vector<uint8_t> scratch;
  if (repeat > 0) {
    using Clock = std::chrono::steady_clock;
    std::vector<uint8_t> work(bytes);
    std::vector<double> runs;
    for (int r = 0; r < repeat; ++r) {
      std::memcpy(work.data(), tensor.data(), bytes);
      const auto t0 = Clock::now();
      nearprep::ApplyBatchMix(p, dtype, layout, n, h, w, work.data(), &scratch);
      const auto t1 = Clock::now();
      runs.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
    std::sort(runs.begin(), runs.end());
    const size_t m = runs.size();
    const double median =
        m % 2 == 1 ? runs[m / 2] : 0.5 * (runs[m / 2 - 1] + runs[m / 2]);
    std::printf("TIME %.9g %.9g\n", median, runs[0]);
    return 0;
  }
  nearprep::ApplyBatchMix(p, dtype, layout, n, h, w, tensor.data(), &scratch);
  f = std::fopen(argv[12], "wb");
  if (f == nullptr) return 2;
  const size_t put = std::fwrite(tensor.data(), 1, bytes, f);
  return std::fclose(f) == 0 && put == bytes ? 0 : 2;
}

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

bool SameStore(uint32_t bits, uint64_t* checks) {
  const float v = FromBits(bits);
  for (nearprep::DType d : {nearprep::DType::kFloat16, nearprep::DType::kBFloat16,
                            nearprep::DType::kUint8}) {
    uint8_t got[4] = {0, 0, 0, 0}, want[4] = {0, 0, 0, 0};
    nearprep::BatchMixStore(v, d, got);
    nearprep::internal::StoreElement(v, d, want);
    ++*checks;
    if (std::memcmp(got, want, 4) != 0) {
      std::fprintf(stderr, "store mismatch: dtype %d bits %08" PRIx32 "\n",
                   static_cast<int>(d), bits);
      return false;
    }
  }
  return true;
}

int ConvCheck() {
  uint64_t checks = 0;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4093) {
    if (!SameStore(static_cast<uint32_t>(b), &checks)) return 1;
  }
  // +-2048 ulps (and the negatives) around each boundary: float16's
  // overflow and subnormal limits, its smallest subnormal and half of it,
  // 1, bfloat16's largest finite value, infinity, and the uint8 halves.
  std::vector<float> anchors = {65504.0f, 65520.0f, 65536.0f, 6.103515625e-5f,
                                5.9604644775390625e-8f, 2.98023223876953125e-8f,
                                1.0f, FromBits(0x7F7F8000u), FromBits(0x7F800000u),
                                0.0f};
  for (int i = 0; i <= 255; ++i) anchors.push_back((static_cast<float>(i) + 0.5f) / 255.0f);
  for (float a : anchors) {
    uint32_t base;
    std::memcpy(&base, &a, 4);
    for (int64_t k = -2048; k <= 2048; ++k) {
      const int64_t b = static_cast<int64_t>(base) + k;
      if (b < 0 || b > 0xFFFFFFFFll) continue;
      const uint32_t u = static_cast<uint32_t>(b);
      if (!SameStore(u, &checks) || !SameStore(u | 0x80000000u, &checks)) return 1;
    }
  }
  // Round trips of every 16-bit pattern and every uint8 value.
  for (nearprep::DType d : {nearprep::DType::kFloat16, nearprep::DType::kBFloat16}) {
    for (uint32_t h = 0; h <= 0xFFFFu; ++h) {
      const uint16_t in = static_cast<uint16_t>(h);
      uint8_t raw[2], back[2];
      std::memcpy(raw, &in, 2);
      const float f = nearprep::BatchMixLoad(raw, d);
      nearprep::BatchMixStore(f, d, back);
      uint16_t out;
      std::memcpy(&out, back, 2);
      ++checks;
      uint16_t want = in;  // NaNs come back quiet: float16's one quiet NaN
      if (f != f) {        // with the sign, bfloat16's with its payload.
        want = d == nearprep::DType::kFloat16
                   ? static_cast<uint16_t>((in & 0x8000u) | 0x7E00u)
                   : static_cast<uint16_t>(in | 0x40u);
      }
      if (out != want) {
        std::fprintf(stderr, "round trip: dtype %d %04x -> %04x\n",
                     static_cast<int>(d), h, out);
        return 1;
      }
    }
  }
  for (int i = 0; i <= 255; ++i) {
    const uint8_t in = static_cast<uint8_t>(i);
    const float f = nearprep::BatchMixLoad(&in, nearprep::DType::kUint8);
    uint8_t out = 0;
    nearprep::BatchMixStore(f, nearprep::DType::kUint8, &out);
    ++checks;
    if (f != static_cast<float>(i) * (1.0f / 255.0f) || out != in) {
      std::fprintf(stderr, "uint8 round trip: %d\n", i);
      return 1;
    }
  }
  std::printf("%" PRIu64 " checks\n", checks);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "draw") == 0) return Draw();
  if (argc == 2 && std::strcmp(argv[1], "convcheck") == 0) return ConvCheck();
  if (argc == 15 && std::strcmp(argv[1], "apply") == 0)
    return Apply(argv + 2, 0);
  if (argc == 15 && std::strcmp(argv[1], "time") == 0) {
    const int repeat = std::atoi(argv[14]);
    return repeat > 0 ? Apply(argv + 2, repeat) : 2;
  }
  std::fprintf(
      stderr,
      "usage: %s draw < lines | convcheck | apply KIND LAMBDA_BITS Y1 X1 Y2 X2 "
      "DTYPE LAYOUT N H W IN OUT | time ... N H W IN REPEAT\n",
      argv[0]);
  return 2;
}
