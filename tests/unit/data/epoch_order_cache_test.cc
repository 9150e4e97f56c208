// The shared epoch orders: one object per key while held, distinct keys
// distinct orders, memory released with the last holder, and the same ids
// as the per-stream computation (EpochOrder / BlockShuffledOrder +
// ShardSamples).
#include "server/data/epoch_order_cache.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/data/block_shuffle.h"
#include "server/data/epoch_plan.h"

namespace nearprep {
namespace {

EpochOrderKey Shuffled(uint64_t n, uint64_t seed, uint64_t epoch) {
  EpochOrderKey k;
  k.num_samples = n;
  k.seed = seed;
  k.epoch = epoch;
  k.shuffle = true;
  return k;
}

TEST(EpochOrderCacheTest, SameKeySharesOneOrder) {
  EpochOrderCache cache;
  EpochOrderPtr a = cache.Get(Shuffled(1000, 7, 2));
  EpochOrderPtr b = cache.Get(Shuffled(1000, 7, 2));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(cache.live(), 1u);
  EXPECT_EQ(*a, EpochOrder(1000, 7, 2, true));
}

TEST(EpochOrderCacheTest, DifferentKeysDoNotShare) {
  EpochOrderCache cache;
  EpochOrderPtr base = cache.Get(Shuffled(1000, 7, 2));
  EpochOrderKey block = Shuffled(1000, 7, 2);
  block.block_shuffle = true;
  block.block.block_samples = 16;
  EpochOrderKey block2 = block;
  block2.block.window = 64;
  EpochOrderKey identity;
  identity.num_samples = 1000;
  const std::vector<EpochOrderKey> others = {
      Shuffled(1000, 8, 2), Shuffled(1000, 7, 3), Shuffled(999, 7, 2),
      block, block2, identity};
  std::vector<EpochOrderPtr> held;
  for (const EpochOrderKey& k : others) {
    held.push_back(cache.Get(k));
    EXPECT_NE(held.back().get(), base.get());
    EXPECT_EQ(*held.back(), ComputeEpochOrder(k));
  }
  EXPECT_EQ(cache.live(), 1u + others.size());
  EXPECT_NE(*held[0], *base);  // another seed: another permutation
  EXPECT_EQ(*held[4], BlockShuffledOrder(1000, 7, 2, block2.block));
}

TEST(EpochOrderCacheTest, KeysThatGiveTheSameOrderShare) {
  EpochOrderCache cache;
  // Without shuffle the order is the identity whatever the seed, epoch or
  // block parameters.
  EpochOrderKey a;
  a.num_samples = 100;
  a.seed = 1;
  EpochOrderKey b = a;
  b.seed = 2;
  b.epoch = 9;
  b.block_shuffle = true;
  EXPECT_EQ(cache.Get(a).get(), cache.Get(b).get());
}

TEST(EpochOrderCacheTest, ReleasedWithTheLastHolder) {
  EpochOrderCache cache;
  EpochOrderPtr a = cache.Get(Shuffled(5000, 1, 0));
  std::weak_ptr<const std::vector<uint64_t>> watch = a;
  EpochOrderPtr b = cache.Get(Shuffled(5000, 1, 0));
  a.reset();
  EXPECT_FALSE(watch.expired());  // b still holds it
  EXPECT_EQ(cache.live(), 1u);
  b.reset();
  EXPECT_TRUE(watch.expired());  // the cache itself holds no reference
  EXPECT_EQ(cache.live(), 0u);
  // Asked again: computed again, the same ids.
  EXPECT_EQ(*cache.Get(Shuffled(5000, 1, 0)), EpochOrder(5000, 1, 0, true));
}

TEST(EpochOrderCacheTest, ConcurrentFirstRequestsGetOneOrder) {
  EpochOrderCache cache;
  std::vector<EpochOrderPtr> got(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back(
        [&cache, &got, i] { got[i] = cache.Get(Shuffled(20000, 3, 1)); });
  }
  for (auto& t : threads) t.join();
  for (const EpochOrderPtr& p : got) EXPECT_EQ(p.get(), got[0].get());
}

TEST(ShardViewTest, EqualsShardSamples) {
  for (uint64_t n : {0u, 1u, 7u, 100u, 101u}) {
    auto order = std::make_shared<const std::vector<uint64_t>>(
        EpochOrder(n, 5, 1, true));
    for (uint32_t count : {0u, 1u, 3u, 8u, 200u}) {
      for (uint32_t index : {0u, 1u, 2u, 7u, 199u, 250u}) {
        SCOPED_TRACE(testing::Message()
                     << "n " << n << " shard " << index << "/" << count);
        const std::vector<uint64_t> want = ShardSamples(*order, index, count);
        ShardView view(order, index, count);
        ASSERT_EQ(view.size(), want.size());
        for (uint64_t p = 0; p < want.size(); ++p) {
          EXPECT_EQ(view[p], want[p]);
        }
      }
    }
  }
}

}  // namespace
}  // namespace nearprep
