// Contact sheet geometry and rendering, PNG round trip, the bitmap font,
// and tensor -> RGB conversion for every dtype and layout.
#include "cli/contact_sheet.h"

#include <cstring>
#include <string>
#include <vector>

#include "cli/bitmap_font.h"
#include "cli/tensor_image.h"
#include "gtest/gtest.h"

namespace nearprep {
namespace {

RgbImage Solid(int h, int w, uint8_t r, uint8_t g, uint8_t b) {
  RgbImage im(h, w);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      im.at(y, x)[0] = r;
      im.at(y, x)[1] = g;
      im.at(y, x)[2] = b;
    }
  }
  return im;
}

TEST(SheetLayoutTest, GridCoversAllImagesWithoutOverlap) {
  for (int n : {1, 2, 5, 10, 16, 17, 64}) {
    auto l = ComputeSheetLayout(n, 32, 48);
    ASSERT_TRUE(l.ok());
    EXPECT_GE(l->columns * l->rows, n);
    EXPECT_LT((l->rows - 1) * l->columns, n);  // No empty last row.
    EXPECT_LE(std::abs(l->columns - l->rows), 1 + n / 16);
    for (int i = 0; i < n; ++i) {
      // Inside the sheet, label band included.
      EXPECT_GE(l->ImageX(i), l->margin);
      EXPECT_LE(l->ImageX(i) + l->image_width, l->width - l->margin);
      EXPECT_LE(l->LabelY(i) + l->label_height, l->height - l->margin);
      for (int j = 0; j < i; ++j) {
        const bool apart_x = l->ImageX(i) >= l->ImageX(j) + l->image_width ||
                             l->ImageX(j) >= l->ImageX(i) + l->image_width;
        const bool apart_y =
            l->ImageY(i) >= l->LabelY(j) + l->label_height ||
            l->ImageY(j) >= l->LabelY(i) + l->label_height;
        EXPECT_TRUE(apart_x || apart_y) << i << " overlaps " << j;
      }
    }
  }
}

TEST(SheetLayoutTest, ExactSizes) {
  auto l = ComputeSheetLayout(10, 32, 48, 0);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->columns, 4);
  EXPECT_EQ(l->rows, 3);
  EXPECT_EQ(l->width, 4 * (48 + l->margin) + l->margin);
  EXPECT_EQ(l->height, 3 * (32 + l->label_height + l->margin) + l->margin);
  auto fixed = ComputeSheetLayout(10, 32, 48, 5);
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->columns, 5);
  EXPECT_EQ(fixed->rows, 2);
  EXPECT_FALSE(ComputeSheetLayout(0, 32, 48).ok());
  EXPECT_FALSE(ComputeSheetLayout(4, 0, 48).ok());
  EXPECT_FALSE(ComputeSheetLayout(100000, 4096, 4096).ok());  // Too large.
}

TEST(ContactSheetTest, PlacesImagesAndLabelSwatches) {
  std::vector<RgbImage> images;
  std::vector<int64_t> labels;
  for (int i = 0; i < 7; ++i) {
    images.push_back(Solid(40, 30, static_cast<uint8_t>(30 * i), 200,
                           static_cast<uint8_t>(255 - 30 * i)));
    labels.push_back(i * 3);
  }
  auto sheet = RenderContactSheet(images, labels, {});
  ASSERT_TRUE(sheet.ok()) << sheet.status();
  auto l = ComputeSheetLayout(7, 40, 30);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(sheet->width, l->width);
  EXPECT_EQ(sheet->height, l->height);
  for (int i = 0; i < 7; ++i) {
    for (auto [dy, dx] : {std::pair{0, 0}, {39, 29}, {20, 15}}) {
      const uint8_t* p = sheet->at(l->ImageY(i) + dy, l->ImageX(i) + dx);
      EXPECT_EQ(p[0], 30 * i);
      EXPECT_EQ(p[1], 200);
      EXPECT_EQ(p[2], 255 - 30 * i);
    }
    uint8_t want[3];
    LabelColor(labels[i], want);
    const uint8_t* s = sheet->at(l->LabelY(i) + 2, l->ImageX(i) + 1);
    EXPECT_EQ(s[0], want[0]);
    EXPECT_EQ(s[1], want[1]);
    EXPECT_EQ(s[2], want[2]);
  }
  // Different labels, different colours.
  uint8_t a[3], b[3];
  LabelColor(1, a);
  LabelColor(2, b);
  EXPECT_NE(std::memcmp(a, b, 3), 0);
}

