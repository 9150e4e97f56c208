// Damaged and hostile JPEGs on the cropped decode paths: TF_COMPAT with a
// crop must give exactly the full decode's crop (TensorFlow decodes in full)
// and the full decode's errors; FAST must not fail where the full decode
// succeeds; an oversized header is a limit error; nothing carries over from
// one image to the next in the per-thread decompressor.
// Fuzz findings 3-5 of docs/fuzzing.md ("Known findings").
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "server/spec/types.h"
#include "server/image/jpeg_decoder.h"
#include "server/image/jpeg_session.h"
#include "server/image/preprocess.h"
#include "tests/unit/image/test_util.h"

namespace nearprep {
namespace {

using testutil::HaveTool;
using testutil::ReadFile;
using testutil::RunCommand;
using Bytes = std::vector<uint8_t>;

const char kFuzzRegression[] =
    NEARPREP_SOURCE_DIR
    "/tests/fuzz/regressions/jpeg_decode/fast-fails-where-tfcompat-decodes.jpg.bin";

// PreprocessJpeg with a fixed crop (float32 NHWC, clip, no colour ops).
absl::Status Preprocess(const Bytes& d, Fidelity fidelity, const CropBox& crop,
                        int out_h, int out_w, Bytes* out) {
  TransformSpec spec;
  spec.height = out_h;
  spec.width = out_w;
  spec.crop = CropMode::kRandomResized;
  spec.fidelity = fidelity;
  OutputSpec output;
  out->assign(output.SampleBytes(spec), 0);
  const ParamsFn draw = [&](int h, int w) {
    SampleParams p;
    p.source_height = h;
    p.source_width = w;
    p.crop = crop;
    return p;
  };
  SampleParams used;
  return PreprocessJpeg(d.data(), d.size(), spec, output, DecodeLimits(), draw,
                        &used, out->data(), nullptr);
}

// What TensorFlow gives: the full decode, then the same transform.
Bytes Reference(const RgbImage& img, const CropBox& crop, int out_h,
                int out_w) {
  TransformSpec spec;
  spec.height = out_h;
  spec.width = out_w;
  spec.crop = CropMode::kRandomResized;
  OutputSpec output;
  SampleParams p;
  p.source_height = img.height;
  p.source_width = img.width;
  p.crop = crop;
  Bytes out(output.SampleBytes(spec));
  TransformDecoded(img.pixels.data(), img.height, img.width, spec, output, p,
                   out.data());
  return out;
}

// Every crop of a grid (including the whole image and 1-pixel ones).
std::vector<CropBox> Crops(int h, int w) {
  std::vector<CropBox> crops = {{0, 0, h, w}, {0, 0, 1, 1}, {h - 1, w - 1, 1, 1}};
  std::mt19937 rng(5);
  for (int k = 0; k < 40; ++k) {
    const int ch = 1 + int(rng() % h), cw = 1 + int(rng() % w);
    crops.push_back(
        CropBox{int(rng() % (h - ch + 1)), int(rng() % (w - cw + 1)), ch, cw});
  }
  return crops;
}

// Finding 3: a crop made the decode fail where the full decode works. The
// stream defines DC table 1 only after its scan (a table that is bogus as a
// DC table); a fresh decompressor uses libjpeg's standard table for the scan,
// but a reused one used the previous decode's late table ("Bogus Huffman
// table definition"). Decoding it repeatedly in one thread, as here, is what
// failed; each call must behave as the first.
TEST(JpegDamageTest, CropDecodesWhereFullDecodeDoes) {
  const Bytes d = ReadFile(kFuzzRegression);
  ASSERT_FALSE(d.empty()) << kFuzzRegression;
  auto full = DecodeJpegTfCompat(d.data(), d.size(), DecodeLimits());
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_EQ(full->height, 40);
  ASSERT_EQ(full->width, 64);
  int checked = 0;
  for (const CropBox& c : Crops(full->height, full->width)) {
    SCOPED_TRACE(std::to_string(c.y) + "," + std::to_string(c.x) + " " +
                 std::to_string(c.height) + "x" + std::to_string(c.width));
    Bytes tf;
    ASSERT_TRUE(Preprocess(d, Fidelity::kTfCompat, c, 13, 17, &tf).ok());
    EXPECT_TRUE(tf == Reference(*full, c, 13, 17));
    Bytes fast;
    EXPECT_TRUE(Preprocess(d, Fidelity::kFast, c, 13, 17, &fast).ok());
    CropBox scaled;
    auto region =
        DecodeJpegFast(d.data(), d.size(), DecodeLimits(), c, 3, 4, &scaled);
    ASSERT_TRUE(region.ok()) << region.status();
    ASSERT_GE(scaled.y, 0);
    ASSERT_GE(scaled.x, 0);
    ASSERT_LE(scaled.y + scaled.height, region->height);
    ASSERT_LE(scaled.x + scaled.width, region->width);
    ASSERT_EQ(region->pixels.size(), size_t(region->height) * region->width * 3);
    ++checked;
  }
  EXPECT_EQ(checked, 43);
}

// Markers of a JPEG: offsets of every 0xFFDA (SOS) marker.
std::vector<size_t> SosOffsets(const Bytes& d) {
  std::vector<size_t> at;
  size_t i = 2;
  while (i + 4 <= d.size()) {
    if (d[i] != 0xFF) {
      ++i;
      continue;
    }
    const uint8_t m = d[i + 1];
    if (m == 0xD9) break;
    if (m == 0x00 || m == 0xFF || (m >= 0xD0 && m <= 0xD7)) {
      ++i;
      continue;
    }
    if (m == 0xDA) at.push_back(i);
    if (m == 0xDA) {
      i += 2 + ((d[i + 2] << 8) | d[i + 3]);  // Then entropy data.
      continue;
    }
    i += 2 + ((d[i + 2] << 8) | d[i + 3]);
  }
  return at;
}

class JpegDamageToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveTool("cjpeg")) GTEST_SKIP() << "cjpeg not installed (libjpeg-turbo-progs)";
    dir_ = testutil::MakeTempDir("jpegdamage");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  Bytes Encode(int w, int h, const std::string& options) {
    const std::string ppm = dir_ + "/src.ppm";
    testutil::WritePpm(ppm, w, h, testutil::DrawPicture(w, h, w * 7 + h));
    const std::string out = dir_ + "/out.jpg";
    EXPECT_EQ(0, RunCommand("cjpeg " + options + " -outfile " + out + " " + ppm));
    return ReadFile(out);
  }
  std::string dir_;
};

