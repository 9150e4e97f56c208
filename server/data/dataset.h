// A dataset the daemon owns: the catalogue of its samples. A manifest of
// samples with stable ids (index in the sorted sample keys, or a fleet
// manifest's global ids), listed once at start from a Storage
// (server/storage/storage.h; a folder on disk unless a test passes another):
// names, labels, where each sample's bytes are (file, or record of a
// shard), the fleet manifest and placement, the listing version, and the
// read counters and block cache its streams share.
//
// How a stream reads is not decided here: a per-stream SampleSource
// (sample_source.h) owns the read strategy (one read per sample, block
// reads for block shuffle, plan blocks for a fleet plan) and uses this
// class's read primitives (private, for the source): one sample alone, a
// block's records with one aligned read (into a cached block or a caller's
// buffer), the TFRecord framing and CRC checks, and P2P opens. ReadSample
// below is the one public read: one sample alone, for tools and tests.
//
// Formats, and what is refused at listing time: server/storage/
// sample_listing.h (image_folder, file_list, tfrecord, tar). Entries that
// resolve outside the root or that are not regular files are never served;
// every read re-checks at open time (every path component opened
// O_NOFOLLOW from the real root), so a file swapped for a symlink later is
// refused too, and a shard replaced since it was indexed is refused.
//
// Thread-safety: immutable after Open() (counters and the block cache are
// internally synchronised); reads are safe from any thread.
#ifndef NEARPREP_SERVER_DATA_DATASET_H_
#define NEARPREP_SERVER_DATA_DATASET_H_

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

namespace fleet {
struct Manifest;
struct Placement;
}  // namespace fleet

struct Sample {
  uint64_t id = 0;
  std::string path;  // Relative to the root, '/'-separated.
  int64_t label = 0;
};

struct DatasetConfig {
  std::string name;
  std::string format = "image_folder";  // file_list, tfrecord, tar
  std::string root;
  std::string list_file;  // file_list only; relative to root or absolute.
  // File extensions accepted by image_folder (lower-case, with dot).
  std::vector<std::string> extensions = {".jpg", ".jpeg", ".png", ".bmp"};
  // Maximum bytes of one file; larger files are refused when read.
  uint64_t max_file_bytes = uint64_t{64} << 20;
  // Record formats (tfrecord, tar): see ListingOptions in
  // server/storage/sample_listing.h.
  std::string shard_pattern = "*";
  std::string image_key = "image/encoded";
  std::string label_key = "image/class/label";
  int64_t label_offset = 0;
  // Folder where shard indexes are cached; empty: beside each shard.
  std::string index_cache;
  // Record formats: bytes of blocks held for block-shuffle reads
  // (block_cache.h), shared by the dataset's streams.
  uint64_t block_cache_bytes = uint64_t{256} << 20;
  // Record formats: a fleet manifest (server/fleet/manifest.h; relative to
  // root or absolute). Sample ids then follow the manifest (all its shards,
  // held here or not); the daemon holds the partitions whose shards are all
  // present with the manifest's record count and size (and CRC-32C when
  // manifest_check is "crc32c"). dataset_manifest.cc.
  std::string manifest;
  std::string manifest_check = "size";  // or "crc32c"
  // With manifest: a placement (server/fleet/placement.h; relative to root
  // or absolute) and this node's name in it, both or neither. The placement
  // must be for the manifest and name the node. It is only reported
  // (placement_version, partitions_assigned, a warning naming the
  // partitions assigned but not held and held but not assigned): what is
  // served is still what the files hold.
  std::string placement;
  std::string node;
  // A dataset from which nothing can be read (no sample listed, no
  // manifest) is a configuration error when the daemon opens it, naming
  // the layout expected and what was found; true serves it empty.
  bool allow_empty = false;
};

// The bytes of one sample, read: [data, data + size). They live either in a
// block buffer of the dataset's BlockCache (record datasets read in blocks
// by a SampleSource; `keep` holds that block alive, nothing was copied) or
// in the caller's scratch vector passed to SampleSource::Read (`keep` empty).
struct SampleView {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const uint8_t> keep;
};

// One sample of a block read into a caller's buffer (SampleSource::
// ReadBlockInto): its image bytes are [offset, offset + size) of that buffer,
// or `status` says why not (DATA_LOSS naming shard and offset).
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

class Dataset {
 public:
  // Lists the folder c.root (a PosixStorage). NOT_FOUND if root is missing
  // or not a folder; INVALID_ARGUMENT for a bad format or an unreadable
  // list file.
  static absl::StatusOr<std::unique_ptr<Dataset>> Open(const DatasetConfig& c);
  // Lists the dataset from `storage` (c.root is not used), e.g. a
  // MemStorage in tests. Same errors.
  static absl::StatusOr<std::unique_ptr<Dataset>> Open(
      const DatasetConfig& c, std::shared_ptr<const Storage> storage);

