// common/tensor_codec: the prediction filters against their definition,
// round trips over edge geometries, and damaged payloads.
#include "common/tensor_codec.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace nearprep {
namespace {

std::vector<uint8_t> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// A smooth image with some noise: what the filters are for.
std::vector<uint8_t> Smooth(const TensorGeometry& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(g.total_bytes());
  size_t k = 0;
  for (uint64_t i = 0; i < g.images; ++i)
    for (uint64_t p = 0; p < g.planes; ++p)
      for (uint64_t r = 0; r < g.rows; ++r)
        for (uint64_t c = 0; c < g.cols; ++c)
          for (uint64_t ch = 0; ch < g.channels; ++ch)
            v[k++] = static_cast<uint8_t>(r + 2 * c + 40 * (p + ch) + 7 * i +
                                          (rng() % 3));
  return v;
}

// The byte at (plane, row, col, channel) of one image, 0 outside.
int At(const TensorGeometry& g, const uint8_t* img, int64_t p, int64_t r,
       int64_t c, int64_t ch) {
  if (r < 0 || c < 0) return 0;
  return img[((p * g.rows + r) * g.cols + c) * g.channels + ch];
}

// The filters' definition, written out per byte.
std::vector<uint8_t> Reference(const TensorGeometry& g,
                               TensorCompression comp, const uint8_t* img) {
  std::vector<uint8_t> out(g.image_bytes());
  size_t k = 0;
  for (int64_t p = 0; p < static_cast<int64_t>(g.planes); ++p)
    for (int64_t r = 0; r < static_cast<int64_t>(g.rows); ++r)
      for (int64_t c = 0; c < static_cast<int64_t>(g.cols); ++c)
        for (int64_t ch = 0; ch < static_cast<int64_t>(g.channels); ++ch) {
          const int x = At(g, img, p, r, c, ch);
          const int left = At(g, img, p, r, c - 1, ch);
          int pred = left;
          if (comp == TensorCompression::kGradientZstd) {
            pred = left + At(g, img, p, r - 1, c, ch) -
                   At(g, img, p, r - 1, c - 1, ch);
          }
          out[k++] = static_cast<uint8_t>((x - pred) & 0xFF);
        }
  return out;
}

struct Case {
  const char* name;
  TensorGeometry g;
};

const Case kCases[] = {
    {"nhwc_1x1", TensorGeometry::Nhwc(1, 1, 1, 3)},
    {"nchw_1x1", TensorGeometry::Nchw(1, 3, 1, 1)},
    {"nhwc_odd", TensorGeometry::Nhwc(3, 5, 7, 3)},
    {"nchw_odd", TensorGeometry::Nchw(3, 3, 5, 7)},
    {"nhwc_one_row", TensorGeometry::Nhwc(2, 1, 9, 3)},
    {"nhwc_one_col", TensorGeometry::Nhwc(2, 9, 1, 3)},
    {"nchw_one_col", TensorGeometry::Nchw(2, 3, 9, 1)},
    {"nhwc_224", TensorGeometry::Nhwc(2, 224, 224, 3)},
    {"nchw_33x17", TensorGeometry::Nchw(4, 3, 33, 17)},
    {"gray_like", TensorGeometry{2, 2, 6, 5, 2}},
};

const TensorCompression kComps[] = {TensorCompression::kDeltaZstd,
                                    TensorCompression::kGradientZstd};

TEST(TensorCodecTest, FilterMatchesDefinitionAndInverts) {
  for (const Case& c : kCases) {
    for (TensorCompression comp : kComps) {
      SCOPED_TRACE(::testing::Message() << c.name << " comp "
                                        << static_cast<int>(comp));
      TensorGeometry one = c.g;
      one.images = 1;
      const std::vector<uint8_t> img = Random(one.image_bytes(), 7);
      std::vector<uint8_t> filtered(one.image_bytes());
      FilterImage(one, comp, img.data(), filtered.data());
      EXPECT_EQ(filtered, Reference(one, comp, img.data()));
      UnfilterImage(one, comp, filtered.data());
      EXPECT_EQ(filtered, img);
    }
  }
}

TEST(TensorCodecTest, RoundTripsEveryGeometry) {
  for (const Case& c : kCases) {
    for (TensorCompression comp : kComps) {
      for (int level : {-1000, -5, 1, 3, 19}) {
        for (bool smooth : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << c.name << " comp " << static_cast<int>(comp)
                       << " level " << level << " smooth " << smooth);
          const std::vector<uint8_t> src =
              smooth ? Smooth(c.g, 3) : Random(c.g.total_bytes(), 11);
          std::vector<uint8_t> packed(CompressedBound(c.g));
          absl::StatusOr<size_t> n = CompressTensor(
              c.g, comp, level, src.data(), packed.data(), packed.size());
          ASSERT_TRUE(n.ok()) << n.status();
          ASSERT_LE(*n, packed.size());
          std::vector<uint8_t> out(c.g.total_bytes(), 0xAB);
          absl::Status st =
              DecompressTensor(c.g, comp, packed.data(), *n, out.data());
          ASSERT_TRUE(st.ok()) << st;
          EXPECT_EQ(out, src);
        }
      }
    }
  }
}

