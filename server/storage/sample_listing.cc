// See sample_listing.h.
#include "server/storage/sample_listing.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/storage/listing_internal.h"
#include "spdlog/spdlog.h"

namespace nearprep {
namespace listing_internal {

constexpr uint64_t kMaxWarnings = 20;

void Refusals::Refuse(const std::string& path, absl::string_view why) {
  if (count_ < kMaxWarnings) {
    spdlog::warn("dataset '{}': refusing '{}': {}", dataset_, path,
                 std::string(why));
  } else if (count_ == kMaxWarnings) {
    spdlog::warn("dataset '{}': more refused entries, not logged", dataset_);
  }
  ++count_;
}

}  // namespace listing_internal

absl::Status CheckListingFormat(const std::string& name,
                                const std::string& format) {
  if (format == "image_folder" || format == "file_list" ||
      format == "tfrecord" || format == "tar") {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("dataset '", name, "': unknown format '", format,
                   "' (image_folder, file_list, tfrecord or tar)"));
}

absl::StatusOr<SampleListing> ListSamples(const Storage& storage,
                                          const ListingOptions& options) {
  absl::Status s = CheckListingFormat(options.name, options.format);
  if (!s.ok()) return s;
  listing_internal::Refusals refusals(options.name);
  SampleListing listing;
  const bool records =
      options.format == "tfrecord" || options.format == "tar";
  if (options.format == "image_folder") {
    s = listing_internal::ListImageFolder(storage, options, &refusals,
                                          &listing);
  } else if (records) {
    s = listing_internal::ListRecordShards(storage, options, &refusals,
                                           &listing);
  } else {
    s = listing_internal::ListFileList(storage, options, &refusals, &listing);
  }
  if (!s.ok()) return s;
  if (!records) {  // Record formats list in id order already.
    std::sort(listing.samples.begin(), listing.samples.end(),
              [](const ListedSample& a, const ListedSample& b) {
                return a.key < b.key;
              });
  }
  for (const auto& sample : listing.samples) listing.total_bytes += sample.size;
  listing.refused = refusals.count();
  return listing;
}

}  // namespace nearprep
