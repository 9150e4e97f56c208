// DecodedImageCache on its own: keys and partitions, the fingerprint check
// (replaced files), listing-version changes, budgets, and the admission
// measurement that chose kUntilFull over LRU (random per-epoch order over a
// working set twice the budget).
#include "server/data/decoded_cache.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace nearprep {
namespace {

using Admission = DecodedImageCache::Admission;

// A 1 x (bytes / 3) image whose pixels are `fill`, decoded from bytes with
// this hash.
std::shared_ptr<const DecodedImage> Image(uint64_t bytes, uint8_t fill,
                                          uint64_t hash = 7) {
  auto img = std::make_shared<DecodedImage>();
  img->height = 1;
  img->width = static_cast<int>(bytes / 3);
  img->pixels.assign(bytes, fill);
  img->encoded_size = 100;
  img->encoded_hash = hash;
  return img;
}

DecodedImageCache::Options Budget(uint64_t total, uint64_t per_dataset = 0,
                                   Admission a = Admission::kUntilFull) {
  DecodedImageCache::Options o;
  o.budget_bytes = total;
  o.dataset_budget_bytes = per_dataset;
  o.admission = a;
  return o;
}

const DecodeSettings kTf{0, uint64_t{1} << 29};
const DecodeSettings kPil{1, uint64_t{1} << 29};

const DecodedCacheStats& Of(const std::vector<DecodedCacheStats>& all,
                            const std::string& name) {
  static const DecodedCacheStats none;
  for (const auto& s : all) {
    if (s.dataset == name) return s;
  }
  return none;
}

TEST(DecodedImageCacheTest, OffWithoutBudget) {
  DecodedImageCache cache(Budget(0));
  EXPECT_FALSE(cache.enabled());
  EXPECT_FALSE(cache.Insert("a", "v1", 1, kTf, Image(30, 1)));
  EXPECT_EQ(cache.Find("a", "v1", 1, kTf, 100, 7), nullptr);
  EXPECT_FALSE(cache.WouldAdmit("a", "v1", 30));
}

TEST(DecodedImageCacheTest, HitsOnlyTheSameDatasetVersionIdAndSettings) {
  DecodedImageCache cache(Budget(1 << 20));
  ASSERT_TRUE(cache.Insert("a", "v1", 5, kTf, Image(30, 11)));
  auto hit = cache.Find("a", "v1", 5, kTf, 100, 7);
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->pixels[0], 11);
  // Another dataset with the same id and bytes: its own partition.
  EXPECT_EQ(cache.Find("b", "v1", 5, kTf, 100, 7), nullptr);
  EXPECT_EQ(cache.Find("a", "v1", 6, kTf, 100, 7), nullptr);   // other id
  EXPECT_EQ(cache.Find("a", "v1", 5, kPil, 100, 7), nullptr);  // other style
  DecodeSettings smaller = kTf;
  smaller.max_decoded_values = 1000;  // another limit: its own entry
  EXPECT_EQ(cache.Find("a", "v1", 5, smaller, 100, 7), nullptr);
  EXPECT_EQ(cache.Find("a", "v2", 5, kTf, 100, 7), nullptr);  // other version
  const auto stats = cache.Stats();
  EXPECT_EQ(Of(stats, "a").hits, 1u);
  EXPECT_EQ(Of(stats, "a").misses, 4u);
  EXPECT_EQ(Of(stats, "b").misses, 1u);
  EXPECT_EQ(Of(stats, "a").entries, 1u);
  EXPECT_EQ(Of(stats, "a").bytes, 30u);
  // The same key again is not admitted twice (another stream was first).
  EXPECT_FALSE(cache.Insert("a", "v1", 5, kTf, Image(30, 12)));
  EXPECT_EQ(cache.Find("a", "v1", 5, kTf, 100, 7)->pixels[0], 11);
}

TEST(DecodedImageCacheTest, OtherBytesDropTheEntryAndMiss) {
  DecodedImageCache cache(Budget(1 << 20));
  ASSERT_TRUE(cache.Insert("a", "v1", 5, kTf, Image(30, 11, /*hash=*/7)));
  // Same size, other hash: the file was replaced in place.
  EXPECT_EQ(cache.Find("a", "v1", 5, kTf, 100, 8), nullptr);
  // The entry is gone: not even the old bytes find it now.
  EXPECT_EQ(cache.Find("a", "v1", 5, kTf, 100, 7), nullptr);
  // Other size, same hash: also a miss.
  ASSERT_TRUE(cache.Insert("a", "v1", 6, kTf, Image(30, 11, 7)));
  EXPECT_EQ(cache.Find("a", "v1", 6, kTf, 101, 7), nullptr);
  const auto s = Of(cache.Stats(), "a");
  EXPECT_EQ(s.stale, 2u);
  EXPECT_EQ(s.evicted, 2u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.bytes, 0u);
  EXPECT_EQ(cache.resident_bytes(), 0u);
}