// Finding 4: progressive streams with missing or damaged later scans. libjpeg
// then smooths blocks whose coefficient bits are incomplete, looking at the
// neighbouring blocks, which the cropping/skipping path changes; TF_COMPAT
// must still give the full decode's crop, byte for byte.
TEST_F(JpegDamageToolTest, DamagedProgressiveCropEqualsFullDecode) {
  const Bytes good = Encode(96, 72, "-progressive -quality 90 -sample 2x2");
  const std::vector<size_t> sos = SosOffsets(good);
  ASSERT_GE(sos.size(), 6u);
  std::vector<Bytes> damaged;
  // Only the first scans (DC + first AC), then EOI: missing scans.
  for (size_t keep : {size_t{2}, size_t{3}}) {
    Bytes d(good.begin(), good.begin() + sos[keep]);
    d.insert(d.end(), {0xFF, 0xD9});
    damaged.push_back(d);
  }
  // A later scan's data cut short by a marker ("premature end of data
  // segment", a warning): the rest of the file follows the cut.
  {
    const size_t cut = sos[3] + (sos[4] - sos[3]) / 2;
    Bytes d(good.begin(), good.begin() + cut);
    d.insert(d.end(), {0xFF, 0xD9});
    damaged.push_back(d);
  }
  int diverging_raw = 0, checked = 0;
  for (size_t k = 0; k < damaged.size(); ++k) {
    const Bytes& d = damaged[k];
    auto full = DecodeJpegTfCompat(d.data(), d.size(), DecodeLimits());
    ASSERT_TRUE(full.ok()) << "variant " << k << ": " << full.status();
    for (const CropBox& c : Crops(full->height, full->width)) {
      Bytes tf;
      ASSERT_TRUE(Preprocess(d, Fidelity::kTfCompat, c, 11, 9, &tf).ok());
      ASSERT_TRUE(tf == Reference(*full, c, 11, 9))
          << "variant " << k << " crop " << c.y << "," << c.x << " "
          << c.height << "x" << c.width;
      // How the raw region decode compares (why progressive decodes in full).
      internal::JpegSession& s = internal::JpegSession::ThreadLocal();
      JpegHeader hdr;
      ASSERT_TRUE(s.ReadHeader(d.data(), d.size(), DecodeLimits(), &hdr).ok());
      Bytes buf;
      int bh = 0, bw = 0;
      CropBox at;
      if (s.DecodeCrop(c, &buf, &bh, &bw, &at).ok()) {
        for (int y = 0; y < c.height; ++y) {
          if (std::memcmp(&buf[(size_t(at.y + y) * bw + at.x) * 3],
                          &full->pixels[(size_t(c.y + y) * full->width + c.x) * 3],
                          size_t(c.width) * 3) != 0) {
            ++diverging_raw;
            break;
          }
        }
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3 * 43);
  std::printf("raw region decodes differing from the full decode: %d of %d\n",
              diverging_raw, checked);
}

// Nothing carries over between images in the per-thread decompressor: a
// stream without quantization tables fails as in a fresh decompressor
// (TensorFlow's), instead of using the previous image's tables.
TEST_F(JpegDamageToolTest, NoTablesCarryOverBetweenImages) {
  const Bytes first = Encode(32, 24, "-quality 50");
  const Bytes second = Encode(40, 32, "-quality 95");
  // Drop every DQT segment of the second image.
  Bytes no_dqt(second.begin(), second.begin() + 2);
  size_t i = 2;
  while (i + 4 <= second.size() && second[i] == 0xFF && second[i + 1] != 0xDA) {
    const size_t len = 2 + ((second[i + 2] << 8) | second[i + 3]);
    if (second[i + 1] != 0xDB) {
      no_dqt.insert(no_dqt.end(), second.begin() + i, second.begin() + i + len);
    }
    i += len;
  }
  ASSERT_LT(no_dqt.size(), second.size() - 64);  // At least one DQT dropped.
  no_dqt.insert(no_dqt.end(), second.begin() + i, second.end());

  absl::StatusCode fresh = absl::StatusCode::kOk;
  std::thread([&] {  // A new thread: a new decompressor.
    fresh = DecodeJpegTfCompat(no_dqt.data(), no_dqt.size(), DecodeLimits())
                .status()
                .code();
  }).join();
  EXPECT_EQ(fresh, absl::StatusCode::kDataLoss);
  ASSERT_TRUE(DecodeJpegTfCompat(first.data(), first.size(), DecodeLimits()).ok());
  auto after = DecodeJpegTfCompat(no_dqt.data(), no_dqt.size(), DecodeLimits());
  EXPECT_EQ(after.status().code(), fresh) << after.status();
  Bytes out;
  ASSERT_TRUE(Preprocess(first, Fidelity::kTfCompat, CropBox{2, 3, 10, 12}, 5, 5, &out).ok());
  EXPECT_EQ(Preprocess(no_dqt, Fidelity::kTfCompat, CropBox{2, 3, 10, 12}, 5, 5, &out).code(),
            fresh);
  ASSERT_TRUE(Preprocess(first, Fidelity::kFast, CropBox{2, 3, 10, 12}, 5, 5, &out).ok());
  EXPECT_EQ(Preprocess(no_dqt, Fidelity::kFast, CropBox{2, 3, 10, 12}, 5, 5, &out).code(),
            fresh);
}

// Finding 5: a header over libjpeg's own 65500-pixel cap is a limit error
// (RESOURCE_EXHAUSTED) like one over our pixel limit, on every entry point.
TEST_F(JpegDamageToolTest, HeaderOverLibjpegMaximumIsResourceExhausted) {
  Bytes d = Encode(16, 16, "");
  size_t at = 0;
  for (size_t i = 2; i + 9 < d.size(); ++i) {
    if (d[i] == 0xFF && d[i + 1] == 0xC0) {
      at = i + 5;
      break;
    }
  }
  ASSERT_GT(at, 0u);
  for (int dim : {65535, 65501}) {
    d[at] = uint8_t(dim >> 8);
    d[at + 1] = uint8_t(dim & 0xFF);
    d[at + 2] = uint8_t(dim >> 8);
    d[at + 3] = uint8_t(dim & 0xFF);
    DecodeLimits unlimited;
    unlimited.max_decoded_values = ~uint64_t{0};
    for (const DecodeLimits& limits : {DecodeLimits(), unlimited}) {
      auto hdr = ReadJpegHeader(d.data(), d.size(), limits);
      EXPECT_EQ(hdr.status().code(), absl::StatusCode::kResourceExhausted)
          << dim << ": " << hdr.status();
      auto tf = DecodeJpegTfCompat(d.data(), d.size(), limits);
      EXPECT_EQ(tf.status().code(), absl::StatusCode::kResourceExhausted);
      CropBox scaled;
      auto fast = DecodeJpegFast(d.data(), d.size(), limits,
                                 CropBox{0, 0, 16, 16}, 8, 8, &scaled);
      EXPECT_EQ(fast.status().code(), absl::StatusCode::kResourceExhausted);
    }
    Bytes out;
    EXPECT_EQ(Preprocess(d, Fidelity::kTfCompat, CropBox{0, 0, 16, 16}, 4, 4, &out).code(),
              absl::StatusCode::kResourceExhausted);
  }
  // Just under the cap is decided by our own limit alone: 65500 x 16 fits.
  d[at] = 16 >> 8;
  d[at + 1] = 16;
  d[at + 2] = uint8_t(65500 >> 8);
  d[at + 3] = uint8_t(65500 & 0xFF);
  auto hdr = ReadJpegHeader(d.data(), d.size(), DecodeLimits());
  ASSERT_TRUE(hdr.ok()) << hdr.status();
  EXPECT_EQ(hdr->width, 65500);
}

// Finding 6 (issue 12, item 4): a crop whose decode window is under 3 pixels
// wide. jpeg_crop_scanline then leaves a 2x-subsampled chroma component
// under 2 samples wide and re-initialises libjpeg's upsampler, which picks
// box ("simple") upsampling there instead of the fancy (triangle) one the
// full decode uses: other pixels. The reproducer (a damaged 47x33 4:2:0
// image found by libFuzzer) decodes without a warning; every crop up to 4
// pixels on a side (and a band of larger ones) must equal the full decode's.
const char kNarrowCropRegression[] =
    NEARPREP_SOURCE_DIR
    "/tests/fuzz/regressions/jpeg_decode/crop-decode-mismatch-47x33.jpg.bin";

// Decodes `c` of `d` through PreprocessJpeg(TF_COMPAT) at the crop's own
// size (the resize is then the identity) and compares with the full decode.
bool CropMatchesFull(const Bytes& d, const RgbImage& full, const CropBox& c) {
  const int oh = std::min(c.height, 32), ow = std::min(c.width, 32);
  Bytes tf;
  if (!Preprocess(d, Fidelity::kTfCompat, c, oh, ow, &tf).ok()) return false;
  return tf == Reference(full, c, oh, ow);
}

TEST(JpegDamageTest, NarrowCropEqualsFullDecodeOnFuzzReproducer) {
  const Bytes d = ReadFile(kNarrowCropRegression);
  ASSERT_FALSE(d.empty()) << kNarrowCropRegression;
  auto full = DecodeJpegTfCompat(d.data(), d.size(), DecodeLimits());
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_EQ(full->height, 33);
  ASSERT_EQ(full->width, 47);
  int checked = 0, differ = 0;
  std::string first;
  for (int y = 0; y < full->height; ++y) {
    for (int h = 1; y + h <= full->height; ++h) {
      for (int x = 0; x < full->width; ++x) {
        for (int w = 1; x + w <= full->width; ++w) {
          if (h > 4 && w > 4) break;
          const CropBox c{y, x, h, w};
          ++checked;
          if (!CropMatchesFull(d, *full, c)) {
            if (differ++ == 0) {
              first = std::to_string(y) + "," + std::to_string(x) + " " +
                      std::to_string(h) + "x" + std::to_string(w);
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 10000);
  EXPECT_EQ(differ, 0) << differ << " of " << checked
                       << " crops differ from the full decode; first: "
                       << first;
}

// The same property on the 200 real images: random crops, half of them at
// most 4 pixels wide, a third of them against the left or right edge.
TEST(JpegDamageTest, CropEqualsFullDecodeOnRealImages) {
  const std::vector<std::string> files = testutil::RealImages();
  if (files.empty()) GTEST_SKIP() << "../shared/datasets/imagenet-sample-200 is absent";
  std::mt19937 rng(12);
  int checked = 0, differ = 0;
  std::string first;
  for (const std::string& f : files) {
    const Bytes d = ReadFile(f);
    auto full = DecodeJpegTfCompat(d.data(), d.size(), DecodeLimits());
    ASSERT_TRUE(full.ok()) << f << ": " << full.status();
    const int H = full->height, W = full->width;
    for (int k = 0; k < 30; ++k) {
      CropBox c;
      c.width = 1 + int(rng() % (k % 2 == 0 ? std::min(W, 4) : W));
      c.height = 1 + int(rng() % (k % 3 == 0 ? std::min(H, 4) : H));
      c.y = int(rng() % (H - c.height + 1));
      c.x = k % 3 == 1 ? 0
            : k % 3 == 2 ? W - c.width
                         : int(rng() % (W - c.width + 1));
      ++checked;
      if (!CropMatchesFull(d, *full, c)) {
        if (differ++ == 0) {
          first = f + " crop " + std::to_string(c.y) + "," +
                  std::to_string(c.x) + " " + std::to_string(c.height) + "x" +
                  std::to_string(c.width);
        }
      }
    }
  }
  EXPECT_EQ(checked, 30 * static_cast<int>(files.size()));
  EXPECT_EQ(differ, 0) << differ << " of " << checked
                       << " crops differ from the full decode; first: "
                       << first;
}

}  // namespace
}  // namespace nearprep
