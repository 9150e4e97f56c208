// The image_folder format (sample_listing.h): root/CLASS/FILE.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/storage/listing_internal.h"

namespace nearprep {
namespace listing_internal {
namespace {

constexpr int kMaxDepth = 32;

class ImageFolderLister {
 public:
  ImageFolderLister(const Storage& storage, const ListingOptions& options,
                    Refusals* refusals, SampleListing* listing)
      : storage_(storage),
        options_(options),
        refusals_(refusals),
        listing_(listing) {
    for (const auto& e : options.extensions) {
      exts_.push_back(absl::AsciiStrToLower(e));
    }
  }

  absl::Status List() {
    std::vector<std::string> names;
    absl::Status s = Names("", &names);
    if (!s.ok()) {
      return absl::NotFoundError(absl::StrCat(
          "dataset '", options_.name, "': cannot list root ",
          storage_.Describe(""), ": ", s.message()));
    }
    std::vector<std::pair<std::string, std::string>> classes;  // key, file
    for (const auto& name : names) {
      absl::StatusOr<FileInfo> info = storage_.Lstat(name);
      if (!info.ok()) continue;
      if (info->type == FileType::kDirectory) {
        classes.emplace_back(name, name);
      } else if (info->type == FileType::kSymlink) {
        absl::StatusOr<std::string> target = storage_.Resolve(name);
        if (absl::IsPermissionDenied(target.status())) {
          refusals_->Refuse(name, "symlink leads outside the root");
        } else if (!target.ok()) {
          refusals_->Refuse(name, "dangling symlink");
        } else {
          absl::StatusOr<FileInfo> t = storage_.Stat(*target);
          if (t.ok() && t->type == FileType::kDirectory) {
            classes.emplace_back(name, *target);
          }
        }
      }
      // Files directly under the root are ignored.
    }
    for (size_t i = 0; i < classes.size(); ++i) {
      listing_->class_names.push_back(classes[i].first);
      ListClass(classes[i].first, classes[i].second, static_cast<int64_t>(i),
                1);
    }
    listing_->num_classes =
        static_cast<uint32_t>(listing_->class_names.size());
    return absl::OkStatus();
  }

 private:
  // Sorted names in folder `path`, without hidden ones.
  absl::Status Names(const std::string& path, std::vector<std::string>* out) {
    absl::Status s = storage_.ListDir(path, out);
    if (!s.ok()) return s;
    out->erase(std::remove_if(out->begin(), out->end(),
                              [](const std::string& n) {
                                return n.empty() || n[0] == '.';
                              }),
               out->end());
    std::sort(out->begin(), out->end());
    return absl::OkStatus();
  }

  bool HasExtension(const std::string& name) const {
    const size_t dot = name.rfind('.');
    if (dot == std::string::npos || dot == 0) return false;
    const std::string ext = absl::AsciiStrToLower(name.substr(dot));
    return std::find(exts_.begin(), exts_.end(), ext) != exts_.end();
  }

  void Add(const std::string& key, const std::string& file, uint64_t size,
           int64_t label) {
    ListedSample s;
    s.key = key;
    s.file = file;
    s.size = size;
    s.label = label;
    listing_->samples.push_back(std::move(s));
  }

  // Adds the images under class folder `key` (opened as `file`).
  void ListClass(const std::string& key, const std::string& file,
                 int64_t label, int depth) {
    std::vector<std::string> names;
    absl::Status s = Names(file, &names);
    if (!s.ok()) {
      refusals_->Refuse(key, absl::StrCat("cannot list folder: ", s.message()));
      return;
    }
    for (const auto& name : names) {
      const std::string vrel = key + "/" + name;
      const std::string orel = file + "/" + name;
      absl::StatusOr<FileInfo> info = storage_.Lstat(orel);
      if (!info.ok()) {
        refusals_->Refuse(vrel, info.status().message());
        continue;
      }
      switch (info->type) {
        case FileType::kDirectory:
          if (depth >= kMaxDepth) {
            refusals_->Refuse(vrel, "folder nesting too deep");
          } else {
            ListClass(vrel, orel, label, depth + 1);
          }
          break;
        case FileType::kRegular:
          if (HasExtension(name)) Add(vrel, orel, info->size, label);
          break;
        case FileType::kSymlink:
          ListSymlink(vrel, orel, name, label);
          break;
        case FileType::kOther:
          refusals_->Refuse(vrel, "not a regular file");
          break;
      }
    }
  }

  void ListSymlink(const std::string& vrel, const std::string& orel,
                   const std::string& name, int64_t label) {
    absl::StatusOr<std::string> target = storage_.Resolve(orel);
    if (absl::IsPermissionDenied(target.status())) {
      refusals_->Refuse(vrel, "symlink leads outside the root");
      return;
    }
    if (!target.ok()) {
      refusals_->Refuse(vrel, "dangling symlink");
      return;
    }
    absl::StatusOr<FileInfo> t = storage_.Stat(*target);
    if (!t.ok()) {
      refusals_->Refuse(vrel, t.status().message());
    } else if (t->type == FileType::kRegular) {
      if (HasExtension(name)) Add(vrel, *target, t->size, label);
    } else if (t->type == FileType::kDirectory) {
      refusals_->Refuse(vrel, "symlinked folder inside a class is not followed");
    } else {
      refusals_->Refuse(vrel, "not a regular file");
    }
  }

  const Storage& storage_;
  const ListingOptions& options_;
  Refusals* refusals_;
  SampleListing* listing_;
  std::vector<std::string> exts_;
};

}  // namespace

absl::Status ListImageFolder(const Storage& storage,
                             const ListingOptions& options, Refusals* refusals,
                             SampleListing* listing) {
  return ImageFolderLister(storage, options, refusals, listing).List();
}

}  // namespace listing_internal
}  // namespace nearprep
