// The vector row colour kernels' saturation (RowColorAvx2, RowColorAvx512)
// against the scalar reference internal::SaturatePixel, bit for bit: every
// uint8 RGB triplet (the values the pipeline feeds the kernel when nothing
// is resized) at several factors, a wide random set of floats (resized and
// brightened values, ties, neighbours one ulp apart, tiny, huge, zero, one,
// NaN and infinities) and the rare lanes whose hue sum needs the double
// fallback. FAST's closed form must be the same on both vector levels.
//
// NEARPREP_SATURATION_TEST_PIXELS scales the random set (default 2^22).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/image/preprocess_kernels.h"
#include "server/image/tf_ops_internal.h"

namespace nearprep {
namespace {

using RowColorFn = int (*)(const float*, const float*, float, int,
                           const internal::RowOps&,
                           const internal::PackTarget&);

struct Level {
  const char* name;
  RowColorFn fn;
};

std::vector<Level> VectorLevels() {
  std::vector<Level> levels;
  if (internal::HaveAvx2Kernels()) {
    levels.push_back({"avx2", &internal::RowColorAvx2});
  }
  if (internal::HaveAvx512Kernels()) {
    levels.push_back({"avx512", &internal::RowColorAvx512});
  }
  return levels;
}

// Columns per kernel call: 64 blocks of 16 and a last block of 8, so the
// AVX-512 kernel's 8-column tail runs too.
constexpr int kRow = 1032;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Runs `level` on one planar row (R|G|B, kRow each) with lo = hi and wy = 0,
// brightness `delta` (when nonzero) and saturation `factor`, float32 NCHW
// out, and compares every value with the scalar path on the same input
// (lerp and brightness done the same way first). Returns the mismatches and
// adds the number of pixels checked to *checked.
int CheckRow(const Level& level, const std::vector<float>& planes, float delta,
             float factor, bool fast, uint64_t* checked,
             std::vector<float>* got_out = nullptr) {
  internal::RowOps ops;
  ops.brightness = delta != 0.0f;
  ops.delta = delta;
  ops.saturation = true;
  ops.fast_saturation = fast;
  ops.factor = factor;
  std::vector<float> got(planes.size(), -7.0f);
  internal::PackTarget t;
  t.dtype = DType::kFloat32;
  t.layout = Layout::kNCHW;
  for (int c = 0; c < 3; ++c) {
    t.dst[c] = reinterpret_cast<uint8_t*>(got.data() + size_t(c) * kRow);
  }
  const int done = level.fn(planes.data(), planes.data(), 0.0f, kRow, ops, t);
  EXPECT_EQ(done, kRow) << level.name;
  int bad = 0;
  for (int x = 0; x < done; ++x) {
    float p[3];
    for (int c = 0; c < 3; ++c) {
      const float a = planes[size_t(c) * kRow + x];
      p[c] = a + (a - a) * 0.0f;
      if (ops.brightness) p[c] = p[c] + delta;
    }
    const float in[3] = {p[0], p[1], p[2]};
    if (fast) {
      internal::SaturateFastPixel(p, factor);
    } else {
      internal::SaturatePixel(p, factor);
    }
    for (int c = 0; c < 3; ++c) {
      const float g = got[size_t(c) * kRow + x];
      if (Bits(g) != Bits(p[c]) && !fast) {
        if (++bad <= 5) {
          ADD_FAILURE() << level.name << " pixel (" << in[0] << ", " << in[1]
                        << ", " << in[2] << ") [bits " << std::hex
                        << Bits(in[0]) << " " << Bits(in[1]) << " "
                        << Bits(in[2]) << std::dec << "] factor " << factor
                        << " channel " << c << ": got " << g << " want "
                        << p[c];
        }
      }
    }
  }
  *checked += static_cast<uint64_t>(done);
  if (got_out != nullptr) *got_out = std::move(got);
  return bad;
}

TEST(SaturationKernelsTest, EveryU8TripletEqualsScalarReference) {
  const std::vector<Level> levels = VectorLevels();
  if (levels.empty()) GTEST_SKIP() << "no vector kernels on this CPU";
  const float* lut = internal::U8ToFloatTable();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  // Fixed factors over every triplet, then a random factor and brightness
  // per row (values below 0 and above 1).
  const float factors[] = {0.0f, 1.0f, 0.5f, 1.5f, -1.0f};
  std::vector<float> planes(size_t(3) * kRow);
  for (const Level& level : levels) {
    uint64_t checked = 0;
    int bad = 0;
    for (float fixed : factors) {
      uint32_t next = 0;
      while (next < (1u << 24)) {
        for (int x = 0; x < kRow; ++x, ++next) {
          const uint32_t i = next & 0xFFFFFFu;  // wraps in the last row
          planes[x] = lut[i >> 16];
          planes[kRow + x] = lut[(i >> 8) & 0xFF];
          planes[2 * kRow + x] = lut[i & 0xFF];
        }
        float factor = fixed, delta = 0.0f;
        if (fixed < 0) {
          factor = u(rng) * 3.0f;
          delta = (u(rng) * 2 - 1) * 0.4f;
        }
        bad += CheckRow(level, planes, delta, factor, false, &checked);
        ASSERT_LT(bad, 20) << level.name;
      }
    }
    EXPECT_EQ(bad, 0) << level.name;
    EXPECT_GE(checked, 5u * (1u << 24)) << level.name;
  }
}

// A random float for one channel: the kinds of values listed at the top.
float RandomChannel(std::mt19937* rng, float other) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const float* lut = internal::U8ToFloatTable();
  switch ((*rng)() % 10) {
    case 0:
    case 1: {  // A bilinear tap of uint8 values plus brightness.
      const float a = lut[(*rng)() & 0xFF], b = lut[(*rng)() & 0xFF];
      return (a + (b - a) * u(*rng)) + (u(*rng) * 2 - 1) * 0.2f;
    }
    case 2:  // Equal to another channel (ties for the maximum, greys).
      return other;
    case 3: {  // A few ulps from another channel.
      const int32_t step = int32_t((*rng)() % 7) - 3;
      return FromBits(Bits(other) + uint32_t(step));
    }
    case 4: {  // Any finite float of moderate size, either sign.
      const uint32_t exp = 90 + (*rng)() % 40;  // about 2^-37 .. 2^2
      return FromBits(((*rng)() & 0x807FFFFFu) | (exp << 23));
    }
    case 5: {  // Any bit pattern (subnormals, huge, NaN, infinities).
      return FromBits((*rng)());
    }
    case 6: {
      const float inf = std::numeric_limits<float>::infinity();
      const float specials[] = {0.0f,   -0.0f,  1.0f,   -1.0f,    1e-30f,
                                1e-40f, -1e-40f, 1e30f, 3.4e38f, 0.5f,
                                1.0f / 3, 2.0f / 3, inf, -inf,
                                std::numeric_limits<float>::quiet_NaN()};
      return specials[(*rng)() % (sizeof(specials) / sizeof(float))];
    }
    default:
      return u(*rng);
  }
}

TEST(SaturationKernelsTest, WideRandomFloatsEqualScalarReference) {
  const std::vector<Level> levels = VectorLevels();
  if (levels.empty()) GTEST_SKIP() << "no vector kernels on this CPU";
  uint64_t pixels = uint64_t{1} << 22;
  if (const char* env = std::getenv("NEARPREP_SATURATION_TEST_PIXELS")) {
    pixels = std::strtoull(env, nullptr, 10);
  }
  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const float factors[] = {0.0f, 1.0f, 0.5f, 1.5f, 2.5f, 1e-30f, 1e30f,
                           std::numeric_limits<float>::infinity()};
  std::vector<float> planes(size_t(3) * kRow);
  std::vector<uint64_t> checked(levels.size(), 0);
  int bad = 0;
  for (uint64_t done = 0; done < pixels; done += kRow) {
    // Mostly clean rows (all lanes stay vectorised); some with specials.
    const bool clean = rng() % 4 != 0;
    for (int x = 0; x < kRow; ++x) {
      float prev = u(rng);
      for (int c = 0; c < 3; ++c) {
        float v;
        do {
          v = RandomChannel(&rng, prev);
        } while (clean && !(std::fabs(v) < 1e6f));
        planes[size_t(c) * kRow + x] = v;
        prev = v;
      }
    }
    const float factor = rng() % 2 ? factors[rng() % 8] : u(rng) * 4.0f;
    const float delta = rng() % 2 ? 0.0f : (u(rng) * 2 - 1) * 0.3f;
    std::vector<float> first;
    for (size_t l = 0; l < levels.size(); ++l) {
      bad += CheckRow(levels[l], planes, delta, factor, false, &checked[l]);
      // FAST: the vector levels agree bit for bit with each other.
      std::vector<float> got;
      uint64_t ignored = 0;
      CheckRow(levels[l], planes, delta, factor, true, &ignored, &got);
      if (l == 0) {
        first = got;
      } else {
        ASSERT_EQ(std::memcmp(first.data(), got.data(), got.size() * 4), 0)
            << "FAST differs between " << levels[0].name << " and "
            << levels[l].name;
      }
    }
    ASSERT_LT(bad, 20);
  }
  EXPECT_EQ(bad, 0);
  for (size_t l = 0; l < levels.size(); ++l) {
    EXPECT_GE(checked[l], pixels) << levels[l].name;
  }
}

// Pixels whose hue sum float(double(t) + 2/6) lies so close to a midpoint
// between floats that the kernels' float bracket cannot decide it and they
// take the double path; built on purpose (random inputs almost never do).
TEST(SaturationKernelsTest, HueSumFallbackLanesEqualScalarReference) {
  const std::vector<Level> levels = VectorLevels();
  if (levels.empty()) GTEST_SKIP() << "no vector kernels on this CPU";
  const double k = 2.0 / 6.0;
  const float kh = static_cast<float>(k);
  const float kl = static_cast<float>(k - kh);
  const float e44 = std::ldexp(1.0f, -44);
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> hard_pixels;  // r, g, b triplets
  int float_would_be_wrong = 0;
  for (int attempt = 0; attempt < 2000000 && hard_pixels.size() < 3 * 4000;
       ++attempt) {
    // g is the maximum, r and b tiny: t = norm * (b - r) with a fine grid.
    const float g = 0.5f + 0.5f * u(rng);
    const float r = std::ldexp(1.0f + u(rng), -21);
    const float range = g - r;  // b will be above r
    const float norm = 1.0f / (6.0f * range);
    // A midpoint M between floats near 1/3, and b with t close to M - k.
    const int j = int(rng() % 6) - 3;
    const double mid = double(kh) + (2 * j + 1) * std::ldexp(1.0, -26);
    const double want_t = mid - k;
    if (want_t <= 0) continue;
    const float b = static_cast<float>(r + want_t / norm);
    const float b2 = FromBits(Bits(b) + uint32_t(int32_t(rng() % 5) - 2));
    if (!(b2 > r) || !(b2 < g)) continue;
    const float mn = std::min(std::min(b2, g), r);
    const float rg = g - mn;
    const float nm = 1.0f / (6.0f * rg);
    const float t = nm * (b2 - r);
    const float s = kh + t;
    const float e = t - (s - kh);
    const float lo = s + (e + (kl - e44));
    const float hi = s + (e + (kl + e44));
    if (lo == hi) continue;
    hard_pixels.insert(hard_pixels.end(), {r, g, b2});
    const float exact = static_cast<float>(static_cast<double>(t) + k);
    if (lo != exact) ++float_would_be_wrong;
  }
  const size_t n = hard_pixels.size() / 3;
  ASSERT_GE(n, 1000u) << "too few fallback lanes built";
  // Some of them are ones where the float candidate alone is wrong.
  EXPECT_GT(float_would_be_wrong, 0);
  std::printf("%zu fallback lanes, %d where the float candidate is wrong\n",
              n, float_would_be_wrong);
  std::vector<float> planes(size_t(3) * kRow);
  int bad = 0;
  uint64_t checked = 0;
  for (const Level& level : levels) {
    for (size_t start = 0; start < n; start += kRow / 4) {
      // A quarter of the lanes hard, the others ordinary pixels.
      for (int x = 0; x < kRow; ++x) {
        const size_t i = (start + size_t(x) / 4) % n;
        for (int c = 0; c < 3; ++c) {
          planes[size_t(c) * kRow + x] =
              x % 4 == 0 ? hard_pixels[3 * i + c] : u(rng);
        }
      }
      for (float factor : {0.0f, 1.0f, 1.3f, 4.0f}) {
        bad += CheckRow(level, planes, 0.0f, factor, false, &checked);
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace nearprep
