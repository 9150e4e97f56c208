#include "server/fleet/global_plan.h"

#include <algorithm>
#include <set>

#include "server/plan/philox.h"

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
  PlanParams v4 = V2(24, 8, 4);
  v4.version = 4;
  bad(v4, "plan_version: must be 1, 2 or 3, got 4");
  v4.version = 0;
  bad(v4, "plan_version: must be 1, 2 or 3, got 0");
  EXPECT_EQ(ResolveSlice(V2(24, 0, 4), 3).slice_samples, 8u);
  EXPECT_STREQ(PlanAlgorithm(V2(24, 8, 4)), "nearprep-fleet-plan/2");
}

// v1 and v2's At() (the cached active order) against a walk of the whole
// round order as the text says, with C above 128 and partitions ending at
// different rounds.
std::vector<GlobalPlan::Entry> RefV1V2(const std::vector<uint64_t>& sizes, const PlanParams& p) {
  const std::vector<uint64_t> st = Starts(sizes);
  const uint64_t c = p.version == 1 ? 1 : p.slice_samples / p.slice_partitions;
  const uint32_t parts = static_cast<uint32_t>(sizes.size());
  std::vector<std::vector<uint64_t>> streams;
  uint64_t max_q = 0;
  for (uint32_t q = 0; q < parts; ++q) {
    streams.push_back(PartitionStream(sizes[q], q, p));
    max_q = std::max(max_q, sizes[q] / c);
  }
  std::vector<GlobalPlan::Entry> out;
  for (uint64_t r = 0; r < max_q; ++r) {
    for (uint32_t q : RoundOrder(parts, static_cast<uint32_t>(r), p)) {
      if (sizes[q] / c <= r) continue;
      for (uint64_t o = 0; o < c; ++o) out.push_back({st[q] + streams[q][r * c + o], q});
    }
  }
  for (uint32_t q : TailOrder(parts, p)) {
    if (p.version == 1) break;
    for (uint64_t u = c * (sizes[q] / c); u < sizes[q]; ++u) out.push_back({st[q] + streams[q][u], q});
  }
  return out;
}

TEST(GlobalPlanV2, CachedActiveOrderIsTheRoundOrderWalk) {
  std::vector<uint64_t> sizes;
  for (uint64_t q = 0; q < 300; ++q) sizes.push_back(1 + (q * 37) % 23);
  for (uint32_t version : {1u, 2u}) {
    PlanParams p = V2(24, 8, 2);
    p.version = version;
    const std::vector<GlobalPlan::Entry> want = RefV1V2(sizes, p);
    auto plan = GlobalPlan::Create(Starts(sizes), p);
    ASSERT_TRUE(plan.ok());
    ASSERT_EQ((*plan)->size(), want.size());
    for (uint64_t x = 0; x < want.size(); ++x) {
      const GlobalPlan::Entry e = (*plan)->At(x);
      ASSERT_EQ(e.sample_id, want[x].sample_id) << "v" << version << " x=" << x;
      ASSERT_EQ(e.partition, want[x].partition) << "v" << version << " x=" << x;
    }
  }
}

// Plan v3 (nearprep-fleet-plan/3): v2 with the run slots of round r
// permuted by a keyed Feistel permutation pi_r of [0, m_r).
PlanParams V3(uint64_t g, uint64_t l, uint64_t k) {
  PlanParams p = V2(g, l, k);
  p.version = 3;
  return p;
}

// pi_r(j) as docs/protocol.md writes it, with Philox directly.
uint32_t RefPi(const PlanParams& p, uint32_t r, uint32_t m, uint32_t j) {
  if (m == 1) return 0;
  uint32_t h = 1;
  while ((uint64_t{1} << (2 * h)) < m) ++h;
  const uint64_t mask = (uint64_t{1} << h) - 1;
  const uint32_t w3 = (static_cast<uint32_t>(p.epoch & 0xFFFFFF) << 8) | 10;
  uint64_t x = j;
  for (;;) {
    uint64_t lh = x >> h, rh = x & mask;
    for (uint32_t i = 0; i < 4; ++i) {
      const uint64_t f = Philox4x32({static_cast<uint32_t>(rh), r, i, w3}, PlanKey(p.seed))[0];
      const uint64_t nl = rh, nr = lh ^ (f & mask);
      lh = nl;
      rh = nr;
    }
    x = (lh << h) | rh;
    if (x < m) return static_cast<uint32_t>(x);
  }
}