  const std::string& name() const { return config_.name; }
  const DatasetConfig& config() const { return config_; }
  const std::vector<Sample>& samples() const { return samples_; }
  size_t size() const { return samples_.size(); }
  const std::vector<std::string>& class_names() const { return class_names_; }
  uint32_t num_classes() const { return num_classes_; }
  uint64_t num_refused() const { return num_refused_; }
  // Record formats: shard files served (0 otherwise).
  uint64_t num_shards() const { return num_shards_; }
  // Sum of the samples' encoded sizes when listed.
  uint64_t total_bytes() const { return total_bytes_; }
  // SHUFFLE_MODE_BLOCK's default block: about 4 MiB of samples.
  uint64_t block_samples() const;

  const Storage& storage() const { return *storage_; }

  // Fleet datasets (config.manifest set): the manifest, the partitions held
  // here (ascending), and whether sample `id` is in one of them. Without a
  // manifest: nullptr, empty, and Holds() is true for every id < size().
  const fleet::Manifest* manifest() const { return manifest_.get(); }
  const std::vector<uint32_t>& partitions_held() const { return held_; }
  bool Holds(uint64_t id) const;
  // With config.placement: the placement and the partitions it assigns to
  // config.node (ascending). Otherwise nullptr and empty.
  const fleet::Placement* placement() const { return placement_.get(); }
  const std::vector<uint32_t>& partitions_assigned() const { return assigned_; }
  // The partitions assigned here but not held (ascending; empty without a
  // placement).
  std::vector<uint32_t> partitions_missing() const;

  // Reads the bytes of sample `id` alone (one read of its file or record)
  // into *out (resized; a file that shrank since it was opened gives what
  // is there). Errors: NOT_FOUND (gone), PERMISSION_DENIED (outside the
  // root / symlink / not regular), RESOURCE_EXHAUSTED (over
  // max_file_bytes), DATA_LOSS (I/O, a bad or changed TFRecord record),
  // OUT_OF_RANGE (id >= size()). Messages: "dataset 'NAME': PATH: reason".
  // A stream reads through its SampleSource instead.
  absl::Status ReadSample(uint64_t id, std::vector<uint8_t>* out) const;

  // What the dataset's reads cost storage (read sizes: bytes / reads).
  const ReadCounters& read_counters() const { return counters_; }
  // What the sample ids stand for, as 16 hex digits: with a manifest, the
  // start of its hash; otherwise a hash of the listing (every sample's key,
  // size and label, in id order). The same files give the same version on
  // every daemon; resume tokens carry it (resume_token.h).
  const std::string& listing_version() const { return listing_version_; }
  // Record formats: cached shard indexes refused at open (not bound to their
  // shard, malformed, a changed shard) and rebuilt.
  uint64_t indexes_rebuilt() const { return indexes_rebuilt_; }
  // Bytes of blocks held in memory now (record datasets' block reads).
  uint64_t block_cache_resident_bytes() const;

 private:
  // The read strategies (block reads, plan blocks) live in the per-stream
  // source; it reads through the primitives below.
  friend class SampleSource;

  // Blocks larger than this are not worth holding: read samples one by one.
  static constexpr uint64_t kMaxBlockBytes = uint64_t{64} << 20;

  explicit Dataset(DatasetConfig c) : config_(std::move(c)) {}

