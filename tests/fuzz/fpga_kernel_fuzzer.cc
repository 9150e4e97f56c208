// Fuzz target: the FPGA kernel's C simulation (nearprep_preprocess) on the
// bytes as a JPEG. Two images per call: the whole picture, and a crop taken
// from PeekJpegSize (or, when the header is unreadable, descriptor words
// taken from the input). A sample of the inputs runs on the threaded C
// simulation, and sequentially as well; the rest only sequentially
// (fuzz_targets.h, docs/fuzzing.md). Checks:
//  - a threaded and a sequential run give the same status words and output
//    bytes (the sequential run is what most inputs get: it must be the
//    kernel's result);
//  - every image gets a documented status code (the NOT_RUN pre-fill is
//    overwritten) and an OK image reports a non-empty size;
//  - the kernel writes nothing past its output buffer (rounded up to whole
//    64-byte words, as it writes them; a guard zone after it stays intact);
//  - clipped float32 output lies in [0, 1];
//  - whenever the kernel accepts a JPEG (OK), libjpeg-turbo's TF_COMPAT
//    decode (server/image) accepts it too with the same size, and the
//    kernel's own decoder (DecodeJpegToRgb) returns the same pixels: the
//    kernel claims to be bit-exact and to refuse anything libjpeg would
//    warn about.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "decode_to_rgb.h"
#include "hls_sim.h"
#include "jpeg_l1.h"
#include "nearprep_kernel.h"
#include "nearprep_kernel_abi.h"
#include "server/spec/types.h"
#include "server/image/jpeg_decoder.h"
#include "tests/fuzz/fuzz_targets.h"
#include "transform_l1.h"

