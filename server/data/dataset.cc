// See dataset.h.
#include "server/data/dataset.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/storage/posix_storage.h"
#include "spdlog/spdlog.h"

namespace nearprep {

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::Open(const DatasetConfig& c) {
  absl::Status s = CheckListingFormat(c.name, c.format);
  if (!s.ok()) return s;
  if (c.root.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset '", c.name, "': root is empty"));
  }
  absl::StatusOr<std::unique_ptr<PosixStorage>> storage =
      PosixStorage::Create(c.root);
  if (!storage.ok()) {
    return absl::Status(storage.status().code(),
                        absl::StrCat("dataset '", c.name, "': ",
                                     storage.status().message()));
  }
  return Open(c, std::shared_ptr<const Storage>(std::move(storage).value()));
}

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::Open(
    const DatasetConfig& c, std::shared_ptr<const Storage> storage) {
  ListingOptions options;
  options.name = c.name;
  options.format = c.format;
  options.list_file = c.list_file;
  options.extensions = c.extensions;
  absl::StatusOr<SampleListing> listing = ListSamples(*storage, options);
  if (!listing.ok()) return listing.status();

  std::unique_ptr<Dataset> ds(new Dataset(c));
  ds->storage_ = std::move(storage);
  ds->class_names_ = std::move(listing->class_names);
  ds->num_classes_ = listing->num_classes;
  ds->num_refused_ = listing->refused;
  ds->listed_ = std::move(listing->samples);
  ds->samples_.reserve(ds->listed_.size());
  for (size_t i = 0; i < ds->listed_.size(); ++i) {
    ds->samples_.push_back(Sample{static_cast<uint64_t>(i), ds->listed_[i].key,
                                  ds->listed_[i].label});
  }
  spdlog::info("dataset '{}': {} samples, {} classes, {} refused ({})", c.name,
               ds->samples_.size(), ds->num_classes_, ds->num_refused_,
               c.format);
  return ds;
}

std::string Dataset::Where(uint64_t id, absl::string_view what) const {
  return absl::StrCat("dataset '", config_.name, "': ", samples_[id].path,
                      ": ", what);
}

absl::StatusOr<SampleFile> Dataset::OpenSample(
    uint64_t id, const OpenOptions& options) const {
  if (id >= samples_.size()) {
    return absl::OutOfRangeError(absl::StrCat("dataset '", config_.name,
                                              "': no sample ", id, " (size ",
                                              samples_.size(), ")"));
  }
  const ListedSample& where = listed_[id];
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      storage_->Open(where.file, options);
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        Where(id, file.status().message()));
  }
  SampleFile out;
  out.offset = where.whole_file ? 0 : where.offset;
  out.size = where.whole_file ? (*file)->size() : where.size;
  if (out.size > config_.max_file_bytes) {
    return absl::ResourceExhaustedError(
        Where(id, absl::StrCat(out.size, " bytes exceed max_file_bytes ",
                               config_.max_file_bytes)));
  }
  out.file = std::move(file).value();
  return out;
}

absl::Status Dataset::ReadSample(uint64_t id, std::vector<uint8_t>* out) const {
  absl::StatusOr<SampleFile> f = OpenSample(id, OpenOptions{});
  if (!f.ok()) return f.status();
  const absl::Status s = ReadRange(*f->file, f->offset, f->size, out);
  if (!s.ok()) return absl::DataLossError(Where(id, s.message()));
  return absl::OkStatus();
}

}  // namespace nearprep
