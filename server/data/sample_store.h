// SampleStore: how a dataset's sample bytes are read. One per dataset (made
// by Dataset::Open, reached through Dataset::store()), shared by every
// stream of that dataset. The catalogue (Dataset, dataset.h) says what the
// samples are; the store owns everything that touches their bytes:
//  - the storage handle (server/storage/storage.h) and where each sample's
//    bytes are (its file, or its record in a shard: ListedSample);
//  - the shards' identities as indexed (inode, size, mtime): a shard
//    replaced or rewritten since is refused, none of it is served;
//  - the record checks: TFRecord framing, CRCs and the index re-checked
//    against the record itself, and the fleet manifest's per-sample
//    SHA-256 digests when it has them;
//  - the reads: one sample alone, a block of records with one aligned read
//    (O_DIRECT when the file system takes it) into the shared block cache
//    or into a caller's buffer, and opens for a P2P reader;
//  - the block cache (block_cache.h: at most block_cache_bytes of blocks)
//    and the read counters (ReadCounters).
// Which of these reads a stream uses is not decided here: the stream's
// SampleSource (sample_source.h) holds that strategy.
//
// Errors: NOT_FOUND (gone), PERMISSION_DENIED (outside the root / symlink /
// not regular), RESOURCE_EXHAUSTED (over max_file_bytes), DATA_LOSS (I/O, a
// bad or changed record, a replaced shard, a digest that differs),
// OUT_OF_RANGE (id >= size()). Messages: "dataset 'NAME': PATH: reason".
//
// Thread-safety: immutable after construction apart from the block cache
// and the counters, which are internally synchronised; every method is
// const and may be called from any number of threads at once.
#ifndef NEARPREP_SERVER_DATA_SAMPLE_STORE_H_
#define NEARPREP_SERVER_DATA_SAMPLE_STORE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/data/block_cache.h"
#include "server/storage/sample_listing.h"
#include "server/storage/storage.h"

namespace nearprep {

// The bytes of one sample, read: [data, data + size). They live either in a
// block buffer of the store's BlockCache (record datasets read in blocks;
// `keep` holds that block alive, nothing was copied) or in the caller's
// scratch vector (`keep` empty).
struct SampleView {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const uint8_t> keep;
};

// One sample of a block read into a caller's buffer (ReadBlockInto): its
// image bytes are [offset, offset + size) of that buffer, or `status` says
// why not (DATA_LOSS naming shard and offset).
struct BlockSample {
  uint64_t id = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  absl::Status status;
};

// A sample opened for reading: its bytes are [offset, offset + size) of
// `file`.
struct SampleFile {
  std::unique_ptr<RandomAccessFile> file;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// What the store needs of the dataset's configuration (DatasetConfig's
// fields of the same names).
struct SampleStoreOptions {
  std::string name;  // the dataset's, for messages
  uint64_t max_file_bytes = uint64_t{64} << 20;
  // TFRecord: the Example keys and label offset the index was built with
  // (re-checked against each record read).
  std::string image_key = "image/encoded";
  std::string label_key = "image/class/label";
  int64_t label_offset = 0;
  uint64_t block_cache_bytes = uint64_t{256} << 20;
};

class SampleStore {
 public:
  // Blocks larger than this are not worth holding: read samples one by one.
  static constexpr uint64_t kMaxBlockBytes = uint64_t{64} << 20;

  // `listed`: where each sample id's bytes are (index = id). `shards`: each
  // record shard as indexed (SampleListing::shards). `sample_digests`: a
  // fleet manifest's per-sample SHA-256 digests, 32 bytes per id (empty:
  // none).
  SampleStore(SampleStoreOptions options, std::shared_ptr<const Storage> storage,
              std::vector<ListedSample> listed,
              std::map<std::string, FileInfo> shards,
              std::string sample_digests);

  SampleStore(const SampleStore&) = delete;
  SampleStore& operator=(const SampleStore&) = delete;

  const SampleStoreOptions& options() const { return options_; }
  const Storage& storage() const { return *storage_; }
  // Sample ids are [0, size()).
  size_t size() const { return listed_.size(); }

  // --- One sample alone ---------------------------------------------------

  // Reads the bytes of sample `id` (one read of its file or record) into
  // *out (resized; a file that shrank since it was opened gives what is
  // there).
  absl::Status ReadSample(uint64_t id, std::vector<uint8_t>* out) const;
  // The same read into *scratch; the view points there (valid until
  // *scratch changes).
  absl::StatusOr<SampleView> ReadAlone(uint64_t id,
                                       std::vector<uint8_t>* scratch) const;
  // Opens sample `id` (with `options`, e.g. O_DIRECT for a P2P reader) and
  // checks the shard's identity and the size against max_file_bytes; the
  // caller reads result.size bytes at result.offset. Nothing is counted.
  absl::StatusOr<SampleFile> OpenSample(uint64_t id,
                                        const OpenOptions& options) const;

  // --- Blocks of records --------------------------------------------------
  // A block of `block_samples` is the samples of ids [base + k *
  // block_samples, base + (k + 1) * block_samples) that live in the shard of
  // the sample asked for (base 0: global ids; a fleet plan: the first id of
  // the sample's partition). Only a block's records are read, with one read
  // of their range rounded out to 4 KiB.

  // Whether sample `id` can be served from a block (a listed record, not a
  // whole file, not known bad).
  bool InBlocks(uint64_t id) const {
    return id < listed_.size() && !listed_[id].whole_file && listed_[id].error.empty();
  }

