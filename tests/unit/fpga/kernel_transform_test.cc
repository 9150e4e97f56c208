// C simulation of the whole nearprep_preprocess kernel (many images per run,
// descriptors, status records) against the CPU path (PreprocessJpeg) with
// random augmentation parameters, crops, dtypes and layouts: byte-identical
// tensors. Also: bad descriptors end in an error status, not a crash.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "decode_to_rgb.h"
#include "nearprep_kernel.h"
#include "nearprep_kernel_abi.h"
#include "server/spec/types.h"
#include "server/image/preprocess.h"
#include "tests/unit/fpga/jpeg_test_util.h"

namespace nearprep {
namespace {

namespace nf = nearprep_fpga;

size_t RoundUp64(size_t n) { return (n + 63) / 64 * 64; }

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct Sample {
  std::vector<uint8_t> jpeg;
  SampleParams params;
};

// Runs the kernel on `samples` in one call and compares every image with the
// CPU path. Returns the number of images compared. With `refused` null every
// image must be OK; else images the kernel refuses are counted there (their
// status must be a documented code), and every image it accepts must be
// accepted by the CPU path with the same bytes.
int RunAndCompare(const std::vector<Sample>& samples, const TransformSpec& spec,
                  const OutputSpec& output, uint64_t* cycles_sum, int* refused = nullptr) {
  std::vector<uint8_t> jpeg;
  std::vector<uint32_t> desc(samples.size() * nf::kDescWords, 0);
  const size_t slot = output.SampleBytes(spec);
  for (size_t i = 0; i < samples.size(); ++i) {
    uint32_t* d = &desc[i * nf::kDescWords];
    d[nf::kDescJpegOffsetLo] = static_cast<uint32_t>(jpeg.size());
    d[nf::kDescJpegSize] = static_cast<uint32_t>(samples[i].jpeg.size());
    jpeg.insert(jpeg.end(), samples[i].jpeg.begin(), samples[i].jpeg.end());
    const SampleParams& p = samples[i].params;
    d[nf::kDescFlags] = (p.flip ? nf::kFlagFlip : 0) |
                        (spec.crop == CropMode::kNone ? nf::kFlagWholeImage : 0) |
                        (spec.saturation_enabled ? nf::kFlagSaturation : 0);
    d[nf::kDescBrightness] = Bits(p.brightness_delta);
    d[nf::kDescSaturation] = Bits(p.saturation_factor);
    d[nf::kDescCropY] = p.crop.y;
    d[nf::kDescCropX] = p.crop.x;
    d[nf::kDescCropH] = p.crop.height;
    d[nf::kDescCropW] = p.crop.width;
    d[nf::kDescOutOffsetLo] = static_cast<uint32_t>(i * slot);
  }
  std::vector<uint32_t> cfg(nf::kCfgWords, 0);
  cfg[nf::kCfgOutHeight] = spec.height;
  cfg[nf::kCfgOutWidth] = spec.width;
  cfg[nf::kCfgDType] = static_cast<uint32_t>(output.dtype);
  cfg[nf::kCfgLayout] = static_cast<uint32_t>(output.layout);
  cfg[nf::kCfgFlags] = (spec.clip ? nf::kCfgClip : 0) | (spec.normalize ? nf::kCfgNormalize : 0);
  for (int c = 0; c < 3; ++c) {
    cfg[nf::kCfgMean0 + c] = Bits(spec.mean[c]);
    cfg[nf::kCfgStd0 + c] = Bits(spec.std[c]);
  }
  const uint64_t limit = uint64_t{1} << 29;
  cfg[nf::kCfgMaxValuesLo] = static_cast<uint32_t>(limit);
  cfg[nf::kCfgMaxValuesHi] = static_cast<uint32_t>(limit >> 32);
  cfg[nf::kCfgAbiVersion] = nf::kAbiVersion;
  cfg[nf::kCfgJpegBytesLo] = static_cast<uint32_t>(jpeg.size());
  // Both buffers are allocated in whole 64-byte words (the kernel reads and
  // writes words); cfg gives the bytes in use.
  std::vector<uint8_t> out(RoundUp64(samples.size() * slot), 0xAB);
  cfg[nf::kCfgOutBytesLo] = static_cast<uint32_t>(samples.size() * slot);
  jpeg.resize(RoundUp64(jpeg.size()));
  std::vector<uint32_t> status(samples.size() * nf::kStatusWords, nf::kStatusNotRun);
  nearprep_preprocess(reinterpret_cast<const WideWord*>(jpeg.data()), desc.data(), cfg.data(),
                      reinterpret_cast<WideWord*>(out.data()), status.data(),
                      static_cast<uint32_t>(samples.size()));
  int compared = 0;
  std::vector<uint8_t> ref(slot);
  for (size_t i = 0; i < samples.size(); ++i) {
    const uint32_t* st = &status[i * nf::kStatusWords];
    const uint32_t code = st[nf::kStCode];
    if (refused != nullptr && code != nf::kStatusOk) {
      EXPECT_TRUE(code == nf::kStatusUnsupported || code == nf::kStatusCorrupt ||
                  code == nf::kStatusTooLarge)
          << "image " << i << " status " << code;
      ++*refused;
      continue;
    }
    EXPECT_EQ(code, nf::kStatusOk) << "image " << i;
    if (code != nf::kStatusOk) continue;
    for (int k = nf::kStCyclesEntropy; k <= nf::kStCyclesResize; ++k) *cycles_sum += st[k];
    const SampleParams fixed = samples[i].params;
    SampleParams used;
    DecodeLimits limits;
    const absl::Status s = PreprocessJpeg(
        samples[i].jpeg.data(), samples[i].jpeg.size(), spec, output, limits,
        [&](int h, int w) {
          SampleParams p = fixed;
          if (spec.crop == CropMode::kNone) p.crop = CropBox{0, 0, h, w};
          return p;
        },
        &used, ref.data(), nullptr);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(std::memcmp(ref.data(), out.data() + i * slot, slot), 0)
        << "image " << i << " dtype " << static_cast<int>(output.dtype) << " layout "
        << static_cast<int>(output.layout) << " flip " << fixed.flip << " delta "
        << fixed.brightness_delta << " factor " << fixed.saturation_factor;
    ++compared;
  }
  return compared;
}

SampleParams RandomParams(std::mt19937& rng, const TransformSpec& spec, int h, int w) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  SampleParams p;
  p.flip = u(rng) < 0.5f;
  p.brightness_delta = u(rng) * 2 * 0.3f - 0.3f;
  p.saturation_factor = u(rng) * (1.6f - 0.4f) + 0.4f;
  if (spec.crop == CropMode::kNone) {
    p.crop = CropBox{0, 0, h, w};
  } else {
    const int ch = 1 + static_cast<int>(rng() % h), cw = 1 + static_cast<int>(rng() % w);
    p.crop = CropBox{static_cast<int>(rng() % (h - ch + 1)),
                     static_cast<int>(rng() % (w - cw + 1)), ch, cw};
  }
  return p;
}

TEST(FpgaKernelTransformTest, MatchesCpuPathOnRealImagesWithRandomParams) {
  const std::vector<std::string> files = fpga_test::RealImages();
  if (files.empty()) GTEST_SKIP() << "../shared/datasets/imagenet-sample-200 is absent";
  std::mt19937 rng(42);
  int compared = 0;
  uint64_t cycles = 0;
  const size_t kPerRun = 25;
  for (size_t start = 0; start < files.size(); start += kPerRun) {
    const int run = static_cast<int>(start / kPerRun);
    TransformSpec spec;
    spec.height = run % 2 ? 224 : 160;
    spec.width = run % 3 ? 224 : 200;
    spec.crop = run % 4 == 3 ? CropMode::kRandomResized : CropMode::kNone;
    spec.saturation_enabled = run % 2 == 0;
    spec.saturation_lower = 0.4f;
    spec.saturation_upper = 1.6f;
    spec.brightness_max_delta = 0.3f;
    spec.clip = run != 5;
    spec.normalize = run == 6;
    if (spec.normalize) {
      const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
      for (int c = 0; c < 3; ++c) {
        spec.mean[c] = mean[c];
        spec.std[c] = sd[c];
      }
    }
    OutputSpec output;
    output.dtype = static_cast<DType>(run % 4);
    output.layout = run % 3 == 1 ? Layout::kNCHW : Layout::kNHWC;
    std::vector<Sample> samples;
    for (size_t i = start; i < files.size() && i < start + kPerRun; ++i) {
      Sample s;
      s.jpeg = fpga_test::ReadFile(files[i]);
      int h = 0, w = 0, c = 0;
      ASSERT_EQ(nf::PeekJpegSize(s.jpeg.data(), static_cast<uint32_t>(s.jpeg.size()), &h, &w, &c),
                nf::kStatusOk);
      s.params = RandomParams(rng, spec, h, w);
      samples.push_back(std::move(s));
    }
    compared += RunAndCompare(samples, spec, output, &cycles);
  }
  EXPECT_EQ(compared, static_cast<int>(files.size()));
  std::printf("kernel C-sim: %d images identical to the CPU path; %.0f modelled cycles/image "
              "(sum of stages)\n", compared, compared ? 1.0 * cycles / compared : 0.0);
}

TEST(FpgaKernelTransformTest, MatchesCpuPathOnGeneratedVariants) {
  std::mt19937 rng(3);
  std::vector<Sample> samples;
  TransformSpec spec;
  spec.height = 37;
  spec.width = 53;
  spec.crop = CropMode::kRandomResized;
  spec.saturation_enabled = true;
  int seed = 1;
  for (int comps : {1, 3}) {
    for (int hs : {1, 2}) {
      for (int vs : {1, 2}) {
        if (comps == 1 && (hs != 1 || vs != 1)) continue;
        if (hs == 1 && vs == 2) continue;
        for (const auto& wh : {std::pair<int, int>{5, 3}, {100, 61}, {37, 53}}) {
          fpga_test::EncodeOptions o;
          o.components = comps;
          o.h_samp = hs;
          o.v_samp = vs;
          o.width = wh.first;
          o.height = wh.second;
          o.restart_interval = seed % 3;
          o.seed = seed++;
          Sample s;
          s.jpeg = fpga_test::EncodeTestJpeg(o);
          s.params = RandomParams(rng, spec, o.height, o.width);
          samples.push_back(std::move(s));
        }
      }
    }
  }
  uint64_t cycles = 0;
  for (int dtype = 0; dtype < 4; ++dtype) {
    OutputSpec output;
    output.dtype = static_cast<DType>(dtype);
    output.layout = dtype % 2 ? Layout::kNCHW : Layout::kNHWC;
    EXPECT_EQ(RunAndCompare(samples, spec, output, &cycles), static_cast<int>(samples.size()));
  }
}

// Damaged, truncated and garbage streams mixed with good ones in the same
// runs, through the whole dataflow network (threads, bounded FIFOs): every
// run finishes (a deadlock would abort the test binary with the stream that
// hung), every image gets a documented status, and every image the kernel
// accepts - including the good ones after a corrupt one in the same run -
// equals the CPU path.
TEST(FpgaKernelTransformTest, CorruptStreamsThroughTheWholeNetwork) {
  std::mt19937 rng(5);
  TransformSpec spec;
  spec.height = 19;
  spec.width = 23;
  spec.crop = CropMode::kNone;
  spec.saturation_enabled = true;
  std::vector<Sample> samples;
  for (int trial = 0; trial < 240; ++trial) {
    fpga_test::EncodeOptions o;
    o.width = 9 + trial % 61;
    o.height = 7 + trial % 43;
    o.components = trial % 5 == 0 ? 1 : 3;
    o.h_samp = 1 + trial % 2;
    o.v_samp = o.h_samp == 2 ? 1 + (trial / 2) % 2 : 1;
    o.restart_interval = trial % 4;
    o.seed = 500 + trial;
    Sample s;
    s.jpeg = fpga_test::EncodeTestJpeg(o);
    ASSERT_FALSE(s.jpeg.empty());
    switch (trial % 4) {
      case 0:  // good
        break;
      case 1: {  // a few random bytes changed
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int f = 0; f < flips; ++f) s.jpeg[rng() % s.jpeg.size()] = static_cast<uint8_t>(rng());
        break;
      }
      case 2:  // truncated anywhere
        s.jpeg.resize(rng() % s.jpeg.size());
        break;
      default:  // garbage behind a JPEG start
        for (size_t k = 2; k < s.jpeg.size(); ++k) s.jpeg[k] = static_cast<uint8_t>(rng());
        break;
    }
    s.params = SampleParams();
    s.params.flip = trial % 3 == 0;
    s.params.saturation_factor = 1.2f;
    samples.push_back(std::move(s));
  }
  int compared = 0, refused = 0;
  uint64_t cycles = 0;
  for (size_t start = 0; start < samples.size(); start += 20) {
    const std::vector<Sample> run(samples.begin() + start,
                                  samples.begin() + std::min(samples.size(), start + 20));
    OutputSpec output;
    output.dtype = static_cast<DType>(start / 20 % 4);
    output.layout = start / 20 % 2 ? Layout::kNCHW : Layout::kNHWC;
    compared += RunAndCompare(run, spec, output, &cycles, &refused);
  }
  EXPECT_EQ(compared + refused, static_cast<int>(samples.size()));
  EXPECT_GE(compared, 60);  // the good quarter at least
  EXPECT_GE(refused, 100);
  std::printf("corrupt corpus through the network: %d accepted (identical to the CPU path), "
              "%d refused\n", compared, refused);
}

