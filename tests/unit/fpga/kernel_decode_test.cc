// C simulation of the FPGA kernel's JPEG decode against libjpeg-turbo
// (JDCT_IFAST, fancy upsampling, RGB): byte-identical output on generated
// variants and on the real images; unsupported and corrupt inputs reported as
// such, never an out-of-bounds access (also built with ASan/UBSan).
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "dataflow.h"
#include "decode_to_rgb.h"
#include "hls_compat.h"
#include "jpeg_l1.h"
#include "nearprep_kernel_abi.h"
#include "tests/unit/fpga/jpeg_test_util.h"

namespace nearprep {
namespace {

using fpga_test::EncodeOptions;
using fpga_test::EncodeTestJpeg;
using fpga_test::ReferenceDecode;

constexpr uint64_t kLimit = uint64_t{1} << 29;

struct KernelDecode {
  uint32_t status = 0;
  int height = 0, width = 0;
  std::vector<uint8_t> rgb;
  nearprep_fpga::DecodeCycles cycles;
};

KernelDecode RunKernelDecode(const std::vector<uint8_t>& jpeg) {
  KernelDecode k;
  uint8_t* rgb = nullptr;
  k.status = nearprep_fpga::DecodeJpegToRgb(jpeg.data(), static_cast<uint32_t>(jpeg.size()),
                                            kLimit, &k.height, &k.width, &rgb, &k.cycles);
  if (rgb) {
    k.rgb.assign(rgb, rgb + static_cast<size_t>(k.height) * k.width * 3);
    nearprep_fpga::FreeRgb(rgb);
  }
  return k;
}

// Index of the first differing byte, or -1.
long FirstDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<long>(i);
  }
  return -1;
}

TEST(FpgaKernelDecodeTest, MatchesLibjpegOnGeneratedVariants) {
  struct Samp { int comps, h, v; const char* name; };
  const Samp samps[] = {{3, 2, 2, "420"}, {3, 2, 1, "422"}, {3, 1, 1, "444"}, {1, 1, 1, "gray"}};
  const int sizes[][2] = {{1, 1}, {2, 3}, {3, 2}, {5, 4}, {17, 9}, {33, 17},
                          {64, 48}, {127, 93}, {301, 199}, {16, 200}};
  int checked = 0;
  uint32_t seed = 1;
  for (const Samp& s : samps) {
    for (const auto& wh : sizes) {
      for (int quality : {50, 95, 100}) {
        for (int restart : {0, 1, 7}) {
          EncodeOptions o;
          o.width = wh[0];
          o.height = wh[1];
          o.components = s.comps;
          o.h_samp = s.h;
          o.v_samp = s.v;
          o.quality = quality;
          o.restart_interval = restart;
          o.seed = seed++;
          const std::vector<uint8_t> jpeg = EncodeTestJpeg(o);
          ASSERT_FALSE(jpeg.empty());
          const fpga_test::RefImage ref = ReferenceDecode(jpeg);
          ASSERT_TRUE(ref.ok);
          ASSERT_EQ(ref.warnings, 0);
          const KernelDecode k = RunKernelDecode(jpeg);
          const std::string what = std::string(s.name) + " " + std::to_string(wh[0]) + "x" +
                                   std::to_string(wh[1]) + " q" + std::to_string(quality) +
                                   " rst" + std::to_string(restart);
          ASSERT_EQ(k.status, nearprep_fpga::kStatusOk) << what;
          ASSERT_EQ(k.height, ref.height) << what;
          ASSERT_EQ(k.width, ref.width) << what;
          ASSERT_EQ(FirstDiff(k.rgb, ref.rgb), -1) << what;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 4 * 10 * 3 * 3);
}

TEST(FpgaKernelDecodeTest, ReportsProgressiveAndArithmeticUnsupported) {
  for (int variant = 0; variant < 4; ++variant) {
    EncodeOptions o;
    o.width = 40;
    o.height = 30;
    o.progressive = variant & 1;
    o.arithmetic = variant & 2;
    if (!o.progressive && !o.arithmetic) continue;
    const std::vector<uint8_t> jpeg = EncodeTestJpeg(o);
    ASSERT_FALSE(jpeg.empty());
    const fpga_test::RefImage ref = ReferenceDecode(jpeg);
    ASSERT_TRUE(ref.ok);  // libjpeg decodes them: the CPU fallback will
    EXPECT_EQ(RunKernelDecode(jpeg).status, nearprep_fpga::kStatusUnsupported)
        << "progressive=" << o.progressive << " arithmetic=" << o.arithmetic;
  }
}

TEST(FpgaKernelDecodeTest, TruncatedStreamsAreErrors) {
  EncodeOptions o;
  o.width = 57;
  o.height = 41;
  o.restart_interval = 2;
  const std::vector<uint8_t> jpeg = EncodeTestJpeg(o);
  ASSERT_FALSE(jpeg.empty());
  int corrupt = 0;
  for (size_t len = 0; len < jpeg.size(); len += (len < 700 ? 1 : 3)) {
    std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + len);
    const KernelDecode k = RunKernelDecode(cut);
    EXPECT_NE(k.status, nearprep_fpga::kStatusOk) << "len " << len;
    corrupt += k.status == nearprep_fpga::kStatusCorrupt;
  }
  EXPECT_GT(corrupt, 0);
}

// Random byte damage: the kernel must never crash, and whenever it says OK,
// libjpeg must have decoded the same stream cleanly to the same bytes.
TEST(FpgaKernelDecodeTest, DamagedStreamsNeverLieAboutSuccess) {
  std::mt19937 rng(7);
  int ok = 0, not_ok = 0;
  for (int trial = 0; trial < 300; ++trial) {
    EncodeOptions o;
    o.width = 24 + trial % 50;
    o.height = 16 + trial % 37;
    o.components = trial % 5 == 0 ? 1 : 3;
    o.h_samp = 1 + trial % 2;
    o.v_samp = 1 + (trial / 2) % 2;
    if (o.h_samp == 1 && o.v_samp == 2) o.v_samp = 1;
    o.restart_interval = trial % 3;
    o.seed = 100 + trial;
    std::vector<uint8_t> jpeg = EncodeTestJpeg(o);
    ASSERT_FALSE(jpeg.empty());
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const size_t pos = rng() % jpeg.size();
      jpeg[pos] = static_cast<uint8_t>(rng());
    }
    const KernelDecode k = RunKernelDecode(jpeg);
    if (k.status != nearprep_fpga::kStatusOk) {
      ++not_ok;
      continue;
    }
    ++ok;
    const fpga_test::RefImage ref = ReferenceDecode(jpeg);
    ASSERT_TRUE(ref.ok) << "trial " << trial;
    EXPECT_EQ(ref.warnings, 0) << "trial " << trial << " libjpeg warning code "
                               << ref.first_warning;
    ASSERT_EQ(k.height, ref.height);
    ASSERT_EQ(k.width, ref.width);
    EXPECT_EQ(FirstDiff(k.rgb, ref.rgb), -1) << "trial " << trial;
  }
  EXPECT_GT(not_ok, 0);
  std::printf("damaged streams: %d decoded (identical to libjpeg), %d refused\n", ok, not_ok);
}

TEST(FpgaKernelDecodeTest, GarbageNeverCrashes) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<uint8_t> junk(rng() % 600);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    if (junk.size() >= 2 && trial % 2) {
      junk[0] = 0xFF;
      junk[1] = 0xD8;
    }
    EXPECT_NE(RunKernelDecode(junk).status, nearprep_fpga::kStatusOk);
  }
}

