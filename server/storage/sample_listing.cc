// See sample_listing.h.
#include "server/storage/sample_listing.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

bool IsNearprepOwnFile(const std::string& name) {
  return name == "MANIFEST" || name == "MANIFEST.tmp" ||
         absl::EndsWith(name, ".nearprep-index") ||
         absl::StrContains(name, ".nearprep-index.tmp") ||
         absl::EndsWith(name, ".idx") ||
         absl::EndsWith(name, ".nearprep-manifest") ||
         absl::EndsWith(name, ".nearprep-manifest.tmp") ||
         absl::EndsWith(name, ".nearprep-placement") ||
         absl::EndsWith(name, ".nearprep-placement.tmp");
}

namespace {

std::string Plural(uint64_t n, const std::string& one, const std::string& many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

std::string LowerExtension(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0) return "";
  return absl::AsciiStrToLower(name.substr(dot));
}

}  // namespace

std::string ExplainEmptyListing(const Storage& storage,
                                const ListingOptions& o,
                                const SampleListing& listing) {
  std::vector<std::string> names;
  if (!storage.ListDir("", &names).ok()) return "the root cannot be listed";
  static const std::vector<std::string> kImageExts = {".jpg", ".jpeg", ".png",
                                                      ".bmp"};
  const std::vector<std::string>& exts =
      o.extensions.empty() ? kImageExts : o.extensions;
  uint64_t folders = 0, images = 0, others = 0, own = 0;
  std::set<std::string> image_exts;
  std::string first_image, first_other;
  for (const std::string& n : names) {
    if (n.empty() || n[0] == '.') continue;
    absl::StatusOr<FileInfo> info = storage.Stat(n);
    if (!info.ok()) continue;
    if (info->type == FileType::kDirectory) {
      ++folders;
      continue;
    }
    if (info->type != FileType::kRegular) continue;
    if (IsNearprepOwnFile(n)) {
      ++own;
      continue;
    }
    const std::string ext = LowerExtension(n);
    if (std::find(exts.begin(), exts.end(), ext) != exts.end()) {
      ++images;
      image_exts.insert(ext);
      if (first_image.empty()) first_image = n;
    } else {
      ++others;
      if (first_other.empty()) first_other = n;
    }
  }
  const std::string refused =
      listing.refused == 0
          ? std::string()
          : absl::StrCat(" (", Plural(listing.refused, "entry", "entries"),
                         " refused: see the log)");
  const std::string image_files = absl::StrCat(
      Plural(images, absl::StrJoin(image_exts, "/") + " file",
             absl::StrJoin(image_exts, "/") + " files"));
  if (o.format == "image_folder") {
    std::string found;
    if (folders == 0 && images == 0 && others == 0) {
      found = "the root is empty";
    } else {
      std::vector<std::string> parts;
      if (images > 0) {
        parts.push_back(image_files + " directly under the root (e.g. '" +
                        first_image + "')");
      }
      if (others > 0) {
        parts.push_back(absl::StrCat(Plural(others, "other file", "other files"),
                                     " directly under the root (e.g. '",
                                     first_other, "')"));
      }
      parts.push_back(folders == 0
                          ? std::string("no class sub-folder")
                          : absl::StrCat(Plural(folders, "sub-folder",
                                                "sub-folders"),
                                         " with no file ending in ",
                                         absl::StrJoin(exts, ", ")));
      found = absl::StrJoin(parts, ", ");
    }
    std::string hint =
        "an image folder needs class sub-folders: ROOT/CLASS/IMAGE.jpg";
    if (images > 0) {
      hint += "; move the images into class folders, or list them with "
              "list_file=FILE (format file_list: one 'path label' per line)";
    }
    if (others > 0 && images == 0) {
      hint += "; record shards need format=tfrecord or format=tar";
    }
    return absl::StrCat(found, refused, ": ", hint);
  }
  if (o.format == "file_list") {
    return absl::StrCat("the list file '", o.list_file,
                        "' names no readable image", refused,
                        ": one 'relative/path label' per line");
  }
  // tfrecord, tar.
  const std::string want =
      o.format == "tar"
          ? "WebDataset tar shards (KEY.jpg + KEY.cls members)"
          : "TFRecord shards of tf.train.Example (uncompressed)";
  if (listing.num_shards > 0) {
    return absl::StrCat(Plural(listing.num_shards, "shard", "shards"),
                        " hold no record", refused, ": expected ", want);
  }
  std::string found;
  if (others == 0 && images == 0 && own > 0) {
    found = absl::StrCat("only nearprep's own files under the root (",
                         Plural(own, "index or manifest", "indexes or manifests"),
                         "), no shard");
  } else if (others == 0 && images == 0) {
    found = absl::StrCat(
        "no file under the root", o.shard_pattern == "*" ? "" : " matches "
        "shard_pattern '" + o.shard_pattern + "'",
        folders > 0 ? absl::StrCat(" (", Plural(folders, "sub-folder",
                                                "sub-folders"),
                                   ": shards are read from the root only)")
                    : "");
  } else {
    found = absl::StrCat(Plural(others + images, "file", "files"),
                         " under the root, none served as a shard");
  }
  std::string hint = absl::StrCat(": expected ", want);
  if (images > 0 || folders > 0) {
    hint += "; a folder of images is format image_folder (no format=)";
  }
  return absl::StrCat(found, refused, hint);
}

}  // namespace nearprep
