#include "server/fleet/global_plan.h"

#include <algorithm>
#include <set>

#include "gtest/gtest.h"

namespace nearprep::fleet {
namespace {

std::vector<uint64_t> Starts(const std::vector<uint64_t>& sizes) {
  std::vector<uint64_t> s = {0};
  for (uint64_t n : sizes) s.push_back(s.back() + n);
  return s;
}

TEST(PartitionStream, PermutationAndAnyPositionAlone) {
  PlanParams p;
  p.seed = 42;
  p.epoch = 3;
  for (uint64_t n : {1u, 7u, 64u, 100u, 333u}) {
    for (uint64_t b : {1u, 5u, 16u, 400u}) {
      for (uint32_t w : {1u, 3u, 32u, 1000u}) {
        p.block_samples = b;
        p.window = w;
        const std::vector<uint64_t> s = PartitionStream(n, 9, p);
        ASSERT_EQ(s.size(), n);
        std::vector<uint64_t> sorted = s;
        std::sort(sorted.begin(), sorted.end());
        for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i);
        for (uint64_t j = 0; j < n; ++j) {
          ASSERT_EQ(PartitionStreamAt(n, 9, j, p), s[j])
              << "n=" << n << " b=" << b << " w=" << w << " j=" << j;
        }
      }
    }
  }
}

TEST(PartitionStream, BlocksAreReadTogetherWithWindowOne) {
  PlanParams p;
  p.seed = 1;
  p.block_samples = 10;
  p.window = 1;
  const std::vector<uint64_t> s = PartitionStream(95, 0, p);
  for (size_t j = 0; j < s.size(); ++j) {
    if (j % 10 != 0 && j < 90) {
      // Within a permuted block, offsets are consecutive (the short block 9
      // shifts later ones, so only check where it is not involved).
      if (s[j - 1] / 10 == s[j] / 10) {
        EXPECT_EQ(s[j], s[j - 1] + 1);
      }
    }
  }
  // Different partitions, epochs and seeds give different streams.
  EXPECT_NE(PartitionStream(95, 0, p), PartitionStream(95, 1, p));
  PlanParams q = p;
  q.epoch = 1;
  EXPECT_NE(PartitionStream(95, 0, p), PartitionStream(95, 0, q));
}

TEST(GlobalPlan, EveryPositionAloneAndEverySampleOnce) {
  const std::vector<std::vector<uint64_t>> layouts = {
      {10}, {5, 5, 5, 5}, {30, 1, 17, 4, 4, 9, 22, 3, 3, 8, 11, 12}, {100, 99, 98}};
  for (const auto& sizes : layouts) {
    PlanParams p;
    p.seed = 1234;
    p.epoch = 2;
    p.block_samples = 4;
    p.window = 6;
    p.global_batch = 12;
    auto plan = GlobalPlan::Create(Starts(sizes), p);
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::set<uint64_t> seen;
    std::vector<uint64_t> next_in_partition(sizes.size(), 0);
    auto again = GlobalPlan::Create(Starts(sizes), p);  // fresh caches
    const std::vector<uint64_t> st = Starts(sizes);
    for (uint64_t pos = (*plan)->size(); pos-- > 0;) {  // backwards: no replay
      const GlobalPlan::Entry e = (*plan)->At(pos);
      EXPECT_TRUE(seen.insert(e.sample_id).second);
      EXPECT_GE(e.sample_id, st[e.partition]);
      EXPECT_LT(e.sample_id, st[e.partition + 1]);
    }
    EXPECT_EQ(seen.size(), (*plan)->size());
    // Each partition appears in its own stream order, interleaved by round.
    for (uint64_t pos = 0; pos < (*again)->size(); ++pos) {
      const GlobalPlan::Entry e = (*again)->At(pos);
      const uint32_t part = e.partition;
      const std::vector<uint64_t> stream = PartitionStream(sizes[part], part, p);
      EXPECT_EQ(e.sample_id, st[part] + stream[next_in_partition[part]++]);
    }
  }
}

TEST(GlobalPlan, RoundsInterleavePartitions) {
  PlanParams p;
  p.seed = 5;
  p.global_batch = 4;
  auto plan = GlobalPlan::Create(Starts({3, 3, 3, 3}), p);
  ASSERT_TRUE(plan.ok());
  for (uint64_t r = 0; r < 3; ++r) {
    std::set<uint32_t> parts;
    for (uint64_t i = 0; i < 4; ++i) parts.insert((*plan)->At(r * 4 + i).partition);
    EXPECT_EQ(parts.size(), 4u) << "round " << r;
  }
}

TEST(GlobalPlan, TrainerSlicesCoverEveryPositionOnceForSeveralCGT) {
  struct Case {
    std::vector<uint64_t> sizes;
    uint64_t g;
    std::vector<uint32_t> ts;
  };
  const std::vector<Case> cases = {
      {{40, 41, 39}, 12, {1, 2, 3, 4, 6, 12}},
      {std::vector<uint64_t>(12, 17), 24, {1, 3, 4, 6, 8}},
      {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 10, {1, 2, 5, 10}},
      {{250}, 256, {1, 4, 256}},
  };
  for (const Case& c : cases) {
    PlanParams p;
    p.seed = 9;
    p.epoch = 1;
    p.block_samples = 8;
    p.window = 16;
    p.global_batch = c.g;
    auto plan = GlobalPlan::Create(Starts(c.sizes), p);
    ASSERT_TRUE(plan.ok());
    const uint64_t n = (*plan)->size();
    for (uint32_t t : c.ts) {
      ASSERT_TRUE(CheckTrainers(c.g, t).ok());
      std::vector<int> hits(n, 0);
      std::set<uint64_t> ids;
      for (uint64_t b = 0; b < (*plan)->num_batches(); ++b) {
        uint64_t prev_end = b * c.g;
        for (uint32_t k = 0; k < t; ++k) {
          const auto [lo, hi] = (*plan)->Slice(b, k, t);
          EXPECT_EQ(lo, std::min(prev_end, n));  // contiguous, in trainer order
          EXPECT_LE(hi - lo, c.g / t);
          prev_end = hi;
          for (uint64_t pos = lo; pos < hi; ++pos) {
            ++hits[pos];
            ids.insert((*plan)->At(pos).sample_id);
          }
        }
      }
      for (uint64_t pos = 0; pos < n; ++pos) ASSERT_EQ(hits[pos], 1) << pos;
      EXPECT_EQ(ids.size(), n);  // every sample exactly once, none padded
    }
  }
  EXPECT_FALSE(CheckTrainers(12, 5).ok());
  EXPECT_NE(std::string(CheckTrainers(12, 5).message()).find("divide"), std::string::npos);
  EXPECT_FALSE(CheckTrainers(12, 0).ok());
}

TEST(GlobalPlan, RefusesBadParams) {
  PlanParams p;
  p.epoch = uint64_t{1} << 24;
  EXPECT_FALSE(GlobalPlan::Create({0, 5}, p).ok());
  p.epoch = 0;
  p.global_batch = 0;
  EXPECT_FALSE(GlobalPlan::Create({0, 5}, p).ok());
  p.global_batch = 4;
  EXPECT_FALSE(GlobalPlan::Create({0}, p).ok());
}


// Plan v2 (nearprep-fleet-plan/2): runs of c = L / K stream positions.
PlanParams V2(uint64_t g, uint64_t l, uint64_t k) {
  PlanParams p;
  p.seed = 77;
  p.epoch = 5;
  p.block_samples = 4;
  p.window = 10;
  p.global_batch = g;
  p.version = 2;
  p.slice_samples = l;
  p.slice_partitions = k;
  return p;
}

TEST(GlobalPlanV2, RunOfOneIsV1) {
  const std::vector<uint64_t> st = Starts({30, 1, 17, 4, 0, 9, 22, 3});
  PlanParams v1 = V2(12, 4, 4);
  v1.version = 1;
  auto a = GlobalPlan::Create(st, v1);
  auto b = GlobalPlan::Create(st, V2(12, 4, 4));  // K = L: c = 1
  auto c = GlobalPlan::Create(st, V2(12, 4, 2));  // c = 2: another order
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  bool differs = false;
  for (uint64_t x = 0; x < (*a)->size(); ++x) {
    ASSERT_EQ((*a)->At(x).sample_id, (*b)->At(x).sample_id) << x;
    differs |= (*a)->At(x).sample_id != (*c)->At(x).sample_id;
  }
  EXPECT_TRUE(differs);
  EXPECT_EQ((*b)->main_size(), (*b)->size());
}

TEST(GlobalPlanV2, ExactlyOnceAloneAtMostKPerSliceAndElastic) {
  const std::vector<std::vector<uint64_t>> layouts = {
      {100, 99, 98, 97, 96, 95},
      {30, 1, 17, 4, 0, 9, 22, 3, 3, 8, 11, 12, 64, 65, 63},
      std::vector<uint64_t>(20, 50),
      {7}};
  struct Cfg { uint64_t g, l, k; };
  for (const auto& sizes : layouts) {
    const std::vector<uint64_t> st = Starts(sizes);
    for (const Cfg cfg : {Cfg{24, 8, 2}, Cfg{24, 12, 3}, Cfg{32, 16, 4}, Cfg{32, 32, 4},
                          Cfg{16, 16, 1}}) {
      SCOPED_TRACE(testing::Message() << "C=" << sizes.size() << " G=" << cfg.g
                                      << " L=" << cfg.l << " K=" << cfg.k);
      const PlanParams p = V2(cfg.g, cfg.l, cfg.k);
      auto plan = GlobalPlan::Create(st, p);
      ASSERT_TRUE(plan.ok()) << plan.status();
      const GlobalPlan& pl = **plan;
      const uint64_t n = pl.size(), c = cfg.l / cfg.k;
      EXPECT_EQ(pl.run(), c);
      // The tails: fewer than c samples of each partition, at the end.
      EXPECT_LT(n - pl.main_size(), std::max<uint64_t>(1, sizes.size() * c));
      // Exactly once, backwards (no replay), each id in its partition.
      std::vector<GlobalPlan::Entry> all(n);
      std::set<uint64_t> seen;
      for (uint64_t x = n; x-- > 0;) {
        all[x] = pl.At(x);
        EXPECT_TRUE(seen.insert(all[x].sample_id).second) << x;
        EXPECT_GE(all[x].sample_id, st[all[x].partition]);
        EXPECT_LT(all[x].sample_id, st[all[x].partition + 1]);
      }
      EXPECT_EQ(seen.size(), n);
      // Any position alone: a fresh plan (empty caches) per position.
      for (uint64_t x : {n - 1, n / 2, uint64_t{0}, n / 3}) {
        auto fresh = GlobalPlan::Create(st, p);
        EXPECT_EQ((*fresh)->At(x).sample_id, all[x].sample_id) << x;
      }
      // At most K partitions in every aligned slice of L below main_size(),
      // exactly K (c-runs of K distinct partitions) when the runs are all
      // inside one round and C >= K.
      for (uint64_t a = 0; a + cfg.l <= pl.main_size(); a += cfg.l) {
        std::set<uint32_t> parts;
        for (uint64_t x = a; x < a + cfg.l; ++x) parts.insert(all[x].partition);
        EXPECT_LE(parts.size(), cfg.k) << "slice at " << a;
        for (uint64_t x = a; x < a + cfg.l; ++x) {  // runs: c from one partition
          EXPECT_EQ(all[x].partition, all[x - x % c].partition) << x;
        }
      }
      // Elastic: T1 trainers for the first half of the batches, T2 after;
      // every sample once, and each trainer's slice of G/T (a divisor or
      // multiple of L) within the bound.
      for (uint32_t t1 = 1; t1 <= cfg.g; ++t1) {
        if (cfg.g % t1) continue;
        const uint32_t t2 = static_cast<uint32_t>(cfg.g / t1);
        std::vector<int> count(n, 0);
        for (uint64_t g = 0; g < pl.num_batches(); ++g) {
          const uint32_t t = g < pl.num_batches() / 2 ? t1 : t2;
          const uint64_t per = cfg.g / t;
          for (uint32_t k = 0; k < t; ++k) {
            const auto [lo, hi] = pl.Slice(g, k, t);
            std::set<uint32_t> parts;
            for (uint64_t x = lo; x < hi; ++x) {
              ++count[pl.At(x).sample_id - st[0]];
              parts.insert(all[x].partition);
            }
            if (hi <= pl.main_size() && hi > lo) {
              // K per aligned group of L it overlaps (one when G/T divides L).
              const uint64_t bound = ((hi - 1) / cfg.l - lo / cfg.l + 1) * cfg.k;
              if (cfg.l % per == 0) {
                EXPECT_EQ(bound, cfg.k);
              }
              EXPECT_LE(parts.size(), bound) << "T=" << t << " k=" << k << " g=" << g;
            }
          }
        }
        for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(count[i], 1) << "T1=" << t1 << " id " << i;
      }
    }
  }
}

TEST(GlobalPlanV2, RefusesBadSlices) {
  auto bad = [](PlanParams p, const char* field) {
    auto plan = GlobalPlan::Create(Starts({40, 40}), p);
    ASSERT_FALSE(plan.ok());
    EXPECT_NE(std::string(plan.status().message()).find(field), std::string::npos)
        << plan.status();
  };
  bad(V2(24, 0, 4), "slice_samples: L = 0");
  bad(V2(24, 5, 1), "slice_samples: L = 5 must be >= 1 and divide the global batch G = 24");
  bad(V2(24, 8, 3), "slice_partitions: K = 3 must be >= 1 and divide the slice L = 8");
  bad(V2(24, 8, 0), "slice_partitions: K = 0");
  PlanParams v3 = V2(24, 8, 4);
  v3.version = 3;
  bad(v3, "plan_version: must be 1 or 2, got 3");
  EXPECT_EQ(ResolveSlice(V2(24, 0, 4), 3).slice_samples, 8u);
  EXPECT_STREQ(PlanAlgorithm(V2(24, 8, 4)), "nearprep-fleet-plan/2");
}

}  // namespace
}  // namespace nearprep::fleet
