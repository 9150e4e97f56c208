// Each TensorFlow op against hand-computed values and edge cases.
#include "server/image/tf_ops.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "server/image/tf_ops_internal.h"

namespace nearprep {
namespace {

std::vector<float> Gray3(const std::vector<float>& v) {
  std::vector<float> out;
  for (float x : v) out.insert(out.end(), {x, x, x});
  return out;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(ConvertU8ToFloatTest, MultipliesByReciprocalNotDivides) {
  std::vector<uint8_t> in(256);
  for (int i = 0; i < 256; ++i) in[i] = uint8_t(i);
  std::vector<float> out(256);
  ConvertU8ToFloat(in.data(), in.size(), out.data());
  int differ_from_division = 0;
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(Bits(out[i]), Bits(float(i) * (1.0f / 255.0f))) << i;
    if (out[i] != float(i) / 255.0f) ++differ_from_division;
    EXPECT_EQ(Bits(internal::U8ToFloatTable()[i]), Bits(out[i]));
  }
  EXPECT_EQ(out[0], 0.0f);
  // The figure: 126 of the 256 codes differ from a division.
  EXPECT_EQ(differ_from_division, 126);
}

TEST(ResizeBilinearTest, UpscalesOneRowWithHalfPixelCenters) {
  // 1x2 [0, 1] -> 1x4: src = (i+0.5)*0.5-0.5 = -0.25, 0.25, 0.75, 1.25.
  const std::vector<float> in = Gray3({0.0f, 1.0f});
  std::vector<float> out(12);
  ResizeBilinear(in.data(), 1, 2, CropBox{0, 0, 1, 2}, out.data(), 1, 4);
  const float want[4] = {0.0f, 0.25f, 0.75f, 1.0f};
  for (int x = 0; x < 4; ++x) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(out[x * 3 + c], want[x]) << x;
  }
}

TEST(ResizeBilinearTest, Upscales2x2To4x4) {
  const std::vector<float> in = Gray3({0, 1, 2, 3});
  std::vector<float> out(48);
  ResizeBilinear(in.data(), 2, 2, CropBox{0, 0, 2, 2}, out.data(), 4, 4);
  // Taps per axis: (0,0,.75) (0,1,.25) (0,1,.75) (1,1,.25).
  const float want[4][4] = {{0, 0.25f, 0.75f, 1},
                            {0.5f, 0.75f, 1.25f, 1.5f},
                            {1.5f, 1.75f, 2.25f, 2.5f},
                            {2, 2.25f, 2.75f, 3}};
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 4; ++x) EXPECT_EQ(out[(y * 4 + x) * 3], want[y][x]);
  }
}

TEST(ResizeBilinearTest, DownscalesByTwo) {
  const std::vector<float> in = Gray3({0, 1, 2, 3});
  std::vector<float> out(6);
  ResizeBilinear(in.data(), 1, 4, CropBox{0, 0, 1, 4}, out.data(), 1, 2);
  EXPECT_EQ(out[0], 0.5f);
  EXPECT_EQ(out[3], 2.5f);
}

TEST(ResizeBilinearTest, EqualSizeCropIsACopy) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-2, 2);
  const int h = 7, w = 9;
  std::vector<float> in(h * w * 3);
  for (float& v : in) v = u(rng);
  const CropBox crop{2, 3, 4, 5};
  std::vector<float> out(4 * 5 * 3);
  ResizeBilinear(in.data(), h, w, crop, out.data(), 4, 5);
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 15; ++x) {
      EXPECT_EQ(Bits(out[y * 15 + x]), Bits(in[(y + 2) * w * 3 + 9 + x]));
    }
  }
}