TEST(DecodedImageCacheTest, NewListingVersionDropsThePartition) {
  DecodedImageCache cache(Budget(1 << 20));
  for (uint64_t id = 0; id < 4; ++id) {
    ASSERT_TRUE(cache.Insert("a", "v1", id, kTf, Image(30, 1)));
  }
  ASSERT_TRUE(cache.Insert("b", "v1", 0, kTf, Image(30, 2)));
  // A reloaded dataset with another listing: lookups miss at once...
  EXPECT_EQ(cache.Find("a", "v2", 0, kTf, 100, 7), nullptr);
  // ...and its first insert drops every entry of the old listing.
  ASSERT_TRUE(cache.Insert("a", "v2", 9, kTf, Image(30, 3)));
  EXPECT_EQ(cache.Find("a", "v1", 0, kTf, 100, 7), nullptr);
  const auto stats = cache.Stats();
  EXPECT_EQ(Of(stats, "a").evicted, 4u);
  EXPECT_EQ(Of(stats, "a").entries, 1u);
  EXPECT_EQ(Of(stats, "b").entries, 1u);  // other datasets untouched
  EXPECT_EQ(cache.resident_bytes(), 60u);
  cache.DropDataset("a");
  EXPECT_EQ(cache.Find("a", "v2", 9, kTf, 100, 7), nullptr);
  EXPECT_EQ(cache.resident_bytes(), 30u);
}

TEST(DecodedImageCacheTest, AdmitsUntilFullAndKeepsWhatItHas) {
  DecodedImageCache cache(Budget(300));
  for (uint64_t id = 0; id < 10; ++id) {
    EXPECT_TRUE(cache.WouldAdmit("a", "v1", 30));
    ASSERT_TRUE(cache.Insert("a", "v1", id, kTf, Image(30, 1)));
  }
  EXPECT_FALSE(cache.WouldAdmit("a", "v1", 30));
  EXPECT_FALSE(cache.Insert("a", "v1", 10, kTf, Image(30, 1)));
  EXPECT_TRUE(cache.WouldAdmit("a", "v2", 30));  // a new listing starts empty
  // Nothing was evicted for room: the first ten stay.
  for (uint64_t id = 0; id < 10; ++id) {
    EXPECT_NE(cache.Find("a", "v1", id, kTf, 100, 7), nullptr) << id;
  }
  EXPECT_EQ(cache.resident_bytes(), 300u);
  EXPECT_EQ(Of(cache.Stats(), "a").admitted, 10u);
  EXPECT_EQ(Of(cache.Stats(), "a").evicted, 0u);
  // Larger than the whole budget: never.
  EXPECT_FALSE(cache.WouldAdmit("b", "v1", 301));
}

TEST(DecodedImageCacheTest, OneDatasetCannotTakeTheWholeCache) {
  DecodedImageCache cache(Budget(300, /*per_dataset=*/150));
  uint64_t admitted_a = 0;
  for (uint64_t id = 0; id < 20; ++id) {
    admitted_a += cache.Insert("a", "v1", id, kTf, Image(30, 1)) ? 1 : 0;
  }
  EXPECT_EQ(admitted_a, 5u);  // 150 / 30
  uint64_t admitted_b = 0;
  for (uint64_t id = 0; id < 20; ++id) {
    admitted_b += cache.Insert("b", "v1", id, kTf, Image(30, 2)) ? 1 : 0;
  }
  EXPECT_EQ(admitted_b, 5u);
  // The total also binds: a third dataset finds no room.
  EXPECT_FALSE(cache.WouldAdmit("c", "v1", 30));
  EXPECT_FALSE(cache.Insert("c", "v1", 0, kTf, Image(30, 3)));
  EXPECT_EQ(cache.resident_bytes(), 300u);
  for (const auto& s : cache.Stats()) EXPECT_EQ(s.budget_bytes, 150u);
}

// The hit rate of epochs 2..5 over `n` equal images, each epoch a fresh
// random permutation, with room for `room` of them.
double EpochHitRate(Admission admission, uint64_t n, uint64_t room) {
  DecodedImageCache cache(Budget(room * 30, 0, admission));
  std::vector<uint64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(42);
  uint64_t hits = 0, lookups = 0;
  for (int epoch = 0; epoch < 5; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    for (uint64_t id : order) {
      const bool hit = cache.Find("a", "v1", id, kTf, 100, 7) != nullptr;
      if (!hit && cache.WouldAdmit("a", "v1", 30)) {
        cache.Insert("a", "v1", id, kTf, Image(30, 1));
      }
      if (epoch > 0) {
        hits += hit ? 1 : 0;
        ++lookups;
      }
    }
  }
  return static_cast<double>(hits) / static_cast<double>(lookups);
}

