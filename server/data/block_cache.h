// BlockCache: the large reads of the block shuffle. A record dataset read in
// block-shuffle order asks for the samples of one block of consecutive
// records close together in time; the first request reads the whole block
// (the byte range of its records in one shard: one aligned read, O_DIRECT
// where the file system allows) into a buffer held here, and the block's
// other samples are copied out of that buffer instead of being read one by
// one. Blocks are dropped least-recently-used beyond a byte capacity.
//
// Thread-safety: every method may be called concurrently. Two callers
// missing the same block wait for one read.
#ifndef NEARPREP_SERVER_DATA_BLOCK_CACHE_H_
#define NEARPREP_SERVER_DATA_BLOCK_CACHE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

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
};

class BlockCache {
 public:
  struct Key {
    std::string file;
    uint64_t offset = 0;
    uint64_t size = 0;
    bool operator<(const Key& o) const {
      return std::tie(file, offset, size) < std::tie(o.file, o.offset, o.size);
    }
  };
  using Loader = std::function<absl::StatusOr<Block>()>;

  explicit BlockCache(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // The block for `key`, loaded with `load` on a miss (*loaded = true then).
  // A failed load is not cached.
  absl::StatusOr<Block> GetOrLoad(const Key& key, const Loader& load,
                                  bool* loaded);

  uint64_t resident_bytes() const;

 private:
  using Result = std::shared_future<absl::StatusOr<Block>>;
  struct Entry {
    Result result;
    uint64_t bytes = 0;
    std::list<Key>::iterator lru;
  };
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t capacity_;
  mutable absl::Mutex mu_;
  std::map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<Key> lru_ ABSL_GUARDED_BY(mu_);  // front: most recent
  uint64_t resident_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_DATA_BLOCK_CACHE_H_