TEST(ResizeBilinearTest, OneByNImagesStayFinite) {
  const std::vector<float> in = Gray3({0.1f, 0.9f, 0.3f, 0.7f, 0.5f});
  // 1x5 -> 3x2: every output row equals the horizontal interpolation.
  std::vector<float> out(3 * 2 * 3);
  ResizeBilinear(in.data(), 1, 5, CropBox{0, 0, 1, 5}, out.data(), 3, 2);
  // x: scale 2.5; src0 = 0.75 -> (0,1,.75); src1 = 3.25 -> (3,4,.25).
  const float x0 = 0.1f + (0.9f - 0.1f) * 0.75f;
  const float x1 = 0.7f + (0.5f - 0.7f) * 0.25f;
  for (int y = 0; y < 3; ++y) {
    EXPECT_EQ(out[y * 6 + 0], x0);
    EXPECT_EQ(out[y * 6 + 3], x1);
  }
  // Nx1 -> 1x1.
  std::vector<float> one(3);
  ResizeBilinear(in.data(), 5, 1, CropBox{0, 0, 5, 1}, one.data(), 1, 1);
  EXPECT_EQ(one[0], in[6]);  // src = 0.5*5-0.5 = 2.0 exactly.
}

TEST(ResizeBilinearTest, U8VariantEqualsConvertThenResize) {
  std::mt19937 rng(7);
  const int sizes[][4] = {{31, 17, 224, 224}, {300, 200, 224, 224},
                          {5, 3, 5, 3},       {1, 9, 4, 2},
                          {64, 64, 13, 200},  {2, 2, 1, 1}};
  for (const auto& s : sizes) {
    const int h = s[0], w = s[1], oh = s[2], ow = s[3];
    std::vector<uint8_t> in(h * w * 3);
    for (auto& v : in) v = uint8_t(rng());
    std::vector<float> f(in.size());
    ConvertU8ToFloat(in.data(), in.size(), f.data());
    CropBox crop{h / 4, w / 5, h - h / 4, w - w / 5};
    std::vector<float> a(oh * ow * 3), b(oh * ow * 3);
    ResizeBilinear(f.data(), h, w, crop, a.data(), oh, ow);
    ResizeBilinearU8(in.data(), h, w, crop, b.data(), oh, ow);
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << h << "x" << w;
  }
}

TEST(FlipLeftRightTest, ReversesPixelsNotChannels) {
  std::vector<float> img = {1, 2, 3, 4, 5, 6, 7, 8, 9,
                            10, 11, 12, 13, 14, 15, 16, 17, 18};
  FlipLeftRight(img.data(), 2, 3);
  const std::vector<float> want = {7, 8, 9, 4, 5, 6, 1, 2, 3,
                                   16, 17, 18, 13, 14, 15, 10, 11, 12};
  EXPECT_EQ(img, want);
}

TEST(AdjustBrightnessTest, AddsWithoutClipping) {
  std::vector<float> v = {0.9f, 0.1f, 0.5f};
  AdjustBrightness(v.data(), 3, 0.2f);
  EXPECT_EQ(v[0], 0.9f + 0.2f);
  EXPECT_GT(v[0], 1.0f);
  AdjustBrightness(v.data(), 3, -0.5f);
  EXPECT_LT(v[1], 0.0f);
  EXPECT_EQ(v[1], (0.1f + 0.2f) + -0.5f);
}

TEST(AdjustSaturationTest, GrayPixelUnchanged) {
  std::vector<float> p = {0.5f, 0.5f, 0.5f};
  AdjustSaturation(p.data(), 1, 3.0f);
  EXPECT_EQ(p, (std::vector<float>{0.5f, 0.5f, 0.5f}));
}

TEST(AdjustSaturationTest, HalvesSaturationOfOrange) {
  // v=1, s=1, h=1/12 -> s'=.5, c=.5, m=.5, dh=.5, x=.25 -> (1, .75, .5).
  std::vector<float> p = {1.0f, 0.5f, 0.0f};
  AdjustSaturation(p.data(), 1, 0.5f);
  EXPECT_EQ(p, (std::vector<float>{1.0f, 0.75f, 0.5f}));
  std::vector<float> q = {1.0f, 0.5f, 0.0f};
  AdjustSaturation(q.data(), 1, 0.0f);
  EXPECT_EQ(q, (std::vector<float>{1.0f, 1.0f, 1.0f}));
}

