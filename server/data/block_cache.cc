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
    MutexLock lock(&mu_);
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
      // Room is made, and the block charged, before it is read and under
      // the same lock: concurrent misses never overshoot the capacity
      // together. A block that still does not fit (the rest is being read
      // or is bigger than the capacity) is not read: the caller reads its
      // sample alone.
      EvictLocked(key.size);
      if (resident_ + key.size > capacity_) return Block{};
      lru_.push_front(key);
      Entry& e = entries_[key];
      e.lru = lru_.begin();
      e.touched = now;
      result = BeginLoadLocked(key, &e, &promise, &gen);
      *loaded = true;
    }
  }
  if (*loaded) FinishLoad(key, gen, load, &promise);
  return result.get();
}

BlockCache::Result BlockCache::BeginLoadLocked(const Key& key, Entry* e,
                                               std::promise<absl::StatusOr<Block>>* promise,
                                               uint64_t* gen) {
  e->result = promise->get_future().share();
  e->bytes = key.size;
  e->gen = *gen = ++generation_;
  resident_ += key.size;
  return e->result;
}

void BlockCache::FinishLoad(const Key& key, uint64_t gen, const Loader& load,
                            std::promise<absl::StatusOr<Block>>* promise) {
  absl::StatusOr<Block> block = load();
  const bool ok = block.ok();
  promise->set_value(std::move(block));
  if (ok) return;
  MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it != entries_.end() && it->second.gen == gen) {
    EraseLocked(it);  // Do not cache failures.
  }
}

size_t BlockCache::DropOldestLocked(const std::function<bool(const Entry&)>& drop,
                                    const std::function<bool()>& more) {
  size_t dropped = 0;
  for (auto lit = lru_.end(); more() && lit != lru_.begin();) {
    --lit;
    auto it = entries_.find(*lit);
    if (!drop(it->second)) continue;
    lit = std::next(lit);  // stays valid: only *it's node is erased
    EraseLocked(it);
    ++dropped;
  }
  return dropped;
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
    MutexLock lock(&mu_);
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
    const auto no_room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return resident_ + key.size > capacity_;
    };
    *idle_drops += DropOldestLocked(
        [&](const Entry& e) { return !e.record && now - e.touched >= idle; }, no_room);
    if (no_room()) {
      // Not read, also when the cache is empty: a block bigger than the
      // whole capacity would overshoot it. Drop the oldest records beyond
      // the bound (never this one: it is the most recent).
      DropOldestLocked([](const Entry& e) { return e.record; },
                       [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return records_ > kMaxRecords; });
      *outcome = Once::kNoRoom;
      return Block{};
    }
    // Read the block into the entry.
    Entry& e = it->second;
    e.record = false;
    --records_;
    result = BeginLoadLocked(key, &e, &promise, &gen);
    *outcome = Once::kLoaded;
  }
  FinishLoad(key, gen, load, &promise);
  return result.get();
}

void BlockCache::EraseLocked(std::map<Key, Entry>::iterator it) {
  resident_ -= it->second.bytes;
  if (it->second.record) --records_;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

void BlockCache::EvictLocked(uint64_t incoming) {
  // Blocks still being read are not dropped: their bytes are allocated
  // whether the entry stays or not, so they stay charged until read.
  DropOldestLocked(
      [](const Entry& e) {
        return !e.record && e.result.wait_for(std::chrono::seconds(0)) ==
                                std::future_status::ready;
      },
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return resident_ + incoming > capacity_;
      });
}

uint64_t BlockCache::resident_bytes() const {
  MutexLock lock(&mu_);
  return resident_;
}

size_t BlockCache::resident_blocks() const {
  MutexLock lock(&mu_);
  return entries_.size() - records_;
}

}  // namespace nearprep
