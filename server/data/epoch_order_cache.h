// Epoch orders shared between streams. The order of an epoch is a pure
// function of (number of samples, seed, epoch, shuffle mode and its
// parameters) (epoch_plan.h, block_shuffle.h), and it is O(dataset): 8 bytes
// per sample. N trainers streaming the same dataset, seed and epoch used to
// compute and hold N copies (each stream its own). SharedEpochOrder returns
// one immutable order per key, computed by the first stream that asks and
// held only while some stream holds it (the cache keeps weak references, so
// its size is bounded by the orders streams hold, and an order's memory
// goes when its last stream ends).
//
// The key is the number of samples, not the dataset: two datasets of the
// same size have the same order for the same seed and epoch, so they share
// it too.
//
// A stream reads its shard through a ShardView over the shared order
// (positions shard_index, shard_index + num_shards, ...: ShardSamples
// without the copy).
//
// Thread-safety: EpochOrderCache is thread-safe; an order is immutable.
#ifndef NEARPREP_SERVER_DATA_EPOCH_ORDER_CACHE_H_
#define NEARPREP_SERVER_DATA_EPOCH_ORDER_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "server/data/block_shuffle.h"

namespace nearprep {

using EpochOrderPtr = std::shared_ptr<const std::vector<uint64_t>>;

struct EpochOrderKey {
  uint64_t num_samples = 0;
  uint64_t seed = 0;
  uint64_t epoch = 0;
  bool shuffle = false;
  // Block shuffle (with shuffle): BlockShuffledOrder with `block`.
  bool block_shuffle = false;
  BlockShuffleParams block;

  // Orders that are the same: identity ignores seed and epoch; a plain
  // shuffle ignores the block parameters.
  auto Tie() const {
    const bool blocks = shuffle && block_shuffle;
    return std::make_tuple(
        num_samples, shuffle, blocks, shuffle ? seed : 0, shuffle ? epoch : 0,
        blocks ? block.block_samples : 0, blocks ? block.open_blocks : 0u,
        blocks ? block.window : 0u);
  }
  bool operator<(const EpochOrderKey& o) const { return Tie() < o.Tie(); }
};

// The order for `key`, computed now (EpochOrder or BlockShuffledOrder).
std::vector<uint64_t> ComputeEpochOrder(const EpochOrderKey& key);

class EpochOrderCache {
 public:
  EpochOrderCache() = default;
  EpochOrderCache(const EpochOrderCache&) = delete;
  EpochOrderCache& operator=(const EpochOrderCache&) = delete;

  // The order some holder still holds for `key`, else a new one (computed
  // under the cache's lock, so concurrent first requests compute it once;
  // opens of other orders wait that long).
  EpochOrderPtr Get(const EpochOrderKey& key) ABSL_LOCKS_EXCLUDED(mu_);

  // Orders held now (entries whose order is still alive), for tests.
  size_t live() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable Mutex mu_;
  std::map<EpochOrderKey, std::weak_ptr<const std::vector<uint64_t>>> orders_
      ABSL_GUARDED_BY(mu_);
};

// The process's cache (what the pipeline's streams use).
EpochOrderCache& SharedEpochOrders();

// Positions in shard `index` of `count` of an order of `n` samples
// (count 0 is read as 1; index >= count is an empty shard).
inline uint64_t ShardSize(uint64_t n, uint64_t index, uint64_t count) {
  if (count == 0) count = 1;
  return index >= count || index >= n ? 0 : (n - index + count - 1) / count;
}

// Shard `index` of `count` of an order: positions index, index + count, ...
// (the ids ShardSamples copies out). count 0 is read as 1; index >= count
// is an empty shard.
class ShardView {
 public:
  ShardView(EpochOrderPtr order, uint32_t index, uint32_t count);

  uint64_t size() const { return size_; }
  // The id at shard position `pos` < size().
  uint64_t operator[](uint64_t pos) const {
    return (*order_)[index_ + pos * count_];
  }
  // The whole order the shard is a view of (shared).
  const EpochOrderPtr& order() const { return order_; }

 private:
  EpochOrderPtr order_;
  uint64_t index_ = 0;
  uint64_t count_ = 1;
  uint64_t size_ = 0;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_DATA_EPOCH_ORDER_CACHE_H_
