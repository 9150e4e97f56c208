// DecodedImageCache: decode once per node (held beside the datasets, used
// by the CPU backend, server/backend/cpu_backend.h). The CPU backend keeps the full
// decoded RGB image of a sample here (exactly the pixels its own full decode
// produces: the same libjpeg-turbo settings, JpegStyle), so that the next
// epoch, and every other stream of the same dataset on this daemon, skips
// the JPEG decode. Everything after the decode (the stream's random draws,
// crop, resize, colour ops, store) runs as before on the cached pixels, so
// every output byte is unchanged (tests/unit/backend/decoded_cache_test.cc).
//
// Keys. Entries live in one partition per dataset name and are never shared
// across datasets. A partition belongs to one listing version
// (Dataset::listing_version(): what the sample ids stand for); an insert
// under another version (the dataset was reloaded and its listing changed)
// drops every entry of the old one first; a lookup under another version
// misses. Inside a partition the key is (sample id, decode settings: the
// JPEG style and the decode limit). Each entry also holds a fingerprint of
// the encoded bytes it was decoded from (their size and a 64-bit hash): the
// caller reads the sample as always (so a shard replaced since it was
// indexed is refused by the read, before the cache is asked), and a lookup
// whose bytes have a different fingerprint (a file replaced in place, same
// name) drops the entry and misses: the pixels of a replaced file are never
// served.
//
// Budget and admission. `budget_bytes` bounds the pixels held in all (0: the
// cache is off); `dataset_budget_bytes` bounds one dataset's partition (0:
// the whole budget), so one dataset cannot take the whole cache. The default
// admission, kUntilFull, admits a decode while its partition and the cache
// have room and never evicts for room: under a random per-epoch order over
// a working set W larger than the budget B it keeps a hit rate of B / W,
// where LRU (kLru, kept for the measurement in the test) falls well below
// it (each epoch's order evicts entries before they come round again).
//
// Thread-safety: every method may be called concurrently (one mutex; the
// pixels are handed out as shared_ptr<const>, so a dropped entry stays
// valid for the readers that hold it).
#ifndef NEARPREP_SERVER_DATA_DECODED_CACHE_H_
#define NEARPREP_SERVER_DATA_DECODED_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace nearprep {

// A decoded image as the cache holds it: interleaved 8-bit RGB, height *
// width * 3 bytes, either in `pixels` or in `block` (memory from
// DecodedImageCache::AllocatePixels, which takes precedence).
struct DecodedImage {
  int height = 0;
  int width = 0;
  std::vector<uint8_t> pixels;
  std::shared_ptr<uint8_t> block;
  uint64_t block_bytes = 0;
  // What it was decoded from (DecodedImageCache::Fingerprint).
  uint64_t encoded_size = 0;
  uint64_t encoded_hash = 0;

  const uint8_t* data() const {
    return block != nullptr ? block.get() : pixels.data();
  }
  uint64_t bytes() const {
    return block != nullptr ? block_bytes : pixels.size();
  }
};

// Which decode produced the pixels (part of the key): the JPEG style
// (0: TensorFlow's, 1: Pillow's; jpeg_decoder.h's JpegStyle) and the decode
// limit in force (a stream with a smaller limit must still get its error).
struct DecodeSettings {
  uint32_t style = 0;
  uint64_t max_decoded_values = 0;
  bool operator==(const DecodeSettings& o) const {
    return style == o.style && max_decoded_values == o.max_decoded_values;
  }
};

// One dataset's counters (monotonic, except bytes and entries: now).
struct DecodedCacheStats {
  std::string dataset;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t admitted = 0;
  // Entries dropped: listing version changes, replaced files, LRU.
  uint64_t evicted = 0;
  // Of the misses: an entry existed for older bytes (file replaced).
  uint64_t stale = 0;
  uint64_t bytes = 0;
  uint64_t entries = 0;
  uint64_t budget_bytes = 0;  // this dataset's budget
};

class DecodedImageCache {
 public:
  enum class Admission { kUntilFull, kLru };

  struct Options {
    uint64_t budget_bytes = 0;          // 0: off
    uint64_t dataset_budget_bytes = 0;  // 0: budget_bytes
    Admission admission = Admission::kUntilFull;
  };

  explicit DecodedImageCache(Options options);
  DecodedImageCache(const DecodedImageCache&) = delete;
  DecodedImageCache& operator=(const DecodedImageCache&) = delete;

  bool enabled() const { return options_.budget_bytes > 0; }
  const Options& options() const { return options_; }

  // The fingerprint of encoded bytes [data, data + size): their hash (the
  // size is kept beside it).
  static uint64_t Fingerprint(const uint8_t* data, size_t size);

  // The cached image of sample `id` of `dataset` at `version`, decoded with
  // `settings` from bytes of this size and hash; null on a miss (counted).
  // An entry for other bytes is dropped.
  std::shared_ptr<const DecodedImage> Find(const std::string& dataset,
                                           const std::string& version,
                                           uint64_t id,
                                           const DecodeSettings& settings,
                                           uint64_t encoded_size,
                                           uint64_t encoded_hash);

  // Whether an image of `bytes` would be admitted now (callers decode in
  // full for the cache only when it would).
  bool WouldAdmit(const std::string& dataset, const std::string& version,
                  uint64_t bytes) const;

  // Offers a decode; true when admitted. A new `version` for `dataset`
  // drops the partition's entries first.
  bool Insert(const std::string& dataset, const std::string& version,
              uint64_t id, const DecodeSettings& settings,
              std::shared_ptr<const DecodedImage> image);

  // `bytes` of uninitialised memory for an image's pixels (a decode writes
  // each byte: no zero fill), carved from blocks of 8 MiB that are faulted
  // in with one madvise(MADV_POPULATE_WRITE) call instead of a page fault
  // per 4 KiB as the decoder writes (docs/benchmarks.md: epoch 1; huge
  // pages were measured slower). Each allocation is page-aligned and its
  // pages are returned to the kernel (MADV_DONTNEED) when its last holder
  // drops it, so resident memory follows the images held (plus the unused
  // tail of each block: at most one image's size); a block is unmapped when
  // none of its images is left. Null when the memory cannot be mapped
  // (callers then decode into a vector).
  std::shared_ptr<uint8_t> AllocatePixels(uint64_t bytes);

  // Drops every entry of `dataset` (its counters stay).
  void DropDataset(const std::string& dataset);

  // Per dataset, in name order.
  std::vector<DecodedCacheStats> Stats() const;
  uint64_t resident_bytes() const;

 private:
  struct Key {
    uint64_t id = 0;
    DecodeSettings settings;
    bool operator==(const Key& o) const {
      return id == o.id && settings == o.settings;
    }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct Slot {
    std::shared_ptr<const DecodedImage> image;
    std::list<Key>::iterator lru;  // kLru only
  };
  struct Partition {
    std::string version;
    std::unordered_map<Key, Slot, KeyHash> entries;
    std::list<Key> lru;  // front: most recently used
    DecodedCacheStats stats;
  };

  void ClearLocked(Partition* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(Partition* p, const Key& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t DatasetBudget() const;

  struct Block;

  const Options options_;
  // AllocatePixels' current block (its own lock: allocating never waits
  // for lookups).
  Mutex arena_mu_;
  std::shared_ptr<Block> arena_ ABSL_GUARDED_BY(arena_mu_);
  mutable Mutex mu_;
  std::map<std::string, Partition> partitions_ ABSL_GUARDED_BY(mu_);
  uint64_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_DATA_DECODED_CACHE_H_
