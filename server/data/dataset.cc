// See dataset.h.
#include "server/data/dataset.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/data/block_shuffle.h"
#include "server/records/tfrecord.h"
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
  options.shard_pattern = c.shard_pattern;
  options.image_key = c.image_key;
  options.label_key = c.label_key;
  options.label_offset = c.label_offset;
  std::shared_ptr<const Storage> index_cache;
  if (!c.index_cache.empty()) {
    absl::StatusOr<std::unique_ptr<PosixStorage>> cache =
        PosixStorage::Create(c.index_cache);
    if (!cache.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("dataset '", c.name, "': index_cache: ",
                       cache.status().message()));
    }
    index_cache = std::move(cache).value();
    options.index_cache = index_cache.get();
  }
  absl::StatusOr<SampleListing> listing = ListSamples(*storage, options);
  if (!listing.ok()) return listing.status();

  std::unique_ptr<Dataset> ds(new Dataset(c));
  ds->storage_ = std::move(storage);
  ds->class_names_ = std::move(listing->class_names);
  ds->num_classes_ = listing->num_classes;
  ds->num_refused_ = listing->refused;
  ds->num_shards_ = listing->num_shards;
  ds->total_bytes_ = listing->total_bytes;
  ds->index_cache_ = std::move(index_cache);
  ds->listed_ = std::move(listing->samples);
  ds->samples_.reserve(ds->listed_.size());
  for (size_t i = 0; i < ds->listed_.size(); ++i) {
    ds->samples_.push_back(Sample{static_cast<uint64_t>(i), ds->listed_[i].key,
                                  ds->listed_[i].label});
  }
  spdlog::info("dataset '{}': {} samples, {} classes, {} refused ({}{})",
               c.name, ds->samples_.size(), ds->num_classes_,
               ds->num_refused_, c.format,
               ds->num_shards_ == 0
                   ? std::string()
                   : absl::StrCat(", ", ds->num_shards_, " shards, ",
                                  listing->indexes_cached,
                                  " indexes from cache, scan read ",
                                  listing->scan_bytes_read, " bytes in ",
                                  listing->scan_reads, " reads"));
  return ds;
}

absl::Status Dataset::CheckRecordAndKeepPayload(
    uint64_t id, std::vector<uint8_t>* record) const {
  const ListedSample& where = listed_[id];
  const auto at = [&](absl::string_view what) {
    return absl::DataLossError(Where(
        id, absl::StrCat(where.file, " offset ", where.record_offset, ": ",
                         what)));
  };
  if (record->size() != where.record_bytes ||
      record->size() < records::kTfRecordOverheadBytes) {
    return at("truncated record (the shard shrank since it was indexed)");
  }
  absl::StatusOr<uint64_t> length = records::ParseTfRecordHeader(record->data());
  if (!length.ok()) return at(length.status().message());
  if (*length + records::kTfRecordOverheadBytes != record->size()) {
    return at("record length changed since the shard was indexed");
  }
  const uint8_t* data = record->data() + records::kTfRecordHeaderBytes;
  absl::Status crc = records::CheckTfRecordData(data, *length, data + *length);
  if (!crc.ok()) return at(crc.message());
  const uint64_t start = where.offset - where.record_offset;
  if (start < records::kTfRecordHeaderBytes ||
      start + where.size > records::kTfRecordHeaderBytes + *length) {
    return at("image bytes outside the record");
  }
  std::memmove(record->data(), record->data() + start, where.size);
  record->resize(where.size);
  return absl::OkStatus();
}

std::string Dataset::Where(uint64_t id, absl::string_view what) const {
  return absl::StrCat("dataset '", config_.name, "': ", samples_[id].path,
                      ": ", what);
}

uint64_t Dataset::block_samples() const {
  return BlockSamplesFor(samples_.size(), total_bytes_);
}

absl::StatusOr<SampleFile> Dataset::OpenSample(
    uint64_t id, const OpenOptions& options) const {
  if (id >= samples_.size()) {
    return absl::OutOfRangeError(absl::StrCat("dataset '", config_.name,
                                              "': no sample ", id, " (size ",
                                              samples_.size(), ")"));
  }
  const ListedSample& where = listed_[id];
  if (!where.error.empty()) {
    return absl::DataLossError(Where(id, where.error));
  }
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
  const ListedSample& where = listed_[id];
  if (where.record_bytes == 0) {
    const absl::Status s = ReadRange(*f->file, f->offset, f->size, out);
    if (!s.ok()) return absl::DataLossError(Where(id, s.message()));
    return absl::OkStatus();
  }
  // A TFRecord sample: read the whole record (one read), check its framing
  // and CRCs again (the shard may have changed since it was indexed), then
  // keep the image bytes.
  const absl::Status s =
      ReadRange(*f->file, where.record_offset, where.record_bytes, out);
  if (!s.ok()) return absl::DataLossError(Where(id, s.message()));
  return CheckRecordAndKeepPayload(id, out);
}

}  // namespace nearprep