TEST(FpgaKernelTransformTest, BadDescriptorsGiveErrorStatusNotCrash) {
  fpga_test::EncodeOptions o;
  const std::vector<uint8_t> jpeg = fpga_test::EncodeTestJpeg(o);
  std::vector<uint32_t> cfg(nf::kCfgWords, 0);
  cfg[nf::kCfgOutHeight] = 8;
  cfg[nf::kCfgOutWidth] = 8;
  cfg[nf::kCfgMaxValuesLo] = 1u << 29;
  cfg[nf::kCfgAbiVersion] = nf::kAbiVersion;
  cfg[nf::kCfgJpegBytesLo] = static_cast<uint32_t>(jpeg.size());
  std::vector<uint8_t> out(8 * 8 * 3 * 4);  // 768 bytes: whole 64-byte words
  cfg[nf::kCfgOutBytesLo] = static_cast<uint32_t>(out.size());
  std::vector<uint8_t> padded_jpeg = jpeg;
  padded_jpeg.resize(RoundUp64(jpeg.size()));
  const WideWord* jpeg_words = reinterpret_cast<const WideWord*>(padded_jpeg.data());
  WideWord* out_words = reinterpret_cast<WideWord*>(out.data());
  std::vector<uint32_t> desc(4 * nf::kDescWords, 0);
  // 0: jpeg beyond the buffer; 1: output beyond the buffer; 2: crop outside
  // the image; 3: valid.
  desc[0 * nf::kDescWords + nf::kDescJpegOffsetLo] = 10;
  desc[0 * nf::kDescWords + nf::kDescJpegSize] = static_cast<uint32_t>(jpeg.size());
  desc[1 * nf::kDescWords + nf::kDescJpegSize] = static_cast<uint32_t>(jpeg.size());
  desc[1 * nf::kDescWords + nf::kDescOutOffsetLo] = 4;
  desc[1 * nf::kDescWords + nf::kDescFlags] = nf::kFlagWholeImage;
  desc[2 * nf::kDescWords + nf::kDescJpegSize] = static_cast<uint32_t>(jpeg.size());
  desc[2 * nf::kDescWords + nf::kDescCropH] = 1000;
  desc[2 * nf::kDescWords + nf::kDescCropW] = 10;
  desc[3 * nf::kDescWords + nf::kDescJpegSize] = static_cast<uint32_t>(jpeg.size());
  desc[3 * nf::kDescWords + nf::kDescFlags] = nf::kFlagWholeImage;
  std::vector<uint32_t> status(4 * nf::kStatusWords, nf::kStatusNotRun);
  nearprep_preprocess(jpeg_words, desc.data(), cfg.data(), out_words, status.data(), 4);
  EXPECT_EQ(status[0 * nf::kStatusWords], nf::kStatusCorrupt);
  EXPECT_EQ(status[1 * nf::kStatusWords], nf::kStatusCorrupt);
  EXPECT_EQ(status[2 * nf::kStatusWords], nf::kStatusUnsupported);
  EXPECT_EQ(status[3 * nf::kStatusWords], nf::kStatusOk);
  // Over the decode limit (h * w * 3 values): TOO_LARGE.
  cfg[nf::kCfgMaxValuesLo] = 64 * 48 * 3;
  nearprep_preprocess(jpeg_words, desc.data() + 3 * nf::kDescWords, cfg.data(), out_words,
                      status.data(), 1);
  EXPECT_EQ(status[0], nf::kStatusTooLarge);
  // Two images written to overlapping slots: the second is refused (the
  // writer only merges the words adjacent slots share), the first is fine.
  cfg[nf::kCfgMaxValuesLo] = 1u << 29;
  std::vector<uint32_t> twice(2 * nf::kDescWords, 0);
  for (int i = 0; i < 2; ++i) {
    twice[i * nf::kDescWords + nf::kDescJpegSize] = static_cast<uint32_t>(jpeg.size());
    twice[i * nf::kDescWords + nf::kDescFlags] = nf::kFlagWholeImage;
  }
  nearprep_preprocess(jpeg_words, twice.data(), cfg.data(), out_words, status.data(), 2);
  EXPECT_EQ(status[0], nf::kStatusOk);
  EXPECT_EQ(status[nf::kStatusWords], nf::kStatusCorrupt);
  // A host of another ABI version (e.g. 1, whose word 13 was the scratch
  // size): no image is served, every one is UNSUPPORTED.
  for (const uint32_t version : {nf::kAbiVersion - 1, nf::kAbiVersion + 1, 1u << 20}) {
    cfg[nf::kCfgAbiVersion] = version;
    std::fill(status.begin(), status.end(), nf::kStatusNotRun);
    nearprep_preprocess(jpeg_words, desc.data() + 3 * nf::kDescWords, cfg.data(), out_words,
                        status.data(), 1);
    EXPECT_EQ(status[0], nf::kStatusUnsupported) << "version " << version;
  }
}

}  // namespace
}  // namespace nearprep
