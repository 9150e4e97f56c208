#include "server/data/block_cache.h"

#include <utility>

namespace nearprep {

absl::StatusOr<Block> BlockCache::GetOrLoad(const Key& key, const Loader& load,
                                            bool* loaded) {
  *loaded = false;
  std::promise<absl::StatusOr<Block>> promise;
  Result result;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      result = it->second.result;
    } else {
      result = promise.get_future().share();
      lru_.push_front(key);
      entries_[key] = Entry{result, key.size, lru_.begin()};
      resident_ += key.size;
      *loaded = true;
    }
  }
  if (*loaded) {
    absl::StatusOr<Block> block = load();
    const bool ok = block.ok();
    promise.set_value(std::move(block));
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (!ok && it != entries_.end()) {  // Do not cache failures.
      resident_ -= it->second.bytes;
      lru_.erase(it->second.lru);
      entries_.erase(it);
    }
    EvictLocked();
  }
  return result.get();
}

void BlockCache::EvictLocked() {
  // Keep at least the most recent block, whatever its size.
  while (resident_ > capacity_ && lru_.size() > 1) {
    auto it = entries_.find(lru_.back());
    resident_ -= it->second.bytes;
    entries_.erase(it);
    lru_.pop_back();
  }
}

uint64_t BlockCache::resident_bytes() const {
  absl::MutexLock lock(&mu_);
  return resident_;
}

}  // namespace nearprep