// The kernel's decode region (DecodeToRgb, a nested DATAFLOW region) between
// neighbours that stall for longer than the old 2 s grace period, as the
// kernel's BurstRead / CropResize do when a loaded machine starves their
// threads: the feeder pauses a quarter into the JPEG bytes, the consumer
// three quarters into the pixels. Every decode process waits on a stream fed or
// drained by a neighbour that is merely slow: no deadlock. The old detector
// (all processes of the decode region blocked for 2 s of wall clock)
// declared one in 'decode_to_rgb' and aborted, as nearprepd did on this image
// (n02027492_red-backed_sandpiper.JPEG, 500x325 4:4:4) in the TF oracle test.
TEST(FpgaKernelDecodeTest, StalledNeighboursOfTheDecodeRegionAreNoDeadlock) {
  const std::string path =
      fpga_test::SampleImagesDir() + "/n02027492/n02027492_red-backed_sandpiper.JPEG";
  std::FILE* probe = std::fopen(path.c_str(), "rb");
  if (probe == nullptr) GTEST_SKIP() << path << " is absent";
  std::fclose(probe);
  const std::vector<uint8_t> jpeg = fpga_test::ReadFile(path);
  const KernelDecode plain = RunKernelDecode(jpeg);
  ASSERT_EQ(plain.status, nearprep_fpga::kStatusOk);
  ASSERT_EQ(plain.width, 500);
  ASSERT_EQ(plain.height, 325);

  using nearprep_fpga::ImageJob;
  using nearprep_fpga::kJobDepth;
  const auto stall = [] { std::this_thread::sleep_for(std::chrono::milliseconds(2500)); };
  hls::stream<ImageJob, kJobDepth> j_header("j_header"), j_done("j_done");
  hls::stream<uint8_t, nearprep_fpga::kByteDepth> jpeg_bytes("jpeg_bytes");
  hls::stream<nearprep_fpga::Rgb, nearprep_fpga::kPixelDepth> rgb("rgb");
  hls::stream<nearprep_fpga::StageStatus, nearprep_fpga::kStatusDepth> huff("huff_status"),
      idct("idct_status");
  ImageJob done = ImageJob();
  std::vector<uint8_t> got;
  uint32_t huff_verdict = 99, idct_verdict = 99;
  const auto start = std::chrono::steady_clock::now();
  std::string report;
  {
    hls_sim::Region region("stalled_neighbours");
    region.Spawn([&] {  // BurstRead, starved a quarter into the bytes
      ImageJob j = ImageJob();
      j.status = nearprep_fpga::kStatusOk;
      j.jpeg_size = static_cast<uint32_t>(jpeg.size());
      j.flags = nearprep_fpga::kFlagWholeImage;
      j.max_values = kLimit;
      j_header.write(j);
      for (size_t i = 0; i < jpeg.size(); ++i) {
        if (i == jpeg.size() / 4) stall();
        jpeg_bytes.write(jpeg[i]);
      }
    });
    region.Spawn(
        [&] { nearprep_fpga::DecodeToRgb(1, j_header, jpeg_bytes, j_done, rgb, huff, idct); });
    region.Spawn([&] {  // CropResize, starved three quarters into the pixels
      done = j_done.read();
      if (done.status != nearprep_fpga::kStatusOk) return;
      const size_t n = static_cast<size_t>(done.height) * done.width;
      for (size_t i = 0; i < n; ++i) {
        if (i == n / 4 * 3) stall();
        const nearprep_fpga::Rgb px = rgb.read();
        for (int c = 0; c < 3; ++c) got.push_back(px.c[c]);
      }
      huff_verdict = huff.read().status;
      idct_verdict = idct.read().status;
    });
    report = region.Join();
  }
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(report, "");
  EXPECT_GE(s, 2.5);  // the stalls really happened (they may overlap)
  ASSERT_EQ(done.status, nearprep_fpga::kStatusOk);
  EXPECT_EQ(huff_verdict, nearprep_fpga::kStatusOk);
  EXPECT_EQ(idct_verdict, nearprep_fpga::kStatusOk);
  EXPECT_EQ(FirstDiff(got, plain.rgb), -1);
}