  // Through the shared block cache, least recently used blocks dropped: the
  // view of `id` inside its block (`keep` holds the block). An empty view
  // (data == nullptr) when the block is over kMaxBlockBytes or does not fit
  // the cache now: read the sample alone. Counted (hits, misses, bypasses).
  absl::StatusOr<SampleView> ReadInBlock(uint64_t id, uint64_t block_samples,
                                         uint64_t base = 0) const;
  // Through the shared block cache, each block held until every one of its
  // samples was served once (BlockCache::GetOrLoadOnce), accounted under
  // `tag` (one tag per plan: two plans' reads of a block are kept apart).
  // An empty view when the block is too large, does not fit, or no other of
  // its samples is still to come: read the sample alone. Counted.
  absl::StatusOr<SampleView> ReadInHeldBlock(uint64_t id, uint64_t block_samples,
                                             uint64_t base, uint64_t tag) const;
  // Into a caller's buffer (a P2P target): BlockBytesFor gives the bytes of
  // buffer the block of `id` needs (its records' range rounded out to
  // 4 KiB), 0 when `id` is not a TFRecord sample, is known bad, or the block
  // is over kMaxBlockBytes. ReadBlockInto reads that range with one read
  // into dst (`capacity` bytes; O_DIRECT when dst and the file system allow
  // it, else buffered; counted), checks every record and says where each
  // sample's image bytes are in dst.
  uint64_t BlockBytesFor(uint64_t id, uint64_t block_samples) const;
  absl::StatusOr<std::vector<BlockSample>> ReadBlockInto(uint64_t id, uint64_t block_samples,
                                                         uint8_t* dst,
                                                         uint64_t capacity) const;

  // --- Counters -----------------------------------------------------------

  // What the reads cost storage (read sizes: bytes / reads), block cache
  // use, refusals.
  const ReadCounters& read_counters() const { return counters_; }
  // Bytes of blocks held in memory now.
  uint64_t block_cache_resident_bytes() const;

 private:
  // The samples [*lo, *hi) of the block of `block_samples` holding `id` that
  // live in id's file, and their records' range [*begin, *end). Blocks are
  // aligned to multiples of block_samples counted from `base`.
  void BlockRange(uint64_t id, uint64_t block_samples, uint64_t* lo, uint64_t* hi,
                  uint64_t* begin, uint64_t* end, uint64_t base = 0) const;
  // The view of sample `id` inside `block`: DATA_LOSS when the block is
  // short (the shard shrank), the record and digest checks otherwise.
  absl::StatusOr<SampleView> ViewInBlock(uint64_t id, const Block& block) const;
  // One aligned read of [offset, offset + size) of `file` into a new block.
  absl::StatusOr<Block> ReadBlock(const std::string& file, uint64_t offset,
                                  uint64_t size) const;
  // Reads [begin, end) of `file` (4 KiB aligned) into dst: O_DIRECT first,
  // buffered when refused; counted. *got: bytes read.
  absl::Status ReadAlignedInto(const std::string& file, uint64_t begin, uint64_t end,
                               uint8_t* dst, uint64_t* got) const;
  // DATA_LOSS "shard FILE was replaced or rewritten ..." (counted) when the
  // open `f` of shard `file` is not the file that was indexed.
  absl::Status CheckShardIdentity(const std::string& file,
                                  const RandomAccessFile& f) const;
  // Checks the framing and CRCs of sample `id`'s TFRecord record, read whole
  // into [record, record + n), and that the index holds for it; returns
  // where its image bytes start in it; DATA_LOSS naming shard and offset.
  absl::StatusOr<size_t> CheckRecord(uint64_t id, const uint8_t* record,
                                     size_t n) const;
  // CheckRecord, then keeps only the image bytes in *record.
  absl::Status CheckRecordAndKeepPayload(uint64_t id,
                                         std::vector<uint8_t>* record) const;
  // With per-sample digests: DATA_LOSS naming the sample and its shard
  // (counted) unless the SHA-256 of [data, data + n) is sample `id`'s; OK
  // without digests, or for a sample recorded as bad (an all-zero digest).
  absl::Status CheckDigest(uint64_t id, const uint8_t* data, size_t n) const;
  // A tar sample whose index entry says where its .cls member is (index
  // version 3): DATA_LOSS naming the sample and its shard unless that .cls
  // still holds the label the sample is served with (records::
  // CheckTarLabel; a mismatch is counted in shard_changed). The .cls bytes
  // come from [have, have + have_bytes), bytes [have_offset, ...) of the
  // shard (a block), when they lie there; else one read of `file` (the shard,
  // open; O_DIRECT is fine), or of the shard opened again when `file` is
  // null. OK for every other sample. sample_store_tar_label.cc.
  absl::Status CheckTarLabel(uint64_t id, const RandomAccessFile* file,
                             const uint8_t* have = nullptr,
                             uint64_t have_offset = 0,
                             uint64_t have_bytes = 0) const;
  // "dataset 'NAME': PATH: " + what.
  std::string Where(uint64_t id, absl::string_view what) const;

  const SampleStoreOptions options_;
  const std::shared_ptr<const Storage> storage_;
  const std::vector<ListedSample> listed_;
  const std::map<std::string, FileInfo> shards_;
  const std::string sample_digests_;
  mutable ReadCounters counters_;
  mutable BlockCache block_cache_;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_DATA_SAMPLE_STORE_H_