// The whole v3 epoch, straightforwardly: D sorted, every round's m_r slots.
std::vector<GlobalPlan::Entry> RefV3(const std::vector<uint64_t>& sizes, const PlanParams& p) {
  const std::vector<uint64_t> st = Starts(sizes);
  const uint64_t c = p.slice_samples / p.slice_partitions;
  const uint32_t parts = static_cast<uint32_t>(sizes.size());
  std::vector<uint32_t> d;
  std::vector<std::vector<uint64_t>> streams;
  for (uint32_t q = 0; q < parts; ++q) {
    streams.push_back(PartitionStream(sizes[q], q, p));
    if (sizes[q] / c > 0) d.push_back(q);
  }
  std::sort(d.begin(), d.end(), [&](uint32_t a, uint32_t b) {
    return sizes[a] / c != sizes[b] / c ? sizes[a] / c > sizes[b] / c : a < b;
  });
  std::vector<GlobalPlan::Entry> out;
  for (uint32_t r = 0;; ++r) {
    uint32_t m = 0;
    for (uint32_t q : d) m += sizes[q] / c > r;
    if (m == 0) break;
    for (uint32_t j = 0; j < m; ++j) {
      const uint32_t q = d[RefPi(p, r, m, j)];
      for (uint64_t o = 0; o < c; ++o) out.push_back({st[q] + streams[q][r * c + o], q});
    }
  }
  for (uint32_t q : TailOrder(parts, p)) {
    for (uint64_t u = c * (sizes[q] / c); u < sizes[q]; ++u) out.push_back({st[q] + streams[q][u], q});
  }
  return out;
}

TEST(GlobalPlanV3, SlotPermutationIsAPermutation) {
  PlanParams p = V3(24, 8, 4);
  for (uint32_t m = 1; m <= 300; ++m) {
    for (uint32_t r : {0u, 7u}) {
      std::vector<char> hit(m, 0);
      for (uint32_t j = 0; j < m; ++j) {
        const uint32_t v = RunSlotPermutation(p.seed, p.epoch, r, m, j);
        ASSERT_LT(v, m) << "m=" << m << " j=" << j;
        ASSERT_FALSE(hit[v]) << "m=" << m << " j=" << j;
        hit[v] = 1;
        ASSERT_EQ(v, RefPi(p, r, m, j)) << "m=" << m << " j=" << j;
      }
    }
  }
  // Large m: 4^h exactly (no walk), just above (the most walking) and C =
  // 2^24's h = 12.
  for (uint32_t m : {16384u, 16385u, 100000u, 262145u}) {
    std::vector<char> hit(m, 0);
    uint64_t fixed = 0;
    for (uint32_t j = 0; j < m; ++j) {
      const uint32_t v = RunSlotPermutation(p.seed, p.epoch, 3, m, j);
      ASSERT_LT(v, m);
      ASSERT_FALSE(hit[v]) << "m=" << m << " j=" << j;
      hit[v] = 1;
      fixed += v == j;
    }
    EXPECT_LT(fixed, 20u) << m;  // a keyed shuffle, not the identity
  }
  // The key, the epoch and the round each change the permutation.
  PlanParams q = p;
  q.seed += 1;
  PlanParams e = p;
  e.epoch += 1;
  int same_seed = 0, same_epoch = 0, same_round = 0;
  for (uint32_t j = 0; j < 1000; ++j) {
    const uint32_t v = RunSlotPermutation(p.seed, p.epoch, 2, 1000, j);
    same_seed += v == RunSlotPermutation(q.seed, q.epoch, 2, 1000, j);
    same_epoch += v == RunSlotPermutation(e.seed, e.epoch, 2, 1000, j);
    same_round += v == RunSlotPermutation(p.seed, p.epoch, 3, 1000, j);
  }
  EXPECT_LT(same_seed, 20);
  EXPECT_LT(same_epoch, 20);
  EXPECT_LT(same_round, 20);
}

