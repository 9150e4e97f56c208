// See dataset.h.
#include "server/data/dataset.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/data/block_shuffle.h"
#include "server/fleet/manifest.h"
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
  // Nothing to read is a configuration error (a fleet node may hold no
  // shard of its manifest yet: that is reported as missing partitions).
  if (listing->samples.empty() && c.manifest.empty() && !c.allow_empty) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset '", c.name, "' (", c.format, ", root ", c.root,
        "): no samples: ", ExplainEmptyListing(*storage, options, *listing),
        ". To serve it empty on purpose set allow_empty: true "
        "(--dataset NAME=ROOT,allow_empty=true)"));
  }

  std::unique_ptr<Dataset> ds(new Dataset(c));
  std::string sample_digests;
  if (!c.manifest.empty()) {
    if (absl::Status m = ds->ApplyManifest(*storage, &*listing, &sample_digests); !m.ok()) {
      return m;
    }
  } else if (!c.placement.empty() || !c.node.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset '", c.name, "': ", c.placement.empty() ? "node" : "placement",
        ": only with manifest (a placement assigns a manifest's partitions)"));
  }
  ds->class_names_ = std::move(listing->class_names);
  ds->num_classes_ = listing->num_classes;
  ds->num_refused_ = listing->refused;
  ds->num_shards_ = listing->num_shards;
  ds->total_bytes_ = listing->total_bytes;
  ds->indexes_rebuilt_ = listing->indexes_rebuilt;
  ds->index_cache_ = std::move(index_cache);
  const std::vector<ListedSample>& listed = listing->samples;
  if (ds->manifest_) {
    ds->listing_version_ = ds->manifest_->hash.substr(0, 16);
  } else {
    // FNV-1a 64 (stable across processes and machines, unlike absl::Hash).
    uint64_t h = 14695981039346656037ull;
    auto mix = [&h](absl::string_view bytes) {
      for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
    };
    for (const ListedSample& s : listed) {
      mix(s.key);
      mix(absl::StrCat("\n", s.size, " ", s.label, s.error.empty() ? "\n" : " bad\n"));
    }
    char hex[24];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
    ds->listing_version_ = hex;
  }
  ds->samples_.reserve(listed.size());
  for (size_t i = 0; i < listed.size(); ++i) {
    ds->samples_.push_back(Sample{static_cast<uint64_t>(i), listed[i].key, listed[i].label});
  }
  spdlog::info("dataset '{}': {} samples, {} classes, {} refused ({}{})",
               c.name, ds->samples_.size(), ds->num_classes_,
               ds->num_refused_, c.format,
               ds->num_shards_ == 0
                   ? std::string()
                   : absl::StrCat(", ", ds->num_shards_, " shards, ",
                                  listing->indexes_cached,
                                  " indexes from cache, ",
                                  listing->indexes_rebuilt,
                                  " cached indexes rebuilt, scan read ",
                                  listing->scan_bytes_read, " bytes in ",
                                  listing->scan_reads, " reads"));
  SampleStoreOptions so;
  so.name = c.name;
  so.max_file_bytes = c.max_file_bytes;
  so.image_key = c.image_key;
  so.label_key = c.label_key;
  so.label_offset = c.label_offset;
  so.block_cache_bytes = c.block_cache_bytes;
  ds->store_ = std::make_unique<const SampleStore>(
      std::move(so), std::move(storage), std::move(listing->samples),
      std::move(listing->shards), std::move(sample_digests));
  return ds;
}

uint64_t Dataset::block_samples() const {
  return BlockSamplesFor(samples_.size(), total_bytes_);
}

}  // namespace nearprep
