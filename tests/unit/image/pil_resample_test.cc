// PilResizer: the AVX2 passes give the scalar passes' bytes (same integer
// arithmetic per lane), for down- and upscaling, windows at every border,
// regions offset inside a larger buffer and regions that end exactly at
// the end of their buffer (the AVX2 horizontal pass must not read past it).
// The scalar path itself is checked against PIL by torchvision_oracle_test.
#include "server/image/pil_resample.h"

#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "server/image/preprocess_kernels.h"

namespace nearprep {
namespace {

struct Case {
  int in_h, in_w, out_h, out_w;
};

std::vector<uint8_t> ResizeWindow(const std::vector<uint8_t>& img, int in_h,
                                  int in_w, int out_h, int out_w,
                                  const CropBox& win, internal::KernelLevel l) {
  internal::SetKernelLevelForTesting(l);
  const CropBox need = PilResizeSourceRegion(in_h, in_w, out_h, out_w, win);
  // Copy the region into a buffer of exactly its size (heap end right
  // after its last pixel).
  std::vector<uint8_t> region(static_cast<size_t>(need.height) * need.width * 3);
  for (int y = 0; y < need.height; ++y) {
    std::copy_n(&img[(static_cast<size_t>(need.y + y) * in_w + need.x) * 3],
                static_cast<size_t>(need.width) * 3,
                &region[static_cast<size_t>(y) * need.width * 3]);
  }
  RgbRegion src;
  src.data = region.data();
  src.stride = static_cast<size_t>(need.width) * 3;
  src.y0 = need.y;
  src.x0 = need.x;
  src.height = need.height;
  src.width = need.width;
  std::vector<uint8_t> out;
  PilResizer resizer;
  resizer.Resize(src, in_h, in_w, out_h, out_w, win,
                 [&](int, const uint8_t* rgb) {
                   out.insert(out.end(), rgb, rgb + win.width * 3);
                 });
  internal::SetKernelLevelForTesting(internal::KernelLevel::kAuto);
  return out;
}

TEST(PilResizerTest, Avx2EqualsScalar) {
  if (!internal::HaveAvx2Kernels()) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(7);
  const std::vector<Case> cases = {
      {375, 500, 224, 224}, {500, 375, 224, 224}, {97, 131, 224, 224},
      {1, 1, 5, 7},         {2, 3, 17, 40},       {16, 1, 3, 2},
      {300, 41, 31, 29},    {33, 1000, 8, 333},   {256, 341, 256, 341},
      {7, 9, 7, 9},         {1000, 17, 13, 16},   {60, 60, 59, 61}};
  int compared = 0;
  for (const Case& c : cases) {
    std::vector<uint8_t> img(static_cast<size_t>(c.in_h) * c.in_w * 3);
    // Extremes included: saturation of the clamp paths.
    for (auto& v : img) {
      const int r = static_cast<int>(rng() % 10);
      v = r == 0 ? 0 : r == 1 ? 255 : static_cast<uint8_t>(rng());
    }
    std::vector<CropBox> wins = {{0, 0, c.out_h, c.out_w}};
    if (c.out_h > 2 && c.out_w > 2) {
      wins.push_back({1, 1, c.out_h - 2, c.out_w - 2});
      wins.push_back({c.out_h - 1, c.out_w - 1, 1, 1});
      wins.push_back({0, c.out_w / 2, c.out_h / 2, c.out_w - c.out_w / 2});
    }
    for (const CropBox& win : wins) {
      SCOPED_TRACE(testing::Message()
                   << c.in_h << "x" << c.in_w << " -> " << c.out_h << "x"
                   << c.out_w << " window " << win.y << "," << win.x << ","
                   << win.height << "x" << win.width);
      const auto scalar = ResizeWindow(img, c.in_h, c.in_w, c.out_h, c.out_w,
                                       win, internal::KernelLevel::kScalar);
      const auto avx2 = ResizeWindow(img, c.in_h, c.in_w, c.out_h, c.out_w,
                                     win, internal::KernelLevel::kAuto);
      ASSERT_EQ(scalar.size(),
                static_cast<size_t>(win.height) * win.width * 3);
      EXPECT_EQ(scalar, avx2);
      ++compared;
    }
  }
  EXPECT_GT(compared, 30);
}

TEST(PilResizerTest, IdentityResizeCopies) {
  // scale 1: one tap of weight 2^22 per output: the bytes themselves, on
  // both paths (a check that does not depend on the other path).
  std::vector<uint8_t> img(13 * 29 * 3);
  for (size_t i = 0; i < img.size(); ++i) img[i] = static_cast<uint8_t>(i * 7);
  for (auto l : {internal::KernelLevel::kScalar, internal::KernelLevel::kAuto}) {
    EXPECT_EQ(ResizeWindow(img, 13, 29, 13, 29, CropBox{0, 0, 13, 29}, l), img);
  }
}

}  // namespace
}  // namespace nearprep