TEST(GlobalPlanV3, IsTheReferenceExactlyOnceAndAtMostKPerSlice) {
  const std::vector<std::vector<uint64_t>> layouts = {
      {100, 99, 98, 97, 96, 95},
      {30, 1, 17, 4, 0, 9, 22, 3, 3, 8, 11, 12, 64, 65, 63},
      std::vector<uint64_t>(20, 48),  // equal sizes, no tails with c | 48
      {7},                            // C = 1
      {200, 9, 9}};                   // m_r = 1 from round 9/c on
  struct Cfg { uint64_t g, l, k; };
  for (const auto& sizes : layouts) {
    const std::vector<uint64_t> st = Starts(sizes);
    for (const Cfg cfg : {Cfg{24, 8, 2}, Cfg{24, 12, 3}, Cfg{32, 16, 4}, Cfg{16, 16, 1},
                          Cfg{16, 4, 4}}) {
      SCOPED_TRACE(testing::Message() << "C=" << sizes.size() << " G=" << cfg.g
                                      << " L=" << cfg.l << " K=" << cfg.k);
      const PlanParams p = V3(cfg.g, cfg.l, cfg.k);
      auto plan = GlobalPlan::Create(st, p);
      ASSERT_TRUE(plan.ok()) << plan.status();
      const GlobalPlan& pl = **plan;
      const uint64_t n = pl.size(), c = cfg.l / cfg.k;
      EXPECT_EQ(pl.run(), c);
      const std::vector<GlobalPlan::Entry> want = RefV3(sizes, p);
      ASSERT_EQ(want.size(), n);
      std::vector<GlobalPlan::Entry> all(n);
      std::set<uint64_t> seen;
      for (uint64_t x = n; x-- > 0;) {  // backwards: no replay
        all[x] = pl.At(x);
        ASSERT_EQ(all[x].sample_id, want[x].sample_id) << x;
        ASSERT_EQ(all[x].partition, want[x].partition) << x;
        EXPECT_TRUE(seen.insert(all[x].sample_id).second) << x;
        EXPECT_GE(all[x].sample_id, st[all[x].partition]);
        EXPECT_LT(all[x].sample_id, st[all[x].partition + 1]);
      }
      EXPECT_EQ(seen.size(), n);
      for (uint64_t x : {n - 1, n / 2, uint64_t{0}, n / 3}) {  // alone, fresh caches
        auto fresh = GlobalPlan::Create(st, p);
        EXPECT_EQ((*fresh)->At(x).sample_id, all[x].sample_id) << x;
      }
      for (uint64_t a = 0; a + cfg.l <= pl.main_size(); a += cfg.l) {
        std::set<uint32_t> parts;
        for (uint64_t x = a; x < a + cfg.l; ++x) {
          parts.insert(all[x].partition);
          EXPECT_EQ(all[x].partition, all[x - x % c].partition) << x;  // runs of c
        }
        EXPECT_LE(parts.size(), cfg.k) << "slice at " << a;
      }
      // Elastic: any T dividing G reads each position once.
      for (uint32_t t : {1u, 2u, static_cast<uint32_t>(cfg.g)}) {
        std::vector<int> count(n, 0);
        for (uint64_t g = 0; g < pl.num_batches(); ++g) {
          for (uint32_t k = 0; k < t; ++k) {
            const auto [lo, hi] = pl.Slice(g, k, t);
            for (uint64_t x = lo; x < hi; ++x) ++count[pl.At(x).sample_id - st[0]];
          }
        }
        for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(count[i], 1) << "T=" << t << " id " << i;
      }
    }
  }
}

