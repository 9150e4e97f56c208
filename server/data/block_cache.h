// BlockCache: the large reads of the block shuffle. A record dataset read in
// block-shuffle order asks for the samples of one block of consecutive
// records close together in time; the first request reads the whole block
// (the byte range of its records in one shard: one aligned read, O_DIRECT
// where the file system allows) into a buffer held here, and the block's
// other samples are copied out of that buffer instead of being read one by
// one. Blocks are dropped least-recently-used to stay within a byte
// capacity, a hard bound on resident_bytes(): a block is charged before it
// is read, under the lock that checked the room, and one that does not fit
// is not read at all (the caller reads its sample alone).
//
// Consumption mode (GetOrLoadOnce; the fleet's explicit-id requests, where
// each sample of a block is asked for once per epoch but the block's samples
// arrive spread over many requests): a block is held until each of its
// samples has been served once, then dropped at once. When a new block does
// not fit the capacity, blocks idle for longer than `idle` make room; if
// that is not enough the block is not read at all (*bypass: the caller reads
// its one sample alone), so a cache too small for the working set degrades
// to per-sample reads instead of re-reading whole blocks.
//
// Thread-safety: every method may be called concurrently. Two callers
// missing the same block wait for one read.
#ifndef NEARPREP_SERVER_DATA_BLOCK_CACHE_H_
#define NEARPREP_SERVER_DATA_BLOCK_CACHE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace nearprep {

// Bytes [offset, offset + size) of one file, in memory. `data` is aligned to
// kDirectIoAlignment (O_DIRECT reads land in it).
struct Block {
  uint64_t offset = 0;
  uint64_t size = 0;
  std::shared_ptr<uint8_t> data;
};

inline constexpr uint64_t kDirectIoAlignment = 4096;

// Read counters of a dataset (monotonic).
struct ReadCounters {
  std::atomic<uint64_t> reads{0};           // read calls issued to storage
  std::atomic<uint64_t> bytes{0};           // bytes they returned
  std::atomic<uint64_t> direct_reads{0};    // of which O_DIRECT
  std::atomic<uint64_t> buffered_fallbacks{0};  // O_DIRECT refused: buffered
  std::atomic<uint64_t> block_hits{0};      // samples served from a block
  std::atomic<uint64_t> block_misses{0};    // blocks read
  // Consumption mode: samples read alone because their block did not fit,
  // samples read alone because no other sample of their block was still to
  // come, and blocks dropped idle before all their samples were served.
  std::atomic<uint64_t> block_bypasses{0};
  std::atomic<uint64_t> block_alone{0};
  std::atomic<uint64_t> block_idle_drops{0};
  // Reads refused because the shard is no longer the file that was indexed
  // (another inode, size or mtime: replaced in place) or a record's CRC is
  // not the indexed one.
  std::atomic<uint64_t> shard_changed{0};
  // Fleet manifests with per-sample digests: samples whose bytes were
  // checked against their SHA-256, and those refused because they differ
  // (a shard rewritten in place with its size and mtime restored).
  std::atomic<uint64_t> digest_checks{0};
  std::atomic<uint64_t> digest_mismatches{0};
};

class BlockCache {
 public:
  struct Key {
    std::string file;
    uint64_t offset = 0;
    uint64_t size = 0;
    // Consumption mode: which plan (seed, epoch) reads the block, so that
    // what one epoch served does not count for another.
    uint64_t tag = 0;
    bool operator<(const Key& o) const {
      return std::tie(file, offset, size, tag) < std::tie(o.file, o.offset, o.size, o.tag);
    }
  };
  using Loader = std::function<absl::StatusOr<Block>()>;
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  // `clock`: the time source of consumption mode's idleness (tests pass
  // their own); default std::chrono::steady_clock::now.
  explicit BlockCache(uint64_t capacity_bytes, Clock clock = nullptr);

  // The block for `key`, loaded with `load` on a miss (*loaded = true then).
  // A failed load is not cached. On a miss the least recently used blocks
  // are dropped to make room first; when the block still does not fit
  // (blocks being read hold the rest, or it is bigger than the capacity)
  // it is not loaded: an empty Block (data null, *loaded false), read the
  // sample alone. So resident_bytes() never exceeds the capacity.
  absl::StatusOr<Block> GetOrLoad(const Key& key, const Loader& load,
                                  bool* loaded);

  // Consumption mode: sample `index` of the block's `count` samples is being
  // served; the sample is marked served and the block is dropped once all
  // `count` are. *outcome says how to serve it:
  //   kHit     the block was in memory (returned);
  //   kLoaded  the block was read now with `load` (returned), and is held
  //            for its samples still to come;
  //   kNoRoom  the block is not in memory and does not fit, even after
  //            dropping blocks idle longer than `idle` (*idle_drops counts
  //            them): read the sample alone (empty Block);
  //   kAlone   no other sample of the block is still to come: read the
  //            sample alone (empty Block).
  // Which samples were served is remembered for a block that is not in
  // memory too (a few bytes), so a block read later is dropped as soon as
  // its last sample is served. `never_served` (may be null): samples that
  // will never be asked for through the cache (bad records), counted as
  // served.
  enum class Once { kHit, kLoaded, kNoRoom, kAlone };
  using NeverServed = std::function<bool(uint32_t index)>;
  absl::StatusOr<Block> GetOrLoadOnce(const Key& key, uint32_t index,
                                      uint32_t count, const Loader& load,
                                      std::chrono::steady_clock::duration idle,
                                      Once* outcome, uint64_t* idle_drops,
                                      const NeverServed& never_served = nullptr);

  // Records of served samples of blocks not in memory, at most this many
  // (least recently used dropped first).
  static constexpr size_t kMaxRecords = size_t{1} << 16;

  uint64_t resident_bytes() const;
  size_t resident_blocks() const;

 private:
  using Result = std::shared_future<absl::StatusOr<Block>>;
  struct Entry {
    Result result;
    uint64_t bytes = 0;
    std::list<Key>::iterator lru;
    // Consumption mode: which samples were served, how many are left, and
    // when the block was last used. A record (`record` true) holds only
    // that, no block (bytes 0, no result).
    bool record = false;
    std::vector<bool> served;
    uint32_t left = 0;
    std::chrono::steady_clock::time_point touched;
    uint64_t gen = 0;  // tells a reloaded entry of the same key apart
  };
  // Drops least recently used entries, except blocks still being read,
  // until `incoming` more bytes fit the capacity (or nothing is left).
  void EvictLocked(uint64_t incoming) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes *e the entry of `key`'s block, loaded now by the caller through
  // FinishLoad: its result is *promise's future (returned); *gen tells it
  // apart from a later entry of the same key.
  Result BeginLoadLocked(const Key& key, Entry* e,
                         std::promise<absl::StatusOr<Block>>* promise, uint64_t* gen)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `load` (without the lock), fulfils *promise, and drops the entry
  // again if the load failed. The entry was charged before (BeginLoadLocked).
  void FinishLoad(const Key& key, uint64_t gen, const Loader& load,
                  std::promise<absl::StatusOr<Block>>* promise)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Erases, from the least recently used end, the entries `drop` picks,
  // while `more()` holds. Returns how many.
  size_t DropOldestLocked(const std::function<bool(const Entry&)>& drop,
                          const std::function<bool()>& more)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(std::map<Key, Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t capacity_;
  const Clock clock_;
  mutable Mutex mu_;
  std::map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<Key> lru_ ABSL_GUARDED_BY(mu_);  // front: most recent
  uint64_t resident_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  size_t records_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_DATA_BLOCK_CACHE_H_