TEST(AdjustSaturationTest, HueRoundingToOneGivesGrey) {
  // r is the max and b exceeds g by 1e-7: h = -1e-7/6 + 1 rounds to 1.0f,
  // so dh = 6 falls in the default sextant and the pixel becomes (m, m, m).
  std::vector<float> p = {1.0f, 0.0f, 1e-7f};
  AdjustSaturation(p.data(), 1, 0.5f);
  EXPECT_EQ(p, (std::vector<float>{0.5f, 0.5f, 0.5f}));
  float h, s, v;
  internal::RgbToHsv(1.0f, 0.0f, 1e-7f, &h, &s, &v);
  EXPECT_EQ(h, 1.0f);
}

TEST(AdjustSaturationTest, ValuesOutsideUnitRange) {
  // Above 1 and below 0 after brightness: s = 1.3/1.2 > 1 is clamped.
  std::vector<float> p = {1.2f, 0.5f, -0.1f};
  AdjustSaturation(p.data(), 1, 1.0f);
  EXPECT_FLOAT_EQ(p[0], 1.2f);
  EXPECT_NEAR(p[1], 1.2 * (0.6 / 7.8 * 6), 1e-6);
  EXPECT_EQ(p[2], 0.0f);
  // v <= 0: s = 0 and every channel becomes v.
  std::vector<float> n = {-0.2f, -0.3f, -0.5f};
  AdjustSaturation(n.data(), 1, 2.0f);
  EXPECT_EQ(n, (std::vector<float>{-0.2f, -0.2f, -0.2f}));
}

