#include "server/data/block_cache.h"

#include <iterator>
#include <utility>

namespace nearprep {

BlockCache::BlockCache(uint64_t capacity_bytes, Clock clock)
    : capacity_(capacity_bytes),
      clock_(clock ? std::move(clock) : Clock(&std::chrono::steady_clock::now)) {}

absl::StatusOr<Block> BlockCache::GetOrLoad(const Key& key, const Loader& load,
                                            bool* loaded) {
  *loaded = false;
  std::promise<absl::StatusOr<Block>> promise;
  Result result;
  uint64_t gen = 0;
  const auto now = clock_();
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second.record) {  // no block: a miss
      EraseLocked(it);
      it = entries_.end();
    }
    if (it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      it->second.touched = now;
      result = it->second.result;
    } else {
      result = promise.get_future().share();
      lru_.push_front(key);
      gen = ++generation_;
      Entry& e = entries_[key];
      e.result = result;
      e.bytes = key.size;
      e.lru = lru_.begin();
      e.touched = now;
      e.gen = gen;
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
    if (!ok && it != entries_.end() && it->second.gen == gen) {
      EraseLocked(it);  // Do not cache failures.
    }
    EvictLocked();
  }
  return result.get();
}

absl::StatusOr<Block> BlockCache::GetOrLoadOnce(
    const Key& key, uint32_t index, uint32_t count, const Loader& load,
    std::chrono::steady_clock::duration idle, Once* outcome, uint64_t* idle_drops,
    const NeverServed& never_served) {
  std::promise<absl::StatusOr<Block>> promise;
  Result result;
  uint64_t gen = 0;
  const auto now = clock_();
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      Entry& e = it->second;
      lru_.splice(lru_.begin(), lru_, e.lru);
      e.touched = now;
      if (index < e.served.size() && !e.served[index]) {
        e.served[index] = true;
        --e.left;
      }
      if (!e.record) {
        *outcome = Once::kHit;
        result = e.result;
        if (e.left == 0) EraseLocked(it);  // `result` keeps the block
        return result.get();
      }
    } else {
      Entry e;
      e.record = true;
      e.served.assign(count, false);
      e.left = count;
      for (uint32_t i = 0; i < count; ++i) {
        if (i == index || (never_served && never_served(i))) {
          e.served[i] = true;
          --e.left;
        }
      }
      e.touched = now;
      lru_.push_front(key);
      e.lru = lru_.begin();
      it = entries_.emplace(key, std::move(e)).first;
      ++records_;
    }
    // The block is not in memory; `it` records what was served.
    if (it->second.left == 0) {
      EraseLocked(it);
      *outcome = Once::kAlone;
      return Block{};
    }
    // Make room from the least recently used end: blocks idle too long
    // (their remaining samples went elsewhere, or their epoch ended).
    auto lit = lru_.end();
    while (resident_ + key.size > capacity_ && lit != lru_.begin()) {
      --lit;
      auto eit = entries_.find(*lit);
      if (eit->second.record || now - eit->second.touched < idle) continue;
      ++*idle_drops;
      lit = std::next(lit);
      EraseLocked(eit);
    }
    if (resident_ + key.size > capacity_ && resident_ > 0) {
      // Drop the oldest records beyond the bound (never this one: it is
      // the most recent).
      for (auto r = lru_.end(); records_ > kMaxRecords && r != lru_.begin();) {
        --r;
        auto eit = entries_.find(*r);
        if (!eit->second.record) continue;
        r = std::next(r);
        EraseLocked(eit);
      }
      *outcome = Once::kNoRoom;
      return Block{};
    }
    // Read the block into the entry.
    Entry& e = it->second;
    e.record = false;
    --records_;
    result = promise.get_future().share();
    e.result = result;
    e.bytes = key.size;
    e.gen = gen = ++generation_;
    resident_ += key.size;
    *outcome = Once::kLoaded;
  }
  absl::StatusOr<Block> block = load();
  const bool ok = block.ok();
  promise.set_value(std::move(block));
  if (!ok) {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second.gen == gen) EraseLocked(it);
  }
  return result.get();
}

void BlockCache::EraseLocked(std::map<Key, Entry>::iterator it) {
  resident_ -= it->second.bytes;
  if (it->second.record) --records_;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

void BlockCache::EvictLocked() {
  // Keep at least the most recent block, whatever its size.
  while (resident_ > capacity_ && lru_.size() > 1) {
    EraseLocked(entries_.find(lru_.back()));
  }
}

uint64_t BlockCache::resident_bytes() const {
  absl::MutexLock lock(&mu_);
  return resident_;
}

size_t BlockCache::resident_blocks() const {
  absl::MutexLock lock(&mu_);
  return entries_.size() - records_;
}

}  // namespace nearprep
