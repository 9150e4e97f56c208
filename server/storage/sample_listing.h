// Sample listings: which samples a dataset is made of, read from a Storage
// (storage.h). A listing is taken once, when the daemon opens a dataset; the
// dataset (server/data/dataset.h) then reads each sample through the same
// storage by its ListedSample.
//
// Formats (ListingOptions::format):
//  - image_folder (image_folder_listing.cc): root/CLASS/FILE; label = index
//    of CLASS among the sorted class folder names. Files directly under the
//    root are ignored.
//  - file_list (file_list_listing.cc): a text file, one "relative/path
//    label" per line ('#' starts a comment).
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
};

struct SampleListing {
  std::vector<ListedSample> samples;     // sorted by key
  std::vector<std::string> class_names;  // image_folder: label -> name
  uint32_t num_classes = 0;
  uint64_t refused = 0;
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

}  // namespace nearprep

#endif  // NEARPREP_SERVER_STORAGE_SAMPLE_LISTING_H_