TEST(AdjustSaturationTest, HueConstantsAreAddedInDouble) {
  // Find pixels where float and double addition of 2/6 round differently
  // and check the kernel took the double route.
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> u(0, 255);
  int checked = 0;
  for (int i = 0; i < 200000 && checked < 20; ++i) {
    const float r = u(rng) / 255.0f, b = u(rng) / 255.0f;
    const float g = std::max(r, b) + 0.1f;  // g is the max.
    const float range = g - std::min(r, b);
    const float t = (1.0f / (6.0f * range)) * (b - r);
    const float via_double = float(double(t) + 2.0 / 6.0);
    const float via_float = t + float(2.0 / 6.0);
    if (via_double == via_float) continue;
    float h, s, v;
    internal::RgbToHsv(r, g, b, &h, &s, &v);
    EXPECT_EQ(Bits(h), Bits(via_double < 0 ? via_double + 1 : via_double));
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(AdjustContrastTest, ScalesAroundTheChannelMean) {
  // 2 pixels: means 0.5, 0.25, 0 (sums 1, 0.5, 0 times float(1/2)).
  std::vector<float> img = {0.25f, 0.0f, 0.0f, 0.75f, 0.5f, 0.0f};
  AdjustContrast(img.data(), 1, 2, 2.0f);
  const std::vector<float> want = {0.0f, -0.25f, 0.0f, 1.0f, 0.75f, 0.0f};
  EXPECT_EQ(img, want);
}

// The mean is the kernel's halving fold, not a running sum: on values where
// the two orders round differently, the fold's mean is the one used.
TEST(AdjustContrastTest, MeanIsTheHalvingFold) {
  const int n = 7;  // Odd counts carry the middle pixel over.
  std::vector<float> img(n * 3);
  const float v[n] = {1.0f, 4e-8f, 4e-8f, 4e-8f, 4e-8f, 4e-8f, 4e-8f};
  for (int i = 0; i < n; ++i) img[i * 3] = img[i * 3 + 1] = img[i * 3 + 2] = v[i];
  // Fold: n=7 -> right 3, left 4: s = {v4+v0, v5+v1, v6+v2, v3};
  // n=4 -> {s0+s2, s1+s3}; n=2 -> {s0+s1}.
  float s[4] = {v[4] + v[0], v[5] + v[1], v[6] + v[2], v[3]};
  s[0] = s[0] + s[2];
  s[1] = s[1] + s[3];
  s[0] = s[0] + s[1];
  const float mean = s[0] * (1.0f / 7.0f);
  float running = 0;
  for (float x : v) running = running + x;
  ASSERT_NE(running * (1.0f / 7.0f), mean) << "values do not tell the orders apart";
  std::vector<float> out = img;
  AdjustContrast(out.data(), 1, n, 0.0f);  // factor 0: every value is the mean
  for (float x : out) EXPECT_EQ(x, mean);
}

TEST(AdjustContrastTest, OnePixelAndFactorOne) {
  std::vector<float> one = {0.1f, 0.2f, 0.3f};
  AdjustContrast(one.data(), 1, 1, 5.0f);
  EXPECT_EQ(one, (std::vector<float>{0.1f, 0.2f, 0.3f}));
}

TEST(AdjustHueTest, RotatesPrimaries) {
  // delta 1/3 of the wheel: red -> green -> blue -> red.
  std::vector<float> img = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  AdjustHue(img.data(), 3, 1.0f / 3.0f);
  EXPECT_EQ(img, (std::vector<float>{0, 1, 0, 0, 0, 1, 1, 0, 0}));
  // Grey stays grey; negative deltas wrap.
  std::vector<float> grey = {0.4f, 0.4f, 0.4f};
  AdjustHue(grey.data(), 1, -0.45f);
  EXPECT_EQ(grey, (std::vector<float>{0.4f, 0.4f, 0.4f}));
}

TEST(AdjustHueTest, HandComputedPixel) {
  // (1, 0.5, 0): sextant 0, ratio 0.5, hue 0.5; + 0.25 * 6 = 2.0: sextant 2
  // with ratio 0: (min, max, min + 0 * range) = (0, 1, 0).
  std::vector<float> p = {1.0f, 0.5f, 0.0f};
  AdjustHue(p.data(), 1, 0.25f);
  EXPECT_EQ(p, (std::vector<float>{0.0f, 1.0f, 0.0f}));
  // hue 0.5 - 0.1 * 6 = -0.1 -> 5.9: sextant 5 (odd), ratio 1 - 0.9.
  std::vector<float> q = {1.0f, 0.5f, 0.0f};
  AdjustHue(q.data(), 1, -0.1f);
  float h = 0.5f + (-0.1f) * 6.0f;
  h = h + 6.0f;
  const float t = 1 - (h - 5.0f);
  EXPECT_EQ(q, (std::vector<float>{1.0f, 0.0f, 0.0f + t * 1.0f}));
}

TEST(TfPowFloatTest, ExactCasesAndSpecialValues) {
  EXPECT_EQ(TfPowFloat(0.25f, 0.5f), 0.5f);
  EXPECT_EQ(TfPowFloat(0.5f, 2.0f), 0.25f);
  EXPECT_EQ(TfPowFloat(1.0f, 7.3f), 1.0f);
  EXPECT_EQ(TfPowFloat(0.3f, 1.0f), 0.3f);
  EXPECT_EQ(TfPowFloat(0.0f, 2.2f), 0.0f);
  EXPECT_EQ(TfPowFloat(0.7f, 0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(TfPowFloat(-0.5f, 0.5f)));
  EXPECT_EQ(TfPowFloat(-0.5f, 2.0f), 0.25f);
  EXPECT_EQ(TfPowFloat(-0.5f, 3.0f), -0.125f);
  EXPECT_EQ(TfPowFloat(std::numeric_limits<float>::infinity(), 0.5f),
            std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(TfPowFloat(std::nanf(""), 0.5f)));
}

// Known answers: tf.pow(x, gamma) of TensorFlow 2.21 (x86 wheel) on an
// 8-element float32 tensor (its packet path), recorded as bit patterns.
// Several of them are not the correctly rounded power.
TEST(TfPowFloatTest, EqualsTensorFlowKnownAnswers) {
  const uint32_t x[8] = {0x3b808081, 0x3dcccccd, 0x3e800000, 0x3eaaaaab,
                         0x3f000000, 0x3f3b26a8, 0x3f666666, 0x3f99999a};
  const uint32_t pow08[8] = {0x3c429ec2, 0x3e224b06, 0x3ea8e5a3, 0x3ed49ad1,
                             0x3f13088c, 0x3f474066, 0x3f6b4e78, 0x3f941998};
  const uint32_t pow22[8] = {0x36aa5b8a, 0x3bcec089, 0x3d4202ff, 0x3db6ab16,
                             0x3e5edc67, 0x3f008265, 0x3f4b0944, 0x3fbf2a49};
  int not_correctly_rounded = 0;
  for (int i = 0; i < 8; ++i) {
    float xf;
    std::memcpy(&xf, &x[i], 4);
    EXPECT_EQ(Bits(TfPowFloat(xf, 0.8f)), pow08[i]) << xf;
    EXPECT_EQ(Bits(TfPowFloat(xf, 2.2f)), pow22[i]) << xf;
    not_correctly_rounded +=
        Bits(static_cast<float>(std::pow(double(xf), double(0.8f)))) != pow08[i];
    not_correctly_rounded +=
        Bits(static_cast<float>(std::pow(double(xf), double(2.2f)))) != pow22[i];
  }
  EXPECT_EQ(not_correctly_rounded, 4);
}

// adjust_gamma: the packet path for all but the last n % 8 values, the C
// library's powf for those (TensorFlow's scalar tail).
TEST(AdjustGammaTest, ScalarTailUsesPowf) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (size_t n : {size_t{8}, size_t{13}, size_t{3}, size_t{45}}) {
    std::vector<float> img(n);
    for (float& v : img) v = u(rng);
    std::vector<float> out = img;
    AdjustGamma(out.data(), n, 0.8f, 1.5f);
    for (size_t i = 0; i < n; ++i) {
      const float p = i < n - n % 8 ? TfPowFloat(img[i], 0.8f)
                                    : std::pow(img[i], 0.8f);
      EXPECT_EQ(Bits(out[i]), Bits(1.5f * p)) << n << " " << i;
    }
  }
}

// The 4-lane path AdjustGamma takes equals TfPowFloat value for value,
// special values (0, 1, subnormal, negative, inf, NaN) included.
TEST(AdjustGammaTest, VectorLanesEqualTfPowFloat) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.0f, 1.3f);
  for (float g : {0.3f, 0.5f, 0.8f, 1.7f, 2.2f, 7.5f}) {
    std::vector<float> x(20000);
    for (float& v : x) v = u(rng);
    const float specials[] = {0.0f, 1.0f, 1e-40f, -0.5f,
                              std::numeric_limits<float>::infinity(),
                              std::nanf(""), -0.0f, 1e-38f, -2.0f};
    for (size_t k = 0; k < sizeof(specials) / sizeof(specials[0]); ++k) {
      x[k * 13 + 1] = specials[k];
    }
    std::vector<float> got = x;
    AdjustGamma(got.data(), got.size(), g, 1.0f);
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = TfPowFloat(x[i], g);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got[i])) << x[i];
      } else {
        ASSERT_EQ(Bits(got[i]), Bits(want)) << x[i] << " ** " << g;
      }
    }
  }
}