TEST(ContactSheetTest, CaptionTextIsDrawnInTheBand) {
  std::vector<RgbImage> images = {Solid(16, 112, 0, 0, 0)};
  auto with_text = RenderContactSheet(images, {5}, {"5 TENCH"});
  auto no_text = RenderContactSheet(images, {5}, {""});
  ASSERT_TRUE(with_text.ok());
  ASSERT_TRUE(no_text.ok());
  auto l = ComputeSheetLayout(1, 16, 112);
  int white = 0;
  for (int y = l->LabelY(0); y < l->LabelY(0) + l->label_height; ++y) {
    for (int x = 0; x < with_text->width; ++x) {
      const uint8_t* p = with_text->at(y, x);
      const uint8_t* q = no_text->at(y, x);
      if (p[0] == 255 && p[1] == 255 && p[2] == 255) {
        ++white;
        EXPECT_NE(q[0], 255);
      }
    }
  }
  EXPECT_GT(white, 20);
}

TEST(ContactSheetTest, RejectsMixedSizes) {
  std::vector<RgbImage> images = {Solid(4, 4, 1, 2, 3), Solid(4, 5, 1, 2, 3)};
  EXPECT_FALSE(RenderContactSheet(images, {}, {}).ok());
  EXPECT_FALSE(RenderContactSheet({}, {}, {}).ok());
}

TEST(ContactSheetTest, PngRoundTrip) {
  std::vector<RgbImage> images;
  for (int i = 0; i < 3; ++i) images.push_back(Solid(9, 11, 10, 20 * i, 30));
  auto sheet = RenderContactSheet(images, {0, 1, 2}, {});
  ASSERT_TRUE(sheet.ok());
  const std::string path = ::testing::TempDir() + "/sheet.png";
  ASSERT_TRUE(WritePng(path, *sheet).ok());
  auto back = ReadPng(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->width, sheet->width);
  EXPECT_EQ(back->height, sheet->height);
  EXPECT_EQ(back->pixels, sheet->pixels);
  EXPECT_FALSE(ReadPng(::testing::TempDir() + "/missing.png").ok());
}

TEST(BitmapFontTest, GlyphsAndWidths) {
  std::array<uint8_t, kGlyphHeight> one{}, el{}, lower{};
  ASSERT_TRUE(GlyphRows('1', &one));
  ASSERT_TRUE(GlyphRows('L', &el));
  ASSERT_TRUE(GlyphRows('l', &lower));
  EXPECT_NE(el, lower);  // Lower case has its own glyphs.
  EXPECT_NE(one, el);
  EXPECT_EQ(el[6], 0x1F);  // L's foot is a full row.
  EXPECT_FALSE(GlyphRows('\x01', &one));
  EXPECT_EQ(TextWidth("", 2), 0);
  EXPECT_EQ(TextWidth("AB", 1), 11);
  EXPECT_EQ(TextWidth("AB", 2), 22);
  // Drawing clips to the image and never writes out of bounds.
  RgbImage small(5, 5);
  const uint8_t white[3] = {255, 255, 255};
  DrawText(&small, -3, -3, "W\x01", 3, white);
  DrawText(&small, 4, 4, "8", 1, white);
  EXPECT_EQ(small.at(4, 4)[0], 0);   // '8' starts with a blank column.
}

TEST(BitmapFontTest, DrawsLowerCaseDistinctFromUpperCase) {
  // Class names ("n01440764 tench") keep their case on a contact sheet:
  // every lower-case letter has a glyph of its own, unlike its capital and
  // unlike every other lower-case letter.
  std::vector<std::array<uint8_t, kGlyphHeight>> seen;
  for (char c = 'a'; c <= 'z'; ++c) {
    std::array<uint8_t, kGlyphHeight> low{}, up{};
    ASSERT_TRUE(GlyphRows(c, &low)) << c;
    ASSERT_TRUE(GlyphRows(static_cast<char>(c - 'a' + 'A'), &up)) << c;
    EXPECT_NE(low, up) << c;
    for (const auto& other : seen) EXPECT_NE(low, other) << c;
    seen.push_back(low);
  }
  // Drawn text differs by case too.
  RgbImage a(12, 7), b(12, 7);
  const uint8_t white[3] = {255, 255, 255};
  DrawText(&a, 0, 0, "ab", 1, white);
  DrawText(&b, 0, 0, "AB", 1, white);
  EXPECT_NE(a.pixels, b.pixels);
}