TEST(GlobalPlanV3, DiffersFromV2ButKeepsItsTails) {
  const std::vector<uint64_t> sizes = {30, 1, 17, 4, 0, 9, 22, 3, 3, 8, 11, 12, 64, 65, 63};
  auto v2 = GlobalPlan::Create(Starts(sizes), V2(24, 8, 2));
  auto v3 = GlobalPlan::Create(Starts(sizes), V3(24, 8, 2));
  ASSERT_TRUE(v2.ok() && v3.ok());
  ASSERT_EQ((*v2)->main_size(), (*v3)->main_size());
  int differs = 0;
  for (uint64_t x = 0; x < (*v2)->main_size(); ++x) {
    differs += (*v2)->At(x).sample_id != (*v3)->At(x).sample_id;
  }
  EXPECT_GT(differs, 0);
  for (uint64_t x = (*v2)->main_size(); x < (*v2)->size(); ++x) {
    EXPECT_EQ((*v2)->At(x).sample_id, (*v3)->At(x).sample_id) << x;
  }
  EXPECT_STREQ(PlanAlgorithm(V3(24, 8, 2)), "nearprep-fleet-plan/3");
  EXPECT_EQ(ResolveSlice(V3(24, 0, 4), 3).slice_samples, 8u);
  auto bad = GlobalPlan::Create(Starts({40}), V3(24, 8, 3));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("slice_partitions: K = 3"),
            std::string::npos);
}

TEST(GlobalPlanV3, ManyPartitionsWithoutRoundOrders) {
  // C = 5000 partitions of unequal sizes: every sample once and the
  // reference's order (the slot permutations walk for m_r between powers
  // of 4).
  std::vector<uint64_t> sizes;
  for (uint64_t q = 0; q < 5000; ++q) sizes.push_back(8 + (q * 7919) % 9);
  const PlanParams p = V3(64, 16, 4);
  const std::vector<GlobalPlan::Entry> want = RefV3(sizes, p);
  auto plan = GlobalPlan::Create(Starts(sizes), p);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ((*plan)->size(), want.size());
  for (uint64_t x = 0; x < want.size(); ++x) {
    ASSERT_EQ((*plan)->At(x).sample_id, want[x].sample_id) << x;
  }
}

// Step 1 is computed per window (block permutation + window, cached), never
// per stream: At() must be the full-stream reference (PartitionStream, the
// k-th read of partition p is stream_p[k]) for every position, whatever the
// shape (n_p not a multiple of B or W, W > n_p, B > n_p, n_p = 0 or 1) and
// whether the caches keep everything or evict at every insert.
TEST(GlobalPlanWindows, AtIsTheFullStreamForEveryShapeAndCacheLimit) {
  const std::vector<std::vector<uint64_t>> layouts = {
      {100, 99, 98, 1, 0, 37},  // not multiples of B or W; n_p = 1 and 0
      {5, 3, 7, 2},             // W > n_p and B > n_p for every p (shapes below)
      {64, 128, 192},           // multiples of B and W
      std::vector<uint64_t>(40, 13)};
  struct Shape { uint64_t b; uint32_t w; };
  const Shape shapes[] = {{4, 6}, {7, 5}, {16, 64}, {300, 3}, {1, 1}, {3, 1000}};
  GlobalPlan::CacheLimits tiny;  // every insert empties the cache first
  tiny.window_entries = 1;
  tiny.block_entries = 1;
  for (const auto& sizes : layouts) {
    const std::vector<uint64_t> st = Starts(sizes);
    for (const Shape sh : shapes) {
      for (uint32_t version : {1u, 2u, 3u}) {
        for (bool evict : {false, true}) {
          SCOPED_TRACE(testing::Message() << "C=" << sizes.size() << " B=" << sh.b << " W="
                                          << sh.w << " v" << version << " evict=" << evict);
          PlanParams p;
          p.seed = 0xabcdef12345ull;
          p.epoch = 5;
          p.block_samples = sh.b;
          p.window = sh.w;
          p.global_batch = 12;
          p.version = version;
          p.slice_samples = 6;
          p.slice_partitions = 2;  // runs of 3, tails
          auto plan = evict ? GlobalPlan::Create(st, p, tiny) : GlobalPlan::Create(st, p);
          ASSERT_TRUE(plan.ok()) << plan.status();
          const GlobalPlan& pl = **plan;
          std::vector<std::vector<uint64_t>> streams;
          uint64_t windows = 0, nonempty = 0;
          for (uint32_t q = 0; q < sizes.size(); ++q) {
            streams.push_back(PartitionStream(sizes[q], q, p));
            windows += (sizes[q] + sh.w - 1) / sh.w;
            nonempty += sizes[q] > 0;
          }
          std::vector<uint64_t> next(sizes.size(), 0);
          for (uint64_t x = 0; x < pl.size(); ++x) {
            const GlobalPlan::Entry e = pl.At(x);
            ASSERT_LT(e.partition, sizes.size()) << x;
            ASSERT_LT(next[e.partition], sizes[e.partition]) << x;
            ASSERT_EQ(e.sample_id, st[e.partition] + streams[e.partition][next[e.partition]++])
                << x;
          }
          // Backwards and alone (fresh plans): the same answers.
          auto back = evict ? GlobalPlan::Create(st, p, tiny) : GlobalPlan::Create(st, p);
          std::fill(next.begin(), next.end(), 0);
          std::vector<GlobalPlan::Entry> fwd(pl.size());
          for (uint64_t x = 0; x < pl.size(); ++x) fwd[x] = pl.At(x);
          for (uint64_t x = pl.size(); x-- > 0;) {
            ASSERT_EQ((*back)->At(x).sample_id, fwd[x].sample_id) << x;
          }
          const GlobalPlan::CacheCounters cc = pl.cache_counters();
          if (!evict) {
            // Everything fits: each window and each block permutation made once.
            EXPECT_EQ(cc.windows_made, windows);
            EXPECT_EQ(cc.blocks_made, nonempty);
            EXPECT_EQ(cc.clears, 0u);
          } else if (windows > 1) {
            EXPECT_GT(cc.clears, 0u);
            EXPECT_GE(cc.windows_made, windows);
          }
        }
      }
    }
  }
}