TEST(TensorCodecTest, ZeroImagesIsAnEmptyPayload) {
  const TensorGeometry g = TensorGeometry::Nhwc(0, 4, 4, 3);
  uint8_t dst[1];
  absl::StatusOr<size_t> n =
      CompressTensor(g, TensorCompression::kGradientZstd, 1, nullptr, dst, 1);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);
  EXPECT_TRUE(DecompressTensor(g, TensorCompression::kGradientZstd, dst, 0,
                               nullptr)
                  .ok());
}

TEST(TensorCodecTest, FiltersShrinkSmoothImages) {
  const TensorGeometry g = TensorGeometry::Nhwc(2, 64, 64, 3);
  const std::vector<uint8_t> src = Smooth(g, 5);
  std::vector<uint8_t> packed(CompressedBound(g));
  for (TensorCompression comp : kComps) {
    absl::StatusOr<size_t> n = CompressTensor(g, comp, 1, src.data(),
                                              packed.data(), packed.size());
    ASSERT_TRUE(n.ok());
    // Residuals are in {-2..2} + the ramp's constant step: well under half.
    EXPECT_LT(*n, g.total_bytes() / 2) << static_cast<int>(comp);
  }
}

class Damage : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = Smooth(g_, 9);
    packed_.resize(CompressedBound(g_));
    absl::StatusOr<size_t> n =
        CompressTensor(g_, TensorCompression::kGradientZstd, 1, src_.data(),
                       packed_.data(), packed_.size());
    ASSERT_TRUE(n.ok());
    packed_.resize(*n);
    out_.resize(g_.total_bytes());
  }
  absl::Status Decode(const std::vector<uint8_t>& p,
                      TensorGeometry g) {
    out_.resize(g.total_bytes());
    return DecompressTensor(g, TensorCompression::kGradientZstd, p.data(),
                            p.size(), out_.data());
  }
  const TensorGeometry g_ = TensorGeometry::Nhwc(3, 16, 16, 3);
  std::vector<uint8_t> src_, packed_, out_;
};

TEST_F(Damage, FlippedBytesAreDataLoss) {
  // Every position: header, block, literals or checksum; none may decode
  // silently into different pixels.
  for (size_t i = 0; i < packed_.size(); ++i) {
    std::vector<uint8_t> bad = packed_;
    bad[i] ^= 0x5A;
    absl::Status st = Decode(bad, g_);
    if (st.ok()) {
      EXPECT_EQ(out_, src_) << "byte " << i << " decoded into other pixels";
    } else {
      EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
      EXPECT_NE(st.message().find("compressed tensor"), std::string::npos);
    }
  }
}

TEST_F(Damage, TruncatedTrailingAndMiscountedAreDataLoss) {
  std::vector<uint8_t> cut(packed_.begin(), packed_.end() - 5);
  EXPECT_EQ(Decode(cut, g_).code(), absl::StatusCode::kDataLoss);
  std::vector<uint8_t> longer = packed_;
  longer.push_back(0);
  absl::Status st = Decode(longer, g_);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("trailing"), std::string::npos) << st;
  TensorGeometry more = g_;
  more.images = 4;
  st = Decode(packed_, more);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("image 3"), std::string::npos) << st;
  TensorGeometry wider = g_;
  wider.cols = 17;
  EXPECT_EQ(Decode(packed_, wider).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Decode({}, g_).code(), absl::StatusCode::kDataLoss);
}

TEST(TensorCodecTest, RejectsBadArguments) {
  const TensorGeometry g = TensorGeometry::Nhwc(1, 2, 2, 3);
  std::vector<uint8_t> src(g.total_bytes()), dst(CompressedBound(g));
  EXPECT_EQ(CompressTensor(g, TensorCompression::kNone, 1, src.data(),
                           dst.data(), dst.size())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CompressTensor(g, TensorCompression::kDeltaZstd, 20, src.data(),
                           dst.data(), dst.size())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CompressTensor(g, TensorCompression::kDeltaZstd, 1, src.data(),
                           dst.data(), dst.size() - 1)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecompressTensor(g, static_cast<TensorCompression>(9), dst.data(),
                             0, src.data())
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(IsKnownCompression(0));
  EXPECT_TRUE(IsKnownCompression(2));
  EXPECT_FALSE(IsKnownCompression(3));
  EXPECT_FALSE(IsKnownCompression(-1));
}

}  // namespace
}  // namespace nearprep