// Eigen's pow is within a few units in the last place of the correctly
// rounded result (the double pow rounded to float, for these inputs).
TEST(TfPowFloatTest, WithinOneUlpOfCorrectlyRounded) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.0f, 2.0f);
  int off = 0;
  for (float y : {0.3f, 0.8f, 1.2f, 2.2f, 3.0f, 7.5f}) {
    for (int i = 0; i < 20000; ++i) {
      const float x = u(rng);
      const float got = TfPowFloat(x, y);
      const float want = static_cast<float>(std::pow(double(x), double(y)));
      int32_t a, b;
      std::memcpy(&a, &got, 4);
      std::memcpy(&b, &want, 4);
      ASSERT_LE(std::abs(a - b), 3) << x << " ** " << y;
      off += a != b;
    }
  }
  // Not the correctly rounded pow: about a quarter of the values differ.
  EXPECT_GT(off, 6 * 20000 / 10);
}

TEST(ClipByValueTest, ClampsBothSides) {
  std::vector<float> v = {-0.5f, 0.3f, 1.7f, 1.0f, 0.0f};
  ClipByValue(v.data(), v.size(), 0.0f, 1.0f);
  EXPECT_EQ(v, (std::vector<float>{0.0f, 0.3f, 1.0f, 1.0f, 0.0f}));
}

TEST(NormalizeTest, SubtractsMeanDividesByStd) {
  std::vector<float> v = {0.5f, 0.5f, 0.5f};
  const float mean[3] = {0.25f, 0.5f, 0.75f}, sd[3] = {0.5f, 2.0f, 0.25f};
  Normalize(v.data(), 1, mean, sd);
  EXPECT_EQ(v, (std::vector<float>{0.5f, 0.0f, -1.0f}));
}

