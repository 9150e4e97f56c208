// Tests of the epoch plan: Philox known answers, the shuffle, shards and the
// per-sample random parameters (ranges, independence, distributions).
#include "server/data/epoch_plan.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "server/plan/plan_math.h"

namespace nearprep {
namespace {

using Words = std::array<uint32_t, 4>;

// Known-answer vectors of Philox4x32-10 from the Random123 distribution
// (kat_vectors): counter, key, expected output.
TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(Philox4x32({0, 0, 0, 0}, {0, 0}),
            (Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                       {0xffffffff, 0xffffffff}),
            (Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(Philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                       {0xa4093822, 0x299f31d0}),
            (Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(PhiloxTest, EveryInputWordMatters) {
  const Words base = Philox4x32({1, 2, 3, 4}, {5, 6});
  for (int i = 0; i < 4; ++i) {
    std::array<uint32_t, 4> c = {1, 2, 3, 4};
    c[i] ^= 1;
    EXPECT_NE(Philox4x32(c, {5, 6}), base) << "counter word " << i;
  }
  EXPECT_NE(Philox4x32({1, 2, 3, 4}, {4, 6}), base);
  EXPECT_NE(Philox4x32({1, 2, 3, 4}, {5, 7}), base);
}

TEST(UniformFloatTest, UsesLow23BitsIntoZeroOne) {
  EXPECT_EQ(UniformFloat(0), 0.0f);
  EXPECT_EQ(UniformFloat(0xFF800000u), 0.0f);  // high 9 bits ignored
  EXPECT_EQ(UniformFloat(0xFFFFFFFFu), 1.0f - std::ldexp(1.0f, -23));
  EXPECT_EQ(UniformFloat(0x00400000u), 0.5f);
  EXPECT_EQ(UniformFloat(1), std::ldexp(1.0f, -23));
}

TEST(PlanMathTest, LogAndExpCloseToLibm) {
  for (double x : {1e-300, 1e-9, 0.08, 0.5, 0.75, 0.7071, 1.0, 1.0 + 1e-12,
                   4.0 / 3.0, 2.0, 3.14159, 1e6, 1e300}) {
    EXPECT_NEAR(PlanLog(x), std::log(x),
                4e-16 * std::max(1.0, std::fabs(std::log(x))))
        << x;
  }
  EXPECT_EQ(PlanLog(1.0), 0.0);
  EXPECT_TRUE(std::isnan(PlanLog(0.0)));
  EXPECT_TRUE(std::isnan(PlanLog(-1.0)));
  for (double x : {-700.0, -20.0, -1.0, -0.2876820724517809, 0.0, 1e-10,
                   0.28768207245178085, 1.0, 5.5, 700.0}) {
    EXPECT_NEAR(PlanExp(x) / std::exp(x), 1.0, 1e-14) << x;
  }
  EXPECT_EQ(PlanExp(0.0), 1.0);
  EXPECT_TRUE(std::isinf(PlanExp(1000.0)));
  EXPECT_EQ(PlanExp(-1000.0), 0.0);
}

TEST(PlanMathTest, RoundsHalfAwayFromZero) {
  EXPECT_EQ(PlanRound(2.5), 3.0);
  EXPECT_EQ(PlanRound(3.5), 4.0);
  EXPECT_EQ(PlanRound(2.4999999999999996), 2.0);
  EXPECT_EQ(PlanRound(0.49999999999999994), 0.0);  // floor(x + 0.5) says 1
  EXPECT_EQ(PlanRound(7.0), 7.0);
}

bool IsPermutation(const std::vector<uint64_t>& v) {
  std::vector<uint64_t> s = v;
  std::sort(s.begin(), s.end());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != i) return false;
  }
  return true;
}

TEST(EpochOrderTest, IsAPermutation) {
  for (uint64_t n : {0, 1, 2, 3, 10, 1000, 12345}) {
    const auto order = EpochOrder(n, 42, 3, true);
    EXPECT_EQ(order.size(), n);
    EXPECT_TRUE(IsPermutation(order)) << n;
  }
}

TEST(EpochOrderTest, NoShuffleIsManifestOrder) {
  const auto order = EpochOrder(100, 42, 7, false);
  for (uint64_t i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

TEST(EpochOrderTest, FunctionOfSeedAndEpoch) {
  const auto a = EpochOrder(1000, 42, 0, true);
  EXPECT_EQ(a, EpochOrder(1000, 42, 0, true));
  EXPECT_NE(a, EpochOrder(1000, 43, 0, true));
  EXPECT_NE(a, EpochOrder(1000, 42, 1, true));
  EXPECT_NE(a, EpochOrder(1000, 42, uint64_t{1} << 32, true));  // high word
  EXPECT_NE(a, EpochOrder(1000, 42 + (uint64_t{1} << 32), 0, true));
}

TEST(EpochOrderTest, FollowsTheDocumentedFisherYatesRule) {
  const uint64_t n = 50, seed = 0x123456789abcdefull, epoch = 9;
  std::vector<uint64_t> expect(n);
  std::iota(expect.begin(), expect.end(), 0);
  for (uint64_t i = n - 1; i >= 1; --i) {
    const auto w = Philox4x32(
        {static_cast<uint32_t>(i), 0, static_cast<uint32_t>(epoch),
         kTagPermutation},
        {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
    const uint64_t draw = w[0] | (uint64_t{w[1]} << 32);
    std::swap(expect[i], expect[draw % (i + 1)]);
  }
  EXPECT_EQ(EpochOrder(n, seed, epoch, true), expect);
}

TEST(EpochOrderTest, AllPermutationsOfThreeAboutEquallyLikely) {
  std::map<std::vector<uint64_t>, int> counts;
  const int trials = 6000;
  for (int s = 0; s < trials; ++s) ++counts[EpochOrder(3, s, 0, true)];
  ASSERT_EQ(counts.size(), 6u);
  for (const auto& [perm, c] : counts) {
    // Expected 1000, sd ~29: 6 sd.
    EXPECT_NEAR(c, 1000, 180);
  }
}

// Reads the worked example of docs/protocol.md and checks it against the
// code, so the document cannot drift.
TEST(EpochOrderTest, WorkedExampleInProtocolDocIsCurrent) {
  std::ifstream in(NEARPREP_SOURCE_DIR "/docs/protocol.md");
  if (!in) GTEST_SKIP() << "docs/protocol.md not found";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const auto order = EpochOrder(10, 42, 0, true);
  std::string expect = "order = [";
  for (size_t i = 0; i < order.size(); ++i) {
    expect += (i ? ", " : "") + std::to_string(order[i]);
  }
  expect += "]";
  EXPECT_NE(doc.find(expect), std::string::npos)
      << "docs/protocol.md should contain: " << expect;
}

TEST(ShardSamplesTest, ShardsPartitionTheEpoch) {
  const auto order = EpochOrder(1003, 7, 2, true);
  for (uint32_t shards = 1; shards <= 5; ++shards) {
    std::vector<uint64_t> all;
    size_t min_size = order.size(), max_size = 0;
    for (uint32_t k = 0; k < shards; ++k) {
      const auto s = ShardSamples(order, k, shards);
      for (size_t p = 0; p < s.size(); ++p) {
        ASSERT_EQ(s[p], order[k + p * shards]);  // every n-th position
      }
      min_size = std::min(min_size, s.size());
      max_size = std::max(max_size, s.size());
      all.insert(all.end(), s.begin(), s.end());
    }
    EXPECT_EQ(all.size(), order.size());
    EXPECT_TRUE(IsPermutation(all)) << shards;
    EXPECT_LE(max_size - min_size, 1u);
  }
  EXPECT_TRUE(ShardSamples(order, 3, 3).empty());
  EXPECT_EQ(ShardSamples(order, 0, 0), order);
}

TransformSpec AllOn() {
  TransformSpec s;
  s.crop = CropMode::kRandomResized;
  s.flip_probability = 0.5f;
  s.brightness_max_delta = 0.25f;
  s.saturation_enabled = true;
  s.saturation_lower = 0.5f;
  s.saturation_upper = 1.5f;
  return s;
}

bool SameParams(const SampleParams& a, const SampleParams& b) {
  return a.flip == b.flip && a.brightness_delta == b.brightness_delta &&
         a.saturation_factor == b.saturation_factor && a.crop.y == b.crop.y &&
         a.crop.x == b.crop.x && a.crop.height == b.crop.height &&
         a.crop.width == b.crop.width;
}

TEST(SampleParamsTest, IndependentOfShardAndOrder) {
  const TransformSpec spec = AllOn();
  const auto order = EpochOrder(200, 11, 4, true);
  std::map<uint64_t, SampleParams> by_id;
  for (uint64_t id = 0; id < 200; ++id) {
    by_id[id] = DrawSampleParams(spec, 11, 4, id, 300, 400);
  }
  for (uint32_t k = 0; k < 3; ++k) {
    for (uint64_t id : ShardSamples(order, k, 3)) {
      EXPECT_TRUE(
          SameParams(DrawSampleParams(spec, 11, 4, id, 300, 400), by_id[id]));
    }
  }
  // But they do depend on seed, epoch and id.
  int differ_seed = 0, differ_epoch = 0, differ_id = 0;
  for (uint64_t id = 0; id < 50; ++id) {
    const auto p = by_id[id];
    differ_seed += !SameParams(p, DrawSampleParams(spec, 12, 4, id, 300, 400));
    differ_epoch += !SameParams(p, DrawSampleParams(spec, 11, 5, id, 300, 400));
    differ_id += !SameParams(p, by_id[id + 1]);
  }
  EXPECT_GT(differ_seed, 45);
  EXPECT_GT(differ_epoch, 45);
  EXPECT_GT(differ_id, 45);
}

TEST(SampleParamsTest, DisabledAugmentationsAreNeutralAndShiftNothing) {
  const TransformSpec on = AllOn();
  for (uint64_t id = 0; id < 100; ++id) {
    const auto all = DrawSampleParams(on, 5, 1, id, 240, 320);
    TransformSpec s = on;
    s.flip_probability = 0;
    auto p = DrawSampleParams(s, 5, 1, id, 240, 320);
    EXPECT_FALSE(p.flip);
    EXPECT_EQ(p.brightness_delta, all.brightness_delta);
    EXPECT_EQ(p.saturation_factor, all.saturation_factor);
    EXPECT_EQ(p.crop.x, all.crop.x);
    s = on;
    s.brightness_max_delta = 0;
    p = DrawSampleParams(s, 5, 1, id, 240, 320);
    EXPECT_EQ(p.brightness_delta, 0.0f);
    EXPECT_EQ(p.flip, all.flip);
    EXPECT_EQ(p.saturation_factor, all.saturation_factor);
    s = on;
    s.saturation_enabled = false;
    s.crop = CropMode::kNone;
    p = DrawSampleParams(s, 5, 1, id, 240, 320);
    EXPECT_EQ(p.saturation_factor, 1.0f);
    EXPECT_EQ(p.flip, all.flip);
    EXPECT_EQ(p.brightness_delta, all.brightness_delta);
    EXPECT_EQ(p.crop.y, 0);
    EXPECT_EQ(p.crop.x, 0);
    EXPECT_EQ(p.crop.height, 240);
    EXPECT_EQ(p.crop.width, 320);
    EXPECT_EQ(p.source_height, 240);
    EXPECT_EQ(p.source_width, 320);
  }
}

TEST(SampleParamsTest, UsesTheDocumentedWordsAndFloatFormulas) {
  const TransformSpec spec = AllOn();
  const uint64_t seed = 99, epoch = 3;
  for (uint64_t id = 0; id < 200; ++id) {
    const auto w = Philox4x32({static_cast<uint32_t>(id), 0,
                               static_cast<uint32_t>(epoch), kTagSampleParams},
                              {static_cast<uint32_t>(seed), 0});
    const auto p = DrawSampleParams(spec, seed, epoch, id, 100, 100);
    EXPECT_EQ(p.flip, UniformFloat(w[0]) < 0.5f);
    const float d = UniformFloat(w[1]) * 0.5f - 0.25f;
    EXPECT_EQ(p.brightness_delta, d);
    const float f = UniformFloat(w[2]) * 1.0f + 0.5f;
    EXPECT_EQ(p.saturation_factor, f);
  }
}

// Issue 36: contrast in block 0's word 3, hue in block 11's word 0; turning
// them on changes none of the older draws, and they change nothing else.
TEST(SampleParamsTest, ContrastAndHueUseTheirDocumentedWords) {
  const TransformSpec base = AllOn();
  TransformSpec spec = base;
  spec.contrast_enabled = true;
  spec.contrast_lower = 0.6f;
  spec.contrast_upper = 1.4f;
  spec.hue_max_delta = 0.08f;
  const uint64_t seed = 99, epoch = 3;
  int hue_differs = 0;
  for (uint64_t id = 0; id < 200; ++id) {
    const auto w = Philox4x32({static_cast<uint32_t>(id), 0,
                               static_cast<uint32_t>(epoch), kTagSampleParams},
                              {static_cast<uint32_t>(seed), 0});
    const auto c = Philox4x32({static_cast<uint32_t>(id), 0,
                               static_cast<uint32_t>(epoch),
                               (kColorBlock << 8) | kTagSampleParams},
                              {static_cast<uint32_t>(seed), 0});
    const auto p = DrawSampleParams(spec, seed, epoch, id, 100, 100);
    const float range = spec.contrast_upper - spec.contrast_lower;
    EXPECT_EQ(p.contrast_factor, UniformFloat(w[3]) * range + 0.6f);
    const float m = spec.hue_max_delta;
    EXPECT_EQ(p.hue_delta, UniformFloat(c[0]) * (m + m) - m);
    ASSERT_GE(p.contrast_factor, 0.6f);
    ASSERT_LT(p.contrast_factor, 1.4f);
    ASSERT_GE(p.hue_delta, -0.08f);
    ASSERT_LT(p.hue_delta, 0.08f);
    hue_differs += p.hue_delta != UniformFloat(w[3]) * (m + m) - m;
    const auto old = DrawSampleParams(base, seed, epoch, id, 100, 100);
    EXPECT_TRUE(SameParams(p, old));
    EXPECT_EQ(old.contrast_factor, 1.0f);
    EXPECT_EQ(old.hue_delta, 0.0f);
  }
  EXPECT_GT(hue_differs, 190);  // not the contrast word
}

TEST(SampleParamsTest, DistributionsLookRight) {
  TransformSpec spec = AllOn();
  spec.flip_probability = 0.3f;
  const int n = 10000;
  double flips = 0, delta_sum = 0, factor_sum = 0;
  for (uint64_t id = 0; id < n; ++id) {
    const auto p = DrawSampleParams(spec, 2024, 0, id, 64, 64);
    flips += p.flip;
    ASSERT_GE(p.brightness_delta, -0.25f);
    ASSERT_LT(p.brightness_delta, 0.25f);
    ASSERT_GE(p.saturation_factor, 0.5f);
    ASSERT_LT(p.saturation_factor, 1.5f);
    delta_sum += p.brightness_delta;
    factor_sum += p.saturation_factor;
  }
  // sd of the flip mean: sqrt(.3*.7/1e4) = 0.0046; 5 sd.
  EXPECT_NEAR(flips / n, 0.3, 0.023);
  EXPECT_NEAR(delta_sum / n, 0.0, 0.0075);  // sd 0.0014
  EXPECT_NEAR(factor_sum / n, 1.0, 0.015);  // sd 0.0029
  spec.flip_probability = 1.0f;
  for (uint64_t id = 0; id < 100; ++id) {
    EXPECT_TRUE(DrawSampleParams(spec, 1, 0, id, 8, 8).flip);
  }
}

TEST(CropTest, CenterCropFollowsTensorFlowCentralCrop) {
  // start = int((n - n*f)/2), size = n - 2*start.
  const CropBox b = CenterCropBox(100, 200, 0.875f);
  EXPECT_EQ(b.y, 6);
  EXPECT_EQ(b.height, 88);
  EXPECT_EQ(b.x, 12);
  EXPECT_EQ(b.width, 176);
  const CropBox c = CenterCropBox(375, 500, 0.5f);
  EXPECT_EQ(c.y, 93);
  EXPECT_EQ(c.height, 189);
  EXPECT_EQ(c.x, 125);
  EXPECT_EQ(c.width, 250);
  const CropBox whole = CenterCropBox(7, 9, 1.0f);
  EXPECT_EQ(whole.height, 7);
  EXPECT_EQ(whole.width, 9);
  // int((4 - 4e-6)/2) = 1 -> 2 rows; int((5 - 5e-6)/2) = 2 -> 1 column.
  const CropBox tiny = CenterCropBox(4, 5, 1e-6f);
  EXPECT_EQ(tiny.height, 2);
  EXPECT_EQ(tiny.width, 1);
  EXPECT_EQ(tiny.y, 1);
  EXPECT_EQ(tiny.x, 2);
  TransformSpec spec;
  spec.crop = CropMode::kCenter;
  spec.center_fraction = 0.875f;
  const auto p1 = DrawSampleParams(spec, 1, 0, 3, 100, 200);
  const auto p2 = DrawSampleParams(spec, 2, 9, 4, 100, 200);
  EXPECT_EQ(p1.crop.y, 6);
  EXPECT_EQ(p2.crop.y, 6);
  EXPECT_EQ(p1.crop.width, 176);
  EXPECT_EQ(p2.crop.width, 176);
}

TEST(CropTest, RandomResizedBoxesInsideAndWithinRanges) {
  TransformSpec spec = AllOn();
  const int sizes[][2] = {{1, 1},   {1, 1000},  {1000, 1},
                          {2, 3},   {375, 500}, {500, 375},
                          {64, 64}, {17, 4096}, {3000, 4000}};
  int random_boxes = 0;
  double frac_sum = 0;
  for (const auto& hw : sizes) {
    const int h = hw[0], w = hw[1];
    for (uint64_t id = 0; id < 2000; ++id) {
      const CropBox b = RandomResizedCropBox(spec, 77, 1, id, h, w);
      ASSERT_GE(b.y, 0);
      ASSERT_GE(b.x, 0);
      ASSERT_GE(b.height, 1);
      ASSERT_GE(b.width, 1);
      ASSERT_LE(b.y + b.height, h);
      ASSERT_LE(b.x + b.width, w);
      if (h < 64 || w < 64) continue;
      // On images this size the 10 attempts almost always succeed; then
      // the box obeys the ranges up to the rounding of its sides.
      const double area = double(h) * w;
      const double frac = double(b.height) * b.width / area;
      const double ratio = double(b.width) / b.height;
      const double slack_area = (b.height + b.width + 1.0) / area;
      const double slack_ratio = 1.0 / b.height + ratio / b.height;
      const bool in_range = frac >= spec.scale_min - slack_area &&
                            frac <= spec.scale_max + slack_area &&
                            ratio >= spec.ratio_min - slack_ratio &&
                            ratio <= spec.ratio_max + slack_ratio;
      const bool central =
          b.y == (h - b.height) / 2 && b.x == (w - b.width) / 2;
      EXPECT_TRUE(in_range || central)
          << h << "x" << w << " id " << id << ": " << b.y << "," << b.x << " "
          << b.height << "x" << b.width;
      if (in_range && h == 3000) {
        ++random_boxes;
        frac_sum += frac;
      }
    }
  }
  ASSERT_GT(random_boxes, 1500);
  // Accepted area fractions are skewed below the mean of [0.08, 1] because
  // large fractions with extreme ratios are rejected; they stay well inside.
  EXPECT_GT(frac_sum / random_boxes, 0.35);
  EXPECT_LT(frac_sum / random_boxes, 0.6);
}

TEST(CropTest, RandomResizedFallbackClampsTheRatio) {
  TransformSpec spec = AllOn();
  spec.scale_min = spec.scale_max = 1.0f;  // whole area: fits rarely
  spec.ratio_min = spec.ratio_max = 1.0f;  // a square
  // A 100x400 image: a square of area 40000 never fits, so the fallback
  // takes the central 100x100 (ratio clamped to 1).
  for (uint64_t id = 0; id < 20; ++id) {
    const CropBox b = RandomResizedCropBox(spec, 1, 0, id, 100, 400);
    EXPECT_EQ(b.height, 100);
    EXPECT_EQ(b.width, 100);
    EXPECT_EQ(b.y, 0);
    EXPECT_EQ(b.x, 150);
  }
  // Ratio inside the range: the whole image.
  spec.ratio_min = 0.5f;
  spec.ratio_max = 8.0f;
  spec.scale_min = spec.scale_max = 1.0f;
  const CropBox w = RandomResizedCropBox(spec, 1, 0, 0, 100, 400);
  EXPECT_EQ(w.height, 100);
  EXPECT_EQ(w.width, 400);
}

TEST(CropTest, DegenerateSizesDoNotCrash) {
  TransformSpec spec = AllOn();
  const auto p = DrawSampleParams(spec, 1, 0, 0, 0, 0);
  EXPECT_EQ(p.crop.height, 0);
  EXPECT_EQ(p.crop.width, 0);
  spec.ratio_min = std::nanf("");
  const auto q = DrawSampleParams(spec, 1, 0, 0, 50, 60);
  EXPECT_LE(q.crop.y + q.crop.height, 50);
  EXPECT_LE(q.crop.x + q.crop.width, 60);
  spec = AllOn();
  spec.ratio_max = 1e30f;
  spec.scale_max = 1e30f;
  const auto r = DrawSampleParams(spec, 1, 0, 0, 50, 60);
  EXPECT_LE(r.crop.y + r.crop.height, 50);
  EXPECT_LE(r.crop.x + r.crop.width, 60);
}

}  // namespace
}  // namespace nearprep
