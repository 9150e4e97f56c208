// GlobalPlan::At() from several threads sharing one plan, the way the C++
// FleetClient's prefetch threads do (issue 23, item 1): every answer must
// equal a single-threaded plan's, while the threads make the plan's caches
// fill up and be cleared over and over. Built three times
// (tests/unit/fleet/CMakeLists.txt): plain, with ASan + UBSan and with TSan,
// each against a copy of global_plan.cc built the same way; under the
// sanitizers, a reference into a cache that another thread cleared is a
// reported heap-use-after-free / data race (the bug fixed here). Plan v1,
// and v2 and v3 with tails (the tail order is made by the first TailAt()).
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/fleet/global_plan.h"

namespace nearprep::fleet {
namespace {

constexpr uint32_t kThreads = 8;
// Walks over all positions per case (CMakeLists.txt sets more for ASan,
// which catches a freed cache entry only when the read really comes after
// the free; TSan reports the unordered free and read either way).
#ifndef NEARPREP_PLAN_THREADS_PASSES
#define NEARPREP_PLAN_THREADS_PASSES 3
#endif
constexpr int kPasses = NEARPREP_PLAN_THREADS_PASSES;

std::vector<uint64_t> Starts(const std::vector<uint64_t>& sizes) {
  std::vector<uint64_t> s = {0};
  for (uint64_t n : sizes) s.push_back(s.back() + n);
  return s;
}

// A stride coprime to n, about n / 7 + 1: consecutive calls land in
// unrelated rounds and partitions, so nearly every call misses the caches.
uint64_t Stride(uint64_t n) {
  uint64_t s = n / 7 + 1;
  while (std::gcd(s, n) != 1) ++s;
  return s;
}

// Calls At() for every position, `passes` times, from kThreads threads that
// share `plan` (each takes a slice of a strided walk, starting elsewhere in
// each pass), and checks each answer against `reference`.
void CheckThreads(const GlobalPlan& plan,
                  const std::vector<GlobalPlan::Entry>& reference, int passes) {
  const uint64_t n = plan.size();
  const uint64_t stride = Stride(n);
  // got[pass][k]: the answer for the k-th position of that pass's walk.
  std::vector<std::vector<GlobalPlan::Entry>> got(
      static_cast<size_t>(passes), std::vector<GlobalPlan::Entry>(n));
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int pass = 0; pass < passes; ++pass) {
        const uint64_t lo = n * t / kThreads, hi = n * (t + 1) / kThreads;
        for (uint64_t k = lo; k < hi; ++k) {
          const uint64_t pos = (k * stride + static_cast<uint64_t>(pass) * 7919) % n;
          got[static_cast<size_t>(pass)][k] = plan.At(pos);
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  uint64_t wrong = 0;
  for (int pass = 0; pass < passes; ++pass) {
    for (uint64_t k = 0; k < n; ++k) {
      const uint64_t pos = (k * stride + static_cast<uint64_t>(pass) * 7919) % n;
      const GlobalPlan::Entry& g = got[static_cast<size_t>(pass)][k];
      if (g.sample_id != reference[pos].sample_id ||
          g.partition != reference[pos].partition) {
        if (++wrong <= 5) {
          ADD_FAILURE() << "pass " << pass << " position " << pos << ": got sample "
                        << g.sample_id << " (partition " << g.partition << "), want "
                        << reference[pos].sample_id << " (partition "
                        << reference[pos].partition << ")";
        }
      }
    }
  }
  EXPECT_EQ(wrong, 0u);
}

std::vector<GlobalPlan::Entry> Reference(const std::vector<uint64_t>& sizes,
                                         const PlanParams& p) {
  auto plan = GlobalPlan::Create(Starts(sizes), p);
  EXPECT_TRUE(plan.ok()) << plan.status();
  std::vector<GlobalPlan::Entry> ref((*plan)->size());
  for (uint64_t pos = 0; pos < ref.size(); ++pos) ref[pos] = (*plan)->At(pos);
  return ref;
}

// Small step-1 cache bounds: the window and block caches are emptied every
// few inserts while other threads hold (shared) windows from them.
GlobalPlan::CacheLimits SmallCaches() {
  GlobalPlan::CacheLimits l;
  l.window_entries = 8 * GlobalPlan::kCacheEntryOverhead;
  l.block_entries = 8 * GlobalPlan::kCacheEntryOverhead;
  return l;
}

// Partitions of more than 1024 samples: more rounds than the plan keeps
// round orders for, so the round cache is cleared while other threads walk
// the orders they were given.
TEST(GlobalPlanThreads, ManyRoundsSharedByEightThreads) {
  std::vector<uint64_t> sizes;
  for (uint64_t p = 0; p < 40; ++p) sizes.push_back(1025 + (p * 37) % 300);
  const uint64_t rounds = *std::max_element(sizes.begin(), sizes.end());
  ASSERT_GT(rounds, GlobalPlan::kMaxCachedRounds);
  PlanParams p;
  p.seed = 0x5eed;
  p.epoch = 4;
  p.block_samples = 16;
  p.window = 64;
  p.global_batch = 1024;
  const std::vector<GlobalPlan::Entry> ref = Reference(sizes, p);
  auto plan = GlobalPlan::Create(Starts(sizes), p);
  ASSERT_TRUE(plan.ok());
  CheckThreads(**plan, ref, kPasses);
}

// Many partitions, small caches: the window and block caches are cleared
// while other threads read the windows they were given.
TEST(GlobalPlanThreads, ManyPartitionsSharedByEightThreads) {
  std::vector<uint64_t> sizes;
  for (uint64_t p = 0; p < 4396; ++p) sizes.push_back(1 + p % 3);
  PlanParams p;
  p.seed = 77;
  p.epoch = 1;
  p.block_samples = 2;
  p.window = 2;
  p.global_batch = 256;
  const std::vector<GlobalPlan::Entry> ref = Reference(sizes, p);
  auto plan = GlobalPlan::Create(Starts(sizes), p, SmallCaches());
  ASSERT_TRUE(plan.ok());
  CheckThreads(**plan, ref, kPasses);
  EXPECT_GT((*plan)->cache_counters().clears, 0u);
}

// Plan v2 and v3 (runs of c = 2, tails): the same, with tail positions
// (TailAt) read by other threads while the step-1 caches are cleared.
class GlobalPlanThreadsV : public testing::TestWithParam<uint32_t> {};
INSTANTIATE_TEST_SUITE_P(V2V3, GlobalPlanThreadsV, testing::Values(2u, 3u));
TEST_P(GlobalPlanThreadsV, RunsAndTailsSharedByEightThreads) {
  std::vector<uint64_t> sizes;
  // c = 2: tails of 1 in two of three.
  for (uint64_t p = 0; p < 4396; ++p) sizes.push_back(1 + p % 3);
  PlanParams p;
  p.seed = 78;
  p.epoch = 2;
  p.block_samples = 2;
  p.window = 3;
  p.global_batch = 256;
  p.version = GetParam();
  p.slice_partitions = 2;
  p.slice_samples = 4;
  const std::vector<GlobalPlan::Entry> ref = Reference(sizes, p);
  auto plan = GlobalPlan::Create(Starts(sizes), p, SmallCaches());
  ASSERT_TRUE(plan.ok());
  ASSERT_LT((*plan)->main_size(), (*plan)->size());  // there are tails
  CheckThreads(**plan, ref, kPasses);
  EXPECT_GT((*plan)->cache_counters().clears, 0u);
}

// Larger partitions and windows (B = 7, W = 50: windows cross short and
// whole blocks), caches that hold about two windows: eight threads make,
// share and evict windows of the same partitions, for v1, v2 and v3; each
// answer is the full-stream reference (PartitionStream: the k-th read of
// partition p is stream_p[k]).
class GlobalPlanThreadsEvict : public testing::TestWithParam<uint32_t> {};
INSTANTIATE_TEST_SUITE_P(V1V2V3, GlobalPlanThreadsEvict, testing::Values(1u, 2u, 3u));
TEST_P(GlobalPlanThreadsEvict, WindowsEvictedWhileShared) {
  std::vector<uint64_t> sizes;
  for (uint64_t p = 0; p < 24; ++p) sizes.push_back(150 + (p * 31) % 97);
  PlanParams p;
  p.seed = 91;
  p.epoch = 3;
  p.block_samples = 7;
  p.window = 50;
  p.global_batch = 64;
  p.version = GetParam();
  p.slice_partitions = 4;
  p.slice_samples = 32;  // runs of 8
  const std::vector<uint64_t> st = Starts(sizes);
  auto ref_plan = GlobalPlan::Create(st, p);
  ASSERT_TRUE(ref_plan.ok());
  std::vector<std::vector<uint64_t>> streams;
  for (uint32_t q = 0; q < sizes.size(); ++q) {
    streams.push_back(PartitionStream(sizes[q], q, p));
  }
  std::vector<uint64_t> next(sizes.size(), 0);
  std::vector<GlobalPlan::Entry> ref((*ref_plan)->size());
  for (uint64_t x = 0; x < ref.size(); ++x) {
    ref[x] = (*ref_plan)->At(x);
    const uint32_t q = ref[x].partition;
    ASSERT_EQ(ref[x].sample_id, st[q] + streams[q][next[q]++]);
  }
  GlobalPlan::CacheLimits limits;
  limits.window_entries = 2 * (50 + GlobalPlan::kCacheEntryOverhead);
  limits.block_entries = 2 * (35 + GlobalPlan::kCacheEntryOverhead);
  auto plan = GlobalPlan::Create(st, p, limits);
  ASSERT_TRUE(plan.ok());
  CheckThreads(**plan, ref, kPasses);
  EXPECT_GT((*plan)->cache_counters().clears, 0u);
}

// Few large windows (W = 4,096 over partitions of 5,000 and 3,000): the
// eight threads' strided walks read the same windows at scattered offsets,
// so they make a window's Fisher-Yates steps (lazily, from the top) while
// others read its final entries without the lock.
TEST(GlobalPlanThreads, LargeWindowsMadeLazilyByEightThreads) {
  const std::vector<uint64_t> sizes = {5000, 3000, 4097};
  for (uint32_t version : {1u, 3u}) {
    PlanParams p;
    p.seed = 123;
    p.epoch = 6;
    p.block_samples = 10;
    p.window = 4096;
    p.global_batch = 64;
    p.version = version;
    p.slice_partitions = 2;
    p.slice_samples = 8;
    const std::vector<uint64_t> st = Starts(sizes);
    std::vector<std::vector<uint64_t>> streams;
    for (uint32_t q = 0; q < sizes.size(); ++q) {
      streams.push_back(PartitionStream(sizes[q], q, p));
    }
    auto ref_plan = GlobalPlan::Create(st, p);
    ASSERT_TRUE(ref_plan.ok());
    std::vector<uint64_t> next(sizes.size(), 0);
    std::vector<GlobalPlan::Entry> ref((*ref_plan)->size());
    for (uint64_t x = 0; x < ref.size(); ++x) {
      ref[x] = (*ref_plan)->At(x);
      ASSERT_EQ(ref[x].sample_id,
                st[ref[x].partition] + streams[ref[x].partition][next[ref[x].partition]++]);
    }
    auto plan = GlobalPlan::Create(st, p);
    ASSERT_TRUE(plan.ok());
    CheckThreads(**plan, ref, kPasses);
    // 5 windows, none evicted (two threads missing the same window at once
    // may both make it).
    const GlobalPlan::CacheCounters cc = (*plan)->cache_counters();
    EXPECT_GE(cc.windows_made, 5u);
    EXPECT_LE(cc.windows_made, 5u * kThreads);
    EXPECT_EQ(cc.clears, 0u);
  }
}

}  // namespace
}  // namespace nearprep::fleet