TEST(DecodedImageCacheTest, UntilFullKeepsBudgetOverWorkingSetWhereLruThrashes) {
  // Working set twice the budget.
  const double until_full = EpochHitRate(Admission::kUntilFull, 2000, 1000);
  const double lru = EpochHitRate(Admission::kLru, 2000, 1000);
  std::printf("hit rate, epochs 2..5, budget = working set / 2: "
              "until-full %.3f, LRU %.3f\n", until_full, lru);
  EXPECT_NEAR(until_full, 0.5, 0.001);
  EXPECT_LT(lru, until_full - 0.1);
  // A working set within the budget: every lookup after epoch 1 hits.
  EXPECT_EQ(EpochHitRate(Admission::kUntilFull, 500, 1000), 1.0);
  EXPECT_EQ(EpochHitRate(Admission::kLru, 500, 1000), 1.0);
}

TEST(DecodedImageCacheTest, ConcurrentUseStaysWithinBudgetAndCountsEveryLookup) {
  DecodedImageCache cache(Budget(30 * 64, 30 * 40));
  constexpr int kThreads = 4;
  constexpr int kOps = 4000;
  std::atomic<uint64_t> found{0};
  std::atomic<bool> wrong{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < kOps; ++i) {
        const std::string ds = (i % 2) == 0 ? "a" : "b";
        const uint64_t id = rng() % 100;
        // The pixels say which dataset and id they belong to.
        const uint8_t fill = static_cast<uint8_t>(id + (ds == "a" ? 0 : 100));
        auto img = cache.Find(ds, "v1", id, kTf, 100, 7);
        if (img != nullptr) {
          found.fetch_add(1);
          if (img->pixels[0] != fill) wrong.store(true);
        } else {
          cache.Insert(ds, "v1", id, kTf, Image(30, fill));
        }
        if (cache.resident_bytes() > 30 * 64) wrong.store(true);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(wrong.load());
  uint64_t hits = 0, misses = 0;
  for (const auto& s : cache.Stats()) {
    hits += s.hits;
    misses += s.misses;
    EXPECT_LE(s.bytes, 30u * 40);
  }
  EXPECT_EQ(hits, found.load());
  EXPECT_EQ(hits + misses, uint64_t{kThreads} * kOps);
  EXPECT_GT(hits, 0u);
}

}  // namespace
}  // namespace nearprep

namespace nearprep {
namespace {

// Resident bytes of this process (VmRSS), for the arena's release check.
uint64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * 4096ULL : 0;
}

TEST(DecodedImageCacheTest, ArenaGivesDisjointPageAlignedMemoryAndReturnsIt) {
  DecodedImageCache cache(Budget(uint64_t{256} << 20));
  // Images as the CPU backend holds them: pixels in the arena.
  std::vector<std::shared_ptr<uint8_t>> held;
  const uint64_t bytes = 375 * 500 * 3;  // a typical ImageNet image
  for (int i = 0; i < 120; ++i) {  // ~64 MiB: more than one 32 MiB block
    std::shared_ptr<uint8_t> p = cache.AllocatePixels(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p.get()) % 4096, 0u);
    std::fill(p.get(), p.get() + bytes, static_cast<uint8_t>(i));
    held.push_back(std::move(p));
  }
  // Disjoint: every image still holds its own fill.
  for (int i = 0; i < 120; ++i) {
    const uint8_t* p = held[i].get();
    EXPECT_EQ(p[0], static_cast<uint8_t>(i));
    EXPECT_EQ(p[bytes - 1], static_cast<uint8_t>(i));
  }
  // Dropping the images hands their pages back.
  const uint64_t before = ResidentBytes();
  held.clear();
  const uint64_t after = ResidentBytes();
  EXPECT_GT(before, after + (uint64_t{40} << 20)) << before << " -> " << after;

  // A DecodedImage over arena memory reports it.
  auto img = std::make_shared<DecodedImage>();
  img->block = cache.AllocatePixels(30);
  img->block_bytes = 30;
  ASSERT_NE(img->block, nullptr);
  img->block.get()[0] = 42;
  EXPECT_EQ(img->bytes(), 30u);
  EXPECT_EQ(img->data()[0], 42);
  img->height = 1;
  img->width = 10;
  EXPECT_TRUE(cache.Insert("a", "v1", 1, kTf, img));
  EXPECT_EQ(cache.resident_bytes(), 30u);
}

}  // namespace
}  // namespace nearprep
