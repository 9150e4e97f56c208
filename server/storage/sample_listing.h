// Sample listings: which samples a dataset is made of, read from a Storage
// (storage.h). A listing is taken once, when the daemon opens a dataset; the
// dataset's store (server/data/sample_store.h) then reads each sample
// through the same storage by its ListedSample.
//
// Formats (ListingOptions::format):
//  - image_folder (image_folder_listing.cc): root/CLASS/FILE; label = index
//    of CLASS among the sorted class folder names. Files directly under the
//    root are ignored.
//  - file_list (file_list_listing.cc): a text file, one "relative/path
//    label" per line ('#' starts a comment).
//  - tfrecord, tar (record_listing.cc): record shards (the regular files of
//    the root matching `shard_pattern`, sorted by name; nearprep's own
//    files are not shards: IsNearprepOwnFile below). Sample ids run over
//    the shards in that order, then records in file order; a sample's key
//    is "SHARD#RECORD" (RECORD zero-padded to 10 digits). Each shard is
//    scanned once into an index (server/records/shard_index.h), cached as
//    SHARD.nearprep-index beside it or in ListingOptions::index_cache, and
//    reused while it is bound to the shard (size, mtime, a checksum of the
//    shard's head and tail, its own checksum, every entry inside the
//    shard: shard_index.h); else rebuilt (logged, indexes_rebuilt). A shard that
//    cannot be served (compressed, not a tar file) is refused whole; one
//    damaged part-way (bad framing, truncated) is served up to the damage
//    and its tail is refused (both counted once in `refused` and logged
//    with shard and offset). A record whose framing is intact but whose
//    content is bad (data CRC, no image feature, a label that is not an
//    integer) is listed with `error` set: it fails with DATA_LOSS wherever
//    it is read, so the sample ids of the others never move.
// A format that packs many samples into one container file (a record shard)
// lists each sample as a byte range of that file: ListedSample::whole_file
// = false with its offset and size. Add a format as one more
// <format>_listing.cc and a line in ListSamples.
//
// Refusals: entries that resolve outside the root (symlinks, ".."), that are
// not regular files, or that cannot be inspected are refused (counted in
// SampleListing::refused, the first ones logged) and never listed.
// Details: names starting with '.' are ignored (hidden files and folders);
// extensions match case-insensitively; a symlink whose target stays inside
// the root is listed with its target as `file` (a reader then opens a
// symlink-free path, every component O_NOFOLLOW); a symlinked folder inside
// a class folder is not followed (refused). file_list: each line is "path
// label" split at the last run of blanks (paths may contain spaces); labels
// in [0, 2^31); absolute paths, ".." components, missing files and
// duplicates are refused; class_names is empty and num_classes is the
// largest label + 1.
//
// Thread-safety: ListSamples is reentrant (the storage is only read).
#ifndef NEARPREP_SERVER_STORAGE_SAMPLE_LISTING_H_
#define NEARPREP_SERVER_STORAGE_SAMPLE_LISTING_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/storage/storage.h"

