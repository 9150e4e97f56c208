// A dataset the daemon owns: the catalogue of its samples. A manifest of
// samples with stable ids (index in the sorted sample keys, or a fleet
// manifest's global ids), listed once at start from a Storage
// (server/storage/storage.h; a folder on disk unless a test passes another):
// names, labels, classes, the fleet manifest and placement, the listing
// version.
//
// Nothing here reads a sample. Open() also makes the dataset's SampleStore
// (sample_store.h; store()): the storage handle, where each sample's bytes
// are, the shard identities, record and digest checks, the reads, the block
// cache and the read counters, shared by the dataset's streams. How a
// stream reads is decided by its SampleSource (sample_source.h), a strategy
// over the store and this catalogue.
//
// Formats, and what is refused at listing time: server/storage/
// sample_listing.h (image_folder, file_list, tfrecord, tar). Entries that
// resolve outside the root or that are not regular files are never served;
// every read re-checks at open time (every path component opened
// O_NOFOLLOW from the real root), so a file swapped for a symlink later is
// refused too, and a shard replaced since it was indexed is refused.
//
// Thread-safety: immutable after Open(); every method may be called from
// any thread (the store states its own, sample_store.h).
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
#include "server/data/sample_store.h"
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

  // How the samples' bytes are read (one per dataset, shared by its
  // streams; see sample_store.h).
  const SampleStore& store() const { return *store_; }

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

  // What the sample ids stand for, as 16 hex digits: with a manifest, the
  // start of its hash; otherwise a hash of the listing (every sample's key,
  // size and label, in id order). The same files give the same version on
  // every daemon; resume tokens carry it (resume_token.h).
  const std::string& listing_version() const { return listing_version_; }
  // Record formats: cached shard indexes refused at open (not bound to their
  // shard, malformed, a changed shard) and rebuilt.
  uint64_t indexes_rebuilt() const { return indexes_rebuilt_; }

 private:
  explicit Dataset(DatasetConfig c) : config_(std::move(c)) {}

  DatasetConfig config_;
  std::vector<Sample> samples_;
  std::vector<std::string> class_names_;
  uint32_t num_classes_ = 0;
  uint64_t num_refused_ = 0;
  uint64_t num_shards_ = 0;
  uint64_t total_bytes_ = 0;
  uint64_t indexes_rebuilt_ = 0;
  std::string listing_version_;
  std::shared_ptr<const Storage> index_cache_;
  std::shared_ptr<const fleet::Manifest> manifest_;
  std::vector<uint32_t> held_;
  std::vector<bool> held_mask_;  // per partition
  std::shared_ptr<const fleet::Placement> placement_;
  std::vector<uint32_t> assigned_;

  // The samples' bytes, as listed (made last by Open).
  std::unique_ptr<const SampleStore> store_;

  // Reorders *listing to the manifest's global sample ids (placeholders for
  // shards not held) and fills manifest_ / held_, and *sample_digests with
  // the manifest's per-sample digests when it has them
  // (dataset_manifest.cc). Files are read from `storage`.
  absl::Status ApplyManifest(const Storage& storage, SampleListing* listing,
                             std::string* sample_digests);
  // Reads and checks config_.placement against the manifest *m and
  // config_.node; fills placement_ / assigned_ (dataset_manifest.cc).
  absl::Status ApplyPlacement(const Storage& storage, const fleet::Manifest& m);
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_DATA_DATASET_H_