// Reading one run of a large partition makes one block permutation and the
// run's windows, not the partition's stream (n_p draws).
TEST(GlobalPlanWindows, OneRunMakesItsWindowsOnly) {
  const std::vector<uint64_t> sizes = {1000000, 999999, 3};
  for (uint32_t version : {1u, 2u, 3u}) {
    PlanParams p;
    p.seed = 3;
    p.block_samples = 64;
    p.window = 256;
    p.global_batch = 512;
    p.version = version;
    p.slice_samples = 128;
    p.slice_partitions = 4;  // runs of 32 (v2, v3)
    auto plan = GlobalPlan::Create(Starts(sizes), p);
    ASSERT_TRUE(plan.ok());
    const GlobalPlan& pl = **plan;
    const uint64_t x0 = 20000 * pl.run();  // a round far in: window > 0
    ASSERT_LT(x0, pl.main_size());
    const GlobalPlan::Entry first = pl.At(x0 - x0 % pl.run());
    for (uint64_t x = x0 - x0 % pl.run(); x < x0 - x0 % pl.run() + pl.run(); ++x) {
      const GlobalPlan::Entry e = pl.At(x);
      ASSERT_EQ(e.partition, first.partition);
    }
    const GlobalPlan::CacheCounters cc = pl.cache_counters();
    EXPECT_EQ(cc.blocks_made, 1u) << "v" << version;
    EXPECT_EQ(cc.windows_made, 1u) << "v" << version;  // a run of 32 in one window of 256
    // And the answers are the full stream's: run z is in round r (runs
    // before round r: sum_p min(q_p, r)), stream positions r*c ...
    const uint64_t c = pl.run(), z = x0 / c;
    std::vector<uint64_t> q;
    for (uint64_t n : sizes) q.push_back(n / c);
    uint64_t r = 0, before = 0;
    for (;; ++r) {
      uint64_t in_round = 0;
      for (uint64_t v : q) in_round += v > r;
      if (before + in_round > z) break;
      before += in_round;
    }
    const std::vector<uint64_t> stream =
        PartitionStream(sizes[first.partition], first.partition, p);
    for (uint64_t j = 0; j < c; ++j) {
      EXPECT_EQ(pl.At(z * c + j).sample_id, Starts(sizes)[first.partition] + stream[r * c + j]);
    }
  }
}

}  // namespace
}  // namespace nearprep::fleet