namespace nearprep {
namespace fuzz {
namespace {

namespace nf = ::nearprep_fpga;
constexpr char kTarget[] = "fpga_kernel";
#define CHECK_KERNEL(cond, msg) NEARPREP_FUZZ_CHECK(kTarget, cond, msg)

constexpr size_t kGuard = 4096;
constexpr uint8_t kGuardByte = 0xA5;

uint64_t Hash(const uint8_t* data, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

bool GuardIntact(const std::vector<uint8_t>& buf, size_t from) {
  for (size_t i = from; i < buf.size(); ++i) {
    if (buf[i] != kGuardByte) return false;
  }
  return true;
}

bool g_all_threaded = false;

}  // namespace

size_t FpgaKernelThreadedEvery() {
  static const size_t every = [] {
    const char* e = std::getenv("NEARPREP_FUZZ_THREADED_EVERY");
    const unsigned long long v = e != nullptr ? std::strtoull(e, nullptr, 10) : 8;
    return v > 0 ? static_cast<size_t>(v) : size_t{1};
  }();
  return every;
}

void SetFpgaKernelAllThreaded(bool all) { g_all_threaded = all; }

int FuzzFpgaKernel(const uint8_t* data, size_t size) {
  if (size > (uint64_t{1} << 24)) return 0;
  uint64_t h = Hash(data, size);
  // The kernel reads whole 64-byte words: the buffer is `size` bytes rounded
  // up to a word (ASan sees any read past that).
  std::vector<uint8_t> jpeg(data, data + size);
  jpeg.resize((size + 63) / 64 * 64);

  nf::TransformConfig tc;
  tc.out_h = 1 + static_cast<int>(h % 20);
  tc.out_w = 1 + static_cast<int>((h >> 8) % 20);
  tc.dtype = static_cast<int>((h >> 16) % 4);
  tc.layout = static_cast<int>((h >> 20) % 2);
  tc.clip = true;
  tc.normalize = false;
  const uint64_t slot = nf::OutputBytes(tc);

  uint32_t cfg[nf::kCfgWords] = {};
  cfg[nf::kCfgOutHeight] = static_cast<uint32_t>(tc.out_h);
  cfg[nf::kCfgOutWidth] = static_cast<uint32_t>(tc.out_w);
  cfg[nf::kCfgDType] = static_cast<uint32_t>(tc.dtype);
  cfg[nf::kCfgLayout] = static_cast<uint32_t>(tc.layout);
  cfg[nf::kCfgFlags] = nf::kCfgClip;
  for (int c = 0; c < 3; ++c) {
    cfg[nf::kCfgMean0 + c] = Bits(0.0f);
    cfg[nf::kCfgStd0 + c] = Bits(1.0f);
  }
  cfg[nf::kCfgMaxValuesLo] = static_cast<uint32_t>(kFuzzMaxDecodedValues);
  cfg[nf::kCfgMaxValuesHi] = static_cast<uint32_t>(kFuzzMaxDecodedValues >> 32);
  cfg[nf::kCfgAbiVersion] = nf::kAbiVersion;
  cfg[nf::kCfgJpegBytesLo] = static_cast<uint32_t>(size);
  cfg[nf::kCfgJpegBytesHi] = 0;
  cfg[nf::kCfgOutBytesLo] = static_cast<uint32_t>(2 * slot);
  cfg[nf::kCfgOutBytesHi] = static_cast<uint32_t>((2 * slot) >> 32);

  uint32_t desc[2 * nf::kDescWords] = {};
  for (int i = 0; i < 2; ++i) {
    uint32_t* d = desc + i * nf::kDescWords;
    d[nf::kDescJpegSize] = static_cast<uint32_t>(size);
    d[nf::kDescFlags] = (h >> 24) & (nf::kFlagFlip | nf::kFlagSaturation);
    d[nf::kDescBrightness] = Bits(static_cast<float>((h >> 28) % 41) / 100.0f -
                                  0.2f);
    d[nf::kDescSaturation] = Bits(static_cast<float>((h >> 36) % 21) / 10.0f);
    d[nf::kDescOutOffsetLo] = static_cast<uint32_t>(i * slot);
    d[nf::kDescOutOffsetHi] = static_cast<uint32_t>((i * slot) >> 32);
  }
  desc[nf::kDescFlags] |= nf::kFlagWholeImage;
  uint32_t* d1 = desc + nf::kDescWords;
  int ph = 0, pw = 0, pc = 0;
  const bool peek_ok = nf::PeekJpegSize(jpeg.data(), static_cast<uint32_t>(size), &ph, &pw,
                                        &pc) == nf::kStatusOk;
  if (peek_ok && ph > 0 && pw > 0) {
    d1[nf::kDescCropH] = 1 + static_cast<uint32_t>((h >> 40) % ph);
    d1[nf::kDescCropW] = 1 + static_cast<uint32_t>((h >> 44) % pw);
    d1[nf::kDescCropY] = static_cast<uint32_t>((h >> 48) % (ph - d1[nf::kDescCropH] + 1));
    d1[nf::kDescCropX] = static_cast<uint32_t>((h >> 52) % (pw - d1[nf::kDescCropW] + 1));
  } else {
    // Arbitrary (possibly absurd) crop words: must be refused, not obeyed.
    d1[nf::kDescCropY] = static_cast<uint32_t>(h >> 40);
    d1[nf::kDescCropX] = static_cast<uint32_t>(h >> 8);
    d1[nf::kDescCropH] = static_cast<uint32_t>(h);
    d1[nf::kDescCropW] = static_cast<uint32_t>(h >> 24);
  }

  // The kernel writes whole words: the output buffer is 2 * slot bytes
  // rounded up to a word, the guard zone after that.
  const uint64_t out_alloc = (2 * slot + 63) / 64 * 64;
  bool threaded = g_all_threaded || h % FpgaKernelThreadedEvery() == 0;
  // One run of the kernel, threaded or sequential (a deadlock report
  // leaves it as an exception, in both).
  const auto run = [&](bool sequential, std::vector<uint8_t>* out, uint32_t* status) {
    out->assign(out_alloc + kGuard, kGuardByte);
    for (size_t i = 0; i < 2 * nf::kStatusWords; ++i) status[i] = nf::kStatusNotRun;
    std::optional<hls_sim::SequentialScope> scope;
    if (sequential) scope.emplace();
    nearprep_preprocess(reinterpret_cast<const WideWord*>(jpeg.data()), desc, cfg,
                        reinterpret_cast<WideWord*>(out->data()), status, 2);
  };
  std::vector<uint8_t> out;
  uint32_t status[2 * nf::kStatusWords];
  bool compare = threaded;
  if (!threaded) {
    try {
      run(/*sequential=*/true, &out, status);
    } catch (const hls_sim::SequentialLimit&) {
      threaded = true;  // a large image: FIFOs of their depth instead
    }
  }
  if (threaded) {
    CountOutcome(kTarget, compare ? "(threaded, sampled)" : "(threaded, large)");
    run(/*sequential=*/false, &out, status);
  }
  if (compare) {
    std::vector<uint8_t> seq_out;
    uint32_t seq_status[2 * nf::kStatusWords];
    try {
      run(/*sequential=*/true, &seq_out, seq_status);
      CHECK_KERNEL(std::memcmp(seq_status, status, sizeof(status)) == 0 && seq_out == out,
                   "the sequential C simulation differs from the threaded one");
    } catch (const hls_sim::SequentialLimit&) {
    }
  }

  CHECK_KERNEL(GuardIntact(out, out_alloc),
               "kernel wrote past the output buffer size it was given");
  for (int i = 0; i < 2; ++i) {
    const uint32_t* st = status + i * nf::kStatusWords;
    const uint32_t code = st[nf::kStCode];
    CHECK_KERNEL(code == nf::kStatusOk || code == nf::kStatusUnsupported ||
                     code == nf::kStatusCorrupt || code == nf::kStatusTooLarge,
                 absl::StrCat("image ", i, ": status ", code, " (",
                              nf::KernelStatusName(code), ")"));
    if (code != nf::kStatusOk) continue;
    CHECK_KERNEL(st[nf::kStHeight] > 0 && st[nf::kStWidth] > 0,
                 absl::StrCat("image ", i, ": OK with size ", st[nf::kStHeight],
                              "x", st[nf::kStWidth]));
    if (tc.dtype == 0) {
      for (uint64_t b = 0; b < slot; b += 4) {
        float v;
        std::memcpy(&v, out.data() + i * slot + b, 4);
        if (!(v >= 0.0f && v <= 1.0f)) {
          CHECK_KERNEL(false, absl::StrCat("image ", i, ": clipped value ", v));
          break;
        }
      }
    }
  }

  CountOutcome(kTarget, nf::KernelStatusName(status[nf::kStCode]));
  // Differential check against libjpeg-turbo for accepted streams.
  if (status[nf::kStCode] == nf::kStatusOk) {
    DecodeLimits limits;
    limits.max_decoded_values = kFuzzMaxDecodedValues;
    const absl::StatusOr<RgbImage> cpu =
        DecodeJpegTfCompat(jpeg.data(), size, limits);
    CHECK_KERNEL(cpu.ok(), "kernel accepts a JPEG that libjpeg-turbo refuses: " +
                               cpu.status().ToString());
    int kh = 0, kw = 0;
    uint8_t* rgb = nullptr;
    nf::DecodeCycles cycles;
    const auto decode = [&](bool sequential) {
      std::optional<hls_sim::SequentialScope> scope;
      if (sequential) scope.emplace();
      return nf::DecodeJpegToRgb(jpeg.data(), static_cast<uint32_t>(size),
                                 kFuzzMaxDecodedValues, &kh, &kw, &rgb, &cycles);
    };
    uint32_t s;
    try {
      s = decode(/*sequential=*/!threaded);
    } catch (const hls_sim::SequentialLimit&) {
      s = decode(/*sequential=*/false);
    }
    CHECK_KERNEL(s == nf::kStatusOk,
                 absl::StrCat("DecodeJpegToRgb says ", nf::KernelStatusName(s),
                              " where the kernel said OK"));
    if (cpu.ok() && s == nf::kStatusOk) {
      CHECK_KERNEL(kh == cpu->height && kw == cpu->width &&
                       static_cast<int>(status[nf::kStHeight]) == kh &&
                       static_cast<int>(status[nf::kStWidth]) == kw,
                   absl::StrCat("kernel ", kh, "x", kw, ", libjpeg ",
                                cpu->height, "x", cpu->width));
      if (kh == cpu->height && kw == cpu->width) {
        CHECK_KERNEL(std::memcmp(rgb, cpu->pixels.data(),
                                 cpu->pixels.size()) == 0,
                     "kernel pixels differ from libjpeg-turbo's TF_COMPAT "
                     "decode");
      }
    }
    nf::FreeRgb(rgb);
  }
  return 0;
}

}  // namespace fuzz
}  // namespace nearprep

#ifdef NEARPREP_LIBFUZZER_MAIN
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return nearprep::fuzz::FuzzFpgaKernel(data, size);
}
#endif
