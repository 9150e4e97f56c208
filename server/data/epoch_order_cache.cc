#include "server/data/epoch_order_cache.h"

#include <utility>

#include "server/data/epoch_plan.h"

namespace nearprep {

std::vector<uint64_t> ComputeEpochOrder(const EpochOrderKey& key) {
  if (key.shuffle && key.block_shuffle) {
    return BlockShuffledOrder(key.num_samples, key.seed, key.epoch, key.block);
  }
  return EpochOrder(key.num_samples, key.seed, key.epoch, key.shuffle);
}

EpochOrderPtr EpochOrderCache::Get(const EpochOrderKey& key) {
  MutexLock lock(&mu_);
  // Forget the orders no stream holds any more (bounded by the live ones).
  for (auto it = orders_.begin(); it != orders_.end();) {
    it = it->second.expired() ? orders_.erase(it) : std::next(it);
  }
  std::weak_ptr<const std::vector<uint64_t>>& slot = orders_[key];
  if (EpochOrderPtr live = slot.lock()) return live;
  auto order =
      std::make_shared<const std::vector<uint64_t>>(ComputeEpochOrder(key));
  slot = order;
  return order;
}

size_t EpochOrderCache::live() const {
  MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [key, order] : orders_) n += order.expired() ? 0 : 1;
  return n;
}

EpochOrderCache& SharedEpochOrders() {
  static EpochOrderCache* const cache = new EpochOrderCache();
  return *cache;
}

ShardView::ShardView(EpochOrderPtr order, uint32_t index, uint32_t count)
    : order_(std::move(order)), index_(index), count_(count == 0 ? 1 : count) {
  size_ = ShardSize(order_ == nullptr ? 0 : order_->size(), index_, count_);
}

}  // namespace nearprep