  // Primitives for SampleSource.
  // ReadSample's read, into *scratch; the view points there.
  absl::StatusOr<SampleView> ReadAlone(uint64_t id, std::vector<uint8_t>* scratch) const;
  // Whether sample `id` can be served from a block of records (a listed
  // record, not a whole file, not known bad).
  bool InBlocks(uint64_t id) const {
    return id < listed_.size() && !listed_[id].whole_file && listed_[id].error.empty();
  }
  // The block of `block_samples` that holds sample `id` (its samples in
  // id's shard): BlockBytesFor gives the bytes of buffer it needs (its
  // records' range rounded out to 4 KiB), 0 when `id` is not a TFRecord
  // sample, is known bad, or the block is over kMaxBlockBytes.
  // ReadBlockInto reads that range with one read into dst (O_DIRECT when
  // dst and the file system allow it, else buffered; counted in
  // read_counters), checks every record (TFRecord framing and CRCs) and
  // says where each sample's image bytes are in dst. dst holds `capacity`
  // bytes.
  uint64_t BlockBytesFor(uint64_t id, uint64_t block_samples) const;
  absl::StatusOr<std::vector<BlockSample>> ReadBlockInto(uint64_t id, uint64_t block_samples,
                                                         uint8_t* dst,
                                                         uint64_t capacity) const;
  // Opens sample `id` (with `options`, e.g. O_DIRECT for a P2P reader) and
  // checks its size against max_file_bytes; the caller reads
  // result.size bytes at result.offset. Same errors as ReadSample.
  absl::StatusOr<SampleFile> OpenSample(uint64_t id,
                                        const OpenOptions& options) const;
  // Checks the framing and CRCs of sample `id`'s TFRecord record, read
  // whole into [record, record + n), and returns where its image bytes start
  // in it; DATA_LOSS naming shard and offset otherwise.
  absl::StatusOr<size_t> CheckRecord(uint64_t id, const uint8_t* record,
                                     size_t n) const;
  // CheckRecord, then keeps only the image bytes in *record.
  absl::Status CheckRecordAndKeepPayload(uint64_t id,
                                         std::vector<uint8_t>* record) const;
  // Record formats: DATA_LOSS "shard FILE was replaced or rewritten ..."
  // (counted; callers add the sample) when the open `f` of shard `file`
  // is not the file that was indexed (inode, size or mtime differ: the shard
  // was replaced or rewritten while the daemon runs); its index no longer
  // says which bytes are which sample, so nothing of it is served.
  absl::Status CheckShardIdentity(const std::string& file,
                                  const RandomAccessFile& f) const;
  // With a manifest that has per-sample digests: DATA_LOSS naming the
  // sample and its shard (counted) unless the SHA-256 of [data, data + n) is
  // the manifest's digest of sample `id`; OK without digests, or for a
  // sample the manifest recorded as bad (an all-zero digest).
  absl::Status CheckDigest(uint64_t id, const uint8_t* data, size_t n) const;
  // A tar sample whose index entry says where its .cls member is (index
  // version 3): DATA_LOSS naming the sample and its shard unless that .cls
  // still holds the label the sample is served with (records::
  // CheckTarLabel; a mismatch is counted in shard_changed). The .cls bytes
  // come from [have, have + have_bytes), bytes [have_offset, ...) of the
  // shard (a block), when they lie there; else one read of `file` (the shard,
  // open; O_DIRECT is fine), or of the shard opened again when `file` is
  // null. OK for every other sample. dataset_tar_label.cc.
  absl::Status CheckTarLabel(uint64_t id, const RandomAccessFile* file,
                             const uint8_t* have = nullptr,
                             uint64_t have_offset = 0,
                             uint64_t have_bytes = 0) const;
  // "dataset 'NAME': PATH: " + what.
  std::string Where(uint64_t id, absl::string_view what) const;

  DatasetConfig config_;
  std::shared_ptr<const Storage> storage_;
  std::vector<Sample> samples_;
  // Per sample: where its bytes are (ListedSample::file, offset, size).
  std::vector<ListedSample> listed_;
  std::vector<std::string> class_names_;
  uint32_t num_classes_ = 0;
  uint64_t num_refused_ = 0;
  uint64_t num_shards_ = 0;
  uint64_t total_bytes_ = 0;
  uint64_t indexes_rebuilt_ = 0;
  std::string listing_version_;
  // Record formats: each shard as indexed (SampleListing::shards).
  std::map<std::string, FileInfo> shards_;
  std::shared_ptr<const Storage> index_cache_;
  mutable ReadCounters counters_;
  std::unique_ptr<BlockCache> block_cache_;
  std::shared_ptr<const fleet::Manifest> manifest_;
  // The manifest's per-sample digests: 32 bytes per sample id; empty without.
  std::string sample_digests_;
  std::vector<uint32_t> held_;
  std::vector<bool> held_mask_;  // per partition
  std::shared_ptr<const fleet::Placement> placement_;
  std::vector<uint32_t> assigned_;

  // Reorders *listing to the manifest's global sample ids (placeholders for
  // shards not held) and fills manifest_ / held_ (dataset_manifest.cc).
  absl::Status ApplyManifest(SampleListing* listing);
  // Reads and checks config_.placement against the manifest *m and
  // config_.node; fills placement_ / assigned_ (dataset_manifest.cc).
  absl::Status ApplyPlacement(const fleet::Manifest& m);

  // The view of sample `id` inside `block`: DATA_LOSS when the block is
  // short (the shard shrank), the TFRecord checks otherwise.
  absl::StatusOr<SampleView> ViewInBlock(uint64_t id, const Block& block) const;
  // One aligned read of [offset, offset + size) of `file` (O_DIRECT when
  // the file system takes it).
  absl::StatusOr<Block> ReadBlock(const std::string& file, uint64_t offset,
                                  uint64_t size) const;
  // Reads [begin, end) of `file` (4 KiB aligned) into dst: O_DIRECT first,
  // buffered when refused; counted. *got: bytes read.
  absl::Status ReadAlignedInto(const std::string& file, uint64_t begin, uint64_t end,
                               uint8_t* dst, uint64_t* got) const;
  // The samples [*lo, *hi) of the block of `block_samples` holding `id` that
  // live in id's file, and their records' range [*begin, *end).
  // Blocks are aligned to multiples of block_samples counted from `base`
  // (0: global ids; a partition's first id: a fleet plan's blocks).
  void BlockRange(uint64_t id, uint64_t block_samples, uint64_t* lo, uint64_t* hi,
                  uint64_t* begin, uint64_t* end, uint64_t base = 0) const;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_DATA_DATASET_H_