TEST(FpgaKernelDecodeTest, MatchesLibjpegOnRealImages) {
  std::vector<std::string> files = fpga_test::RealImages();
  if (files.empty()) GTEST_SKIP() << "../shared/datasets/imagenet-sample-200 is absent";
#ifdef NEARPREP_FPGA_TEST_SUBSET
  if (files.size() > NEARPREP_FPGA_TEST_SUBSET) files.resize(NEARPREP_FPGA_TEST_SUBSET);
#else
  EXPECT_EQ(files.size(), 200u);
#endif
  int identical = 0, unsupported = 0;
  uint64_t entropy = 0, idct = 0, color = 0, pixels = 0;
  for (const std::string& f : files) {
    const std::vector<uint8_t> jpeg = fpga_test::ReadFile(f);
    const fpga_test::RefImage ref = ReferenceDecode(jpeg);
    const KernelDecode k = RunKernelDecode(jpeg);
    if (k.status == nearprep_fpga::kStatusUnsupported) {
      // Only inputs outside the kernel's scope may be refused.
      EXPECT_TRUE(ref.progressive || ref.arithmetic) << f;
      ++unsupported;
      continue;
    }
    ASSERT_TRUE(ref.ok) << f;
    ASSERT_EQ(k.status, nearprep_fpga::kStatusOk) << f;
    ASSERT_EQ(k.height, ref.height) << f;
    ASSERT_EQ(k.width, ref.width) << f;
    const long d = FirstDiff(k.rgb, ref.rgb);
    EXPECT_EQ(d, -1) << f << " first diff at byte " << d;
    identical += d == -1;
    entropy += k.cycles.entropy;
    idct += k.cycles.idct;
    color += k.cycles.color;
    pixels += static_cast<uint64_t>(k.width) * k.height;
  }
  std::printf(
      "real images: %d identical, %d unsupported; modelled cycles/image: entropy %.0f, "
      "idct %.0f, color %.0f; mean pixels %.0f\n",
      identical, unsupported, identical ? 1.0 * entropy / identical : 0.0,
      identical ? 1.0 * idct / identical : 0.0, identical ? 1.0 * color / identical : 0.0,
      identical ? 1.0 * pixels / identical : 0.0);
  EXPECT_EQ(identical + unsupported, static_cast<int>(files.size()));
}

}  // namespace
}  // namespace nearprep