TEST(PackOutputTest, HalfRoundsToNearestEven) {
  using internal::FloatToHalf;
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // Rounds up to infinity.
  EXPECT_EQ(FloatToHalf(1e-8f), 0x0000);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);       // Tie to even.
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);       // Tie to even.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // Tie.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3C02);  // Tie.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7C00);
  const uint16_t nan = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t HardwareHalf(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, 0));  // 0 = round to nearest.
}

TEST(PackOutputTest, HalfMatchesF16cOnRandomBits) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C on this CPU";
  std::mt19937 rng(11);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t b = rng();
    // Focus half the draws on the representable range.
    if (i & 1) b = (b & 0x807FFFFFu) | ((100u + (b >> 24) % 50u) << 23);
    float f;
    std::memcpy(&f, &b, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(internal::FloatToHalf(f), HardwareHalf(f)) << std::hex << b;
  }
}
#endif

TEST(PackOutputTest, BFloat16RoundsToNearestEven) {
  using internal::FloatToBFloat16;
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBFloat16(1.00390625f), 0x3F80);  // 1 + 2^-8: tie, even.
  EXPECT_EQ(FloatToBFloat16(1.01171875f), 0x3F82);  // 1 + 3*2^-8: tie, even.
  EXPECT_EQ(FloatToBFloat16(1.005f), 0x3F81);
  EXPECT_EQ(FloatToBFloat16(-3.0f), 0xC040);
  const uint16_t nan = FloatToBFloat16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7F80, 0x7F80);
  EXPECT_NE(nan & 0x007F, 0);
}

TEST(PackOutputTest, Uint8RoundsHalfAwayAfterClip) {
  using internal::FloatToU8;
  EXPECT_EQ(FloatToU8(0.5f), 128);  // 127.5 -> 128.
  EXPECT_EQ(FloatToU8(0.2f), 51);
  EXPECT_EQ(FloatToU8(-1.0f), 0);
  EXPECT_EQ(FloatToU8(2.0f), 255);
  EXPECT_EQ(FloatToU8(1.0f), 255);
  EXPECT_EQ(FloatToU8(std::numeric_limits<float>::quiet_NaN()), 0);
  // Just below a half: must not round up (x + 0.5 would).
  const float below = std::nextafter(0.5f, 0.0f) / 255.0f;
  EXPECT_EQ(FloatToU8(below), uint8_t(std::round(below * 255.0f)));
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(FloatToU8(float(i) * (1.0f / 255.0f)), i);
  }
}

TEST(PackOutputTest, LayoutsAndDtypes) {
  // 1x2 image: pixels (0.25, 0.5, 1.0) and (0, 2, -1).
  const std::vector<float> img = {0.25f, 0.5f, 1.0f, 0.0f, 2.0f, -1.0f};
  std::vector<uint8_t> out(24);
  PackOutput(img.data(), 1, 2, DType::kFloat32, Layout::kNCHW, out.data());
  std::vector<float> f(6);
  std::memcpy(f.data(), out.data(), 24);
  EXPECT_EQ(f, (std::vector<float>{0.25f, 0.0f, 0.5f, 2.0f, 1.0f, -1.0f}));
  PackOutput(img.data(), 1, 2, DType::kUint8, Layout::kNHWC, out.data());
  EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.begin() + 6),
            (std::vector<uint8_t>{64, 128, 255, 0, 255, 0}));
  PackOutput(img.data(), 1, 2, DType::kFloat16, Layout::kNCHW, out.data());
  uint16_t h[6];
  std::memcpy(h, out.data(), 12);
  EXPECT_EQ(h[0], 0x3400);  // 0.25
  EXPECT_EQ(h[3], 0x4000);  // 2.0
  EXPECT_EQ(h[5], 0xBC00);  // -1.0
  PackOutput(img.data(), 1, 2, DType::kBFloat16, Layout::kNHWC, out.data());
  std::memcpy(h, out.data(), 12);
  EXPECT_EQ(h[1], 0x3F00);  // 0.5
  EXPECT_EQ(h[4], 0x4000);  // 2.0
}

}  // namespace
}  // namespace nearprep