namespace nearprep {

struct ListingOptions {
  std::string name;  // the dataset's name, for messages and log lines
  std::string format = "image_folder";  // or "file_list"
  // file_list: the list file, relative to the storage root or absolute
  // (opened with OpenOptions::no_follow = false).
  std::string list_file;
  // image_folder: accepted file extensions (with dot, any case).
  std::vector<std::string> extensions;
  // tfrecord, tar: which files of the root are shards (fnmatch pattern on
  // the file name; "*" = every regular, non-hidden file).
  std::string shard_pattern = "*";
  // tfrecord: the Example features of the image and the label.
  std::string image_key = "image/encoded";
  std::string label_key = "image/class/label";
  // tfrecord, tar: added to every label (TensorFlow's ImageNet scripts
  // store 1..1000 with 0 for background: use -1).
  int64_t label_offset = 0;
  // Where shard indexes are cached: nullptr = beside each shard (in the
  // dataset's storage; skipped if it is read-only).
  const Storage* index_cache = nullptr;
};

// One sample, as listed.
struct ListedSample {
  // The sample's name as clients see it: its path relative to the root
  // ('/'-separated). Unique; listings are sorted by key, and a sample's id
  // is its index in that order.
  std::string key;
  // What to open to read it: a symlink-free path relative to the root.
  std::string file;
  // true: the sample is the whole file, as big as it is when read.
  // false: exactly bytes [offset, offset + size) of `file`.
  bool whole_file = true;
  uint64_t offset = 0;
  uint64_t size = 0;  // bytes when listed
  int64_t label = 0;
  // Record formats: the enclosing record, read whole so its CRC can be
  // checked (tfrecord: record_bytes > 0; the image is [offset, offset+size)
  // inside it). tar: 0.
  uint64_t record_offset = 0;
  uint64_t record_bytes = 0;
  // tfrecord: the record's masked data CRC as indexed (has_data_crc), which
  // the record read at serve time must still have.
  bool has_data_crc = false;
  uint32_t data_crc = 0;
  // tar: the sample's .cls member's data, where its label came from
  // (cls_bytes 0: no .cls), which the label served must still match when
  // the sample is read (records::CheckTarLabel).
  uint64_t cls_offset = 0;
  uint64_t cls_bytes = 0;
  // Non-empty: the sample is known bad; reading it fails with DATA_LOSS
  // and this message (it names the shard and offset).
  std::string error;
};

struct SampleListing {
  std::vector<ListedSample> samples;     // sorted by key
  std::vector<std::string> class_names;  // image_folder: label -> name
  uint32_t num_classes = 0;
  uint64_t refused = 0;
  uint64_t num_shards = 0;   // record formats
  uint64_t total_bytes = 0;  // sum of the samples' sizes
  // Scan counters of record formats (0 when every index came from cache).
  uint64_t scan_bytes_read = 0;
  uint64_t scan_reads = 0;
  uint64_t indexes_cached = 0;  // indexes reused from the cache
  // Cached indexes refused (not bound to their shard, malformed, entries
  // outside the shard or out of order, a changed shard) and rebuilt.
  uint64_t indexes_rebuilt = 0;
  // Record formats: each shard as it was when indexed (size, mtime, inode),
  // by file name. A dataset refuses reads of a shard that no longer is
  // this file.
  std::map<std::string, FileInfo> shards;
};

// OK when `format` is one ListSamples knows; else INVALID_ARGUMENT naming
// the dataset and the known formats.
absl::Status CheckListingFormat(const std::string& name,
                                const std::string& format);

// Lists the samples of a dataset. INVALID_ARGUMENT for an unknown format, a
// missing or unreadable list file or a malformed list line (with its
// number); NOT_FOUND when the root cannot be listed. Messages start with
// "dataset 'NAME': ".
absl::StatusOr<SampleListing> ListSamples(const Storage& storage,
                                          const ListingOptions& options);

// Why `listing` (of `options`, from `storage`) holds no sample, for the
// error a daemon gives at start: the layout the format expects and what
// the root holds, e.g. "12 .jpg files directly under the root and no class
// sub-folder: an image folder needs ROOT/CLASS/IMAGE files (move them into
// class folders, or list them with list=FILE)". Reads only the root's
// names and types.
std::string ExplainEmptyListing(const Storage& storage,
                                const ListingOptions& options,
                                const SampleListing& listing);

// Files of a record dataset's root that nearprep itself writes and that are
// never shards: shard indexes (*.nearprep-index and their temporaries),
// DALI indexes (*.idx), fleet manifests (*.nearprep-manifest, and MANIFEST,
// what `nearprep manifest --root DIR` writes by default, with its
// temporary MANIFEST.tmp) and placements (*.nearprep-placement).
bool IsNearprepOwnFile(const std::string& name);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_STORAGE_SAMPLE_LISTING_H_