TEST(TensorImageTest, Uint8LayoutsAgree) {
  // 2 images of 2x3; value = f(n, y, x, c).
  auto val = [](int n, int y, int x, int c) {
    return static_cast<uint8_t>(n * 100 + y * 30 + x * 7 + c);
  };
  v1::Tensor nhwc, nchw;
  std::string a, b;
  for (int n = 0; n < 2; ++n)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 3; ++x)
        for (int c = 0; c < 3; ++c) a.push_back(static_cast<char>(val(n, y, x, c)));
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 2; ++y)
        for (int x = 0; x < 3; ++x) b.push_back(static_cast<char>(val(n, y, x, c)));
  for (uint64_t d : {2, 2, 3, 3}) nhwc.add_shape(d);
  for (uint64_t d : {2, 3, 2, 3}) nchw.add_shape(d);
  nhwc.set_dtype(v1::DTYPE_UINT8);
  nchw.set_dtype(v1::DTYPE_UINT8);
  nchw.set_layout(v1::LAYOUT_NCHW);
  nhwc.set_data(a);
  nchw.set_data(b);
  auto ia = TensorToImages(nhwc);
  auto ib = TensorToImages(nchw);
  ASSERT_TRUE(ia.ok()) << ia.status();
  ASSERT_TRUE(ib.ok()) << ib.status();
  ASSERT_EQ(ia->size(), 2u);
  for (int n = 0; n < 2; ++n) {
    EXPECT_EQ((*ia)[n].pixels, (*ib)[n].pixels);
    EXPECT_EQ((*ia)[n].at(1, 2)[1], val(n, 1, 2, 1));
  }
}

TEST(TensorImageTest, FloatDTypesClipScaleAndDenormalise) {
  // One 1x2 image: pixel 0 = (0.5, -0.25, 1.5), pixel 1 = (0, 1, 0.2).
  const float v[6] = {0.5f, -0.25f, 1.5f, 0.0f, 1.0f, 0.2f};
  v1::Tensor f32;
  for (uint64_t d : {1, 1, 2, 3}) f32.add_shape(d);
  f32.set_dtype(v1::DTYPE_FLOAT32);
  f32.set_data(std::string(reinterpret_cast<const char*>(v), sizeof(v)));
  auto im = TensorToImages(f32);
  ASSERT_TRUE(im.ok());
  const std::vector<uint8_t> want = {128, 0, 255, 0, 255, 51};
  EXPECT_EQ((*im)[0].pixels, want);

  // float16 / bfloat16 bit patterns of the same values.
  const uint16_t half[6] = {0x3800, 0xB400, 0x3E00, 0x0000, 0x3C00, 0x3266};
  const uint16_t bf[6] = {0x3F00, 0xBE80, 0x3FC0, 0x0000, 0x3F80, 0x3E4D};
  for (auto [dtype, bits] : {std::pair{v1::DTYPE_FLOAT16, half},
                             std::pair{v1::DTYPE_BFLOAT16, bf}}) {
    v1::Tensor t = f32;
    t.set_dtype(dtype);
    t.set_data(std::string(reinterpret_cast<const char*>(bits), 12));
    auto h = TensorToImages(t);
    ASSERT_TRUE(h.ok());
    EXPECT_EQ((*h)[0].pixels, want) << v1::DType_Name(dtype);
  }
  EXPECT_EQ(HalfToFloat(0x0001), 5.9604644775390625e-8f);  // Subnormal.
  EXPECT_EQ(HalfToFloat(0xC000), -2.0f);

  // (x - mean) / std undone before clipping.
  const float norm[3] = {(0.5f - 0.25f) / 0.5f, 0.0f, -1.0f};
  v1::Tensor n;
  for (uint64_t d : {1, 1, 1, 3}) n.add_shape(d);
  n.set_data(std::string(reinterpret_cast<const char*>(norm), sizeof(norm)));
  auto dn = TensorToImages(n, {0.25f, 0.5f, 0.5f}, {0.5f, 1.0f, 0.25f});
  ASSERT_TRUE(dn.ok());
  EXPECT_EQ((*dn)[0].pixels, (std::vector<uint8_t>{128, 128, 64}));
}

TEST(TensorImageTest, RejectsInconsistentTensors) {
  v1::Tensor t;
  for (uint64_t d : {1, 2, 2, 3}) t.add_shape(d);
  t.set_dtype(v1::DTYPE_FLOAT32);
  t.set_data(std::string(47, '\0'));
  EXPECT_FALSE(TensorToImages(t).ok());
  t.clear_shape();
  for (uint64_t d : {1, 2, 2, 4}) t.add_shape(d);  // 4 channels.
  t.set_data(std::string(64, '\0'));
  EXPECT_FALSE(TensorToImages(t).ok());
  t.clear_shape();
  t.add_shape(48);
  EXPECT_FALSE(TensorToImages(t).ok());
}

}  // namespace
}  // namespace nearprep
