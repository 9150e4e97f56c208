// Internals shared by the listing formats (sample_listing.h): the refusal
// log and one entry point per format. Not for use outside server/storage.
//
// Thread-safety: a Refusals object belongs to one listing.
#ifndef NEARPREP_SERVER_STORAGE_LISTING_INTERNAL_H_
#define NEARPREP_SERVER_STORAGE_LISTING_INTERNAL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/storage/sample_listing.h"
#include "server/storage/storage.h"

namespace nearprep {
namespace listing_internal {

// Counts refused entries and logs the first ones.
class Refusals {
 public:
  explicit Refusals(std::string dataset) : dataset_(std::move(dataset)) {}
  void Refuse(const std::string& path, absl::string_view why);
  uint64_t count() const { return count_; }

 private:
  std::string dataset_;
  uint64_t count_ = 0;
};

// Each fills listing->samples (unsorted), class_names and num_classes.
absl::Status ListImageFolder(const Storage& storage,
                             const ListingOptions& options, Refusals* refusals,
                             SampleListing* listing);
absl::Status ListFileList(const Storage& storage, const ListingOptions& options,
                          Refusals* refusals, SampleListing* listing);
// tfrecord and tar; fills num_shards and the scan counters too. Samples
// come out in id order (not to be re-sorted).
absl::Status ListRecordShards(const Storage& storage,
                              const ListingOptions& options,
                              Refusals* refusals, SampleListing* listing);

}  // namespace listing_internal
}  // namespace nearprep

#endif  // NEARPREP_SERVER_STORAGE_LISTING_INTERNAL_H_
