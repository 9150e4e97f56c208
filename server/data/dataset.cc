// See dataset.h.
#include "server/data/dataset.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/data/block_shuffle.h"
#include "server/fleet/manifest.h"
#include "server/records/tf_example.h"
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
  ds->storage_ = std::move(storage);
  if (!c.manifest.empty()) {
    if (absl::Status m = ds->ApplyManifest(&*listing); !m.ok()) return m;
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
  ds->shards_ = std::move(listing->shards);
  ds->index_cache_ = std::move(index_cache);
  ds->block_cache_ = std::make_unique<BlockCache>(c.block_cache_bytes);
  ds->listed_ = std::move(listing->samples);
  if (ds->manifest_) {
    ds->listing_version_ = ds->manifest_->hash.substr(0, 16);
  } else {
    // FNV-1a 64 (stable across processes and machines, unlike absl::Hash).
    uint64_t h = 14695981039346656037ull;
    auto mix = [&h](absl::string_view bytes) {
      for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
    };
    for (const ListedSample& s : ds->listed_) {
      mix(s.key);
      mix(absl::StrCat("\n", s.size, " ", s.label, s.error.empty() ? "\n" : " bad\n"));
    }
    char hex[24];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
    ds->listing_version_ = hex;
  }
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
                                  " indexes from cache, ",
                                  listing->indexes_rebuilt,
                                  " cached indexes rebuilt, scan read ",
                                  listing->scan_bytes_read, " bytes in ",
                                  listing->scan_reads, " reads"));
  return ds;
}

absl::Status Dataset::CheckShardIdentity(const std::string& file,
                                         const RandomAccessFile& f) const {
  auto it = shards_.find(file);
  if (it == shards_.end()) return absl::OkStatus();
  const FileInfo& was = it->second;
  const FileInfo now = f.info();
  std::string what;
  if (now.size != was.size) {
    what = absl::StrCat("size ", was.size, " -> ", now.size);
  } else if (now.inode != 0 && was.inode != 0 &&
             (now.inode != was.inode || now.device != was.device)) {
    what = absl::StrCat("inode ", was.inode, " -> ", now.inode);
  } else if (now.mtime_ns != 0 && was.mtime_ns != 0 &&
             now.mtime_ns != was.mtime_ns) {
    what = absl::StrCat("mtime ", was.mtime_ns, " -> ", now.mtime_ns, " ns");
  } else {
    return absl::OkStatus();
  }
  counters_.shard_changed.fetch_add(1, std::memory_order_relaxed);
  return absl::DataLossError(absl::StrCat(
      "shard ", file, " was replaced or rewritten since it was indexed (", what,
      "); none of it is served until the daemon re-indexes it (restart)"));
}

absl::StatusOr<size_t> Dataset::CheckRecord(uint64_t id, const uint8_t* record,
                                            size_t n) const {
  const ListedSample& where = listed_[id];
  const auto at = [&](absl::string_view what) {
    return absl::DataLossError(Where(
        id, absl::StrCat(where.file, " offset ", where.record_offset, ": ",
                         what)));
  };
  if (n != where.record_bytes || n < records::kTfRecordOverheadBytes) {
    return at("truncated record (the shard shrank since it was indexed)");
  }
  absl::StatusOr<uint64_t> length = records::ParseTfRecordHeader(record);
  if (!length.ok()) return at(length.status().message());
  if (*length + records::kTfRecordOverheadBytes != n) {
    return at("record length changed since the shard was indexed");
  }
  const uint8_t* data = record + records::kTfRecordHeaderBytes;
  absl::Status crc = records::CheckTfRecordData(data, *length, data + *length);
  if (!crc.ok()) return at(crc.message());
  if (where.has_data_crc) {
    const uint8_t* f = data + *length;
    const uint32_t footer = uint32_t{f[0]} | uint32_t{f[1]} << 8 |
                            uint32_t{f[2]} << 16 | uint32_t{f[3]} << 24;
    if (footer != where.data_crc) {
      counters_.shard_changed.fetch_add(1, std::memory_order_relaxed);
      return at("record changed since the shard was indexed (another "
                "record's CRC): the shard was rewritten, its index no longer "
                "holds");
    }
  }
  const uint64_t start = where.offset - where.record_offset;
  if (start < records::kTfRecordHeaderBytes ||
      start + where.size > records::kTfRecordHeaderBytes + *length) {
    return at("image bytes outside the record");
  }
  // No index entry is trusted before it is checked: the index's own
  // checksum is a CRC anyone can recompute, so where the image lies and the
  // label are read again from the record itself (a light scan of the
  // Example's wire format, no copy) and must be what the index says.
  absl::StatusOr<records::ExampleFields> fields = records::LocateExampleFields(
      data, *length, config_.image_key, config_.label_key);
  if (!fields.ok()) return at(fields.status().message());
  const int64_t label =
      fields->has_label ? fields->label + config_.label_offset : -1;
  if (fields->image_offset + records::kTfRecordHeaderBytes != start ||
      fields->image_size != where.size || label != where.label) {
    counters_.shard_changed.fetch_add(1, std::memory_order_relaxed);
    return at(absl::StrCat(
        "the index does not hold for this record (index: image at ",
        start - records::kTfRecordHeaderBytes, " size ", where.size,
        " label ", where.label, "; record: image at ", fields->image_offset,
        " size ", fields->image_size, " label ", label,
        "): the index was edited or the shard rewritten; none of it is "
        "trusted until the daemon re-indexes it (delete the index, restart)"));
  }
  return static_cast<size_t>(start);
}

absl::Status Dataset::CheckRecordAndKeepPayload(
    uint64_t id, std::vector<uint8_t>* record) const {
  absl::StatusOr<size_t> start = CheckRecord(id, record->data(), record->size());
  if (!start.ok()) return start.status();
  const size_t size = listed_[id].size;
  std::memmove(record->data(), record->data() + *start, size);
  record->resize(size);
  return absl::OkStatus();
}

namespace {

// Where a listed record starts and ends in its file.
uint64_t RecordBegin(const ListedSample& s) {
  return s.record_bytes ? s.record_offset : s.offset;
}
uint64_t RecordEnd(const ListedSample& s) {
  return s.record_bytes ? s.record_offset + s.record_bytes : s.offset + s.size;
}

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};

}  // namespace

absl::Status Dataset::ReadAlignedInto(const std::string& file, uint64_t begin,
                                      uint64_t end, uint8_t* dst, uint64_t* got) const {
  absl::Status changed;
  auto read_with = [&](bool direct) -> absl::Status {
    OpenOptions o;
    o.direct = direct;
    absl::StatusOr<std::unique_ptr<RandomAccessFile>> f = storage_->Open(file, o);
    if (!f.ok()) return f.status();
    changed = CheckShardIdentity(file, **f);
    if (!changed.ok()) return changed;
    size_t n = 0;
    absl::Status s = (*f)->Read(begin, end - begin, dst, &n);
    if (s.ok()) *got = n;
    return s;
  };
  absl::Status s = read_with(/*direct=*/true);
  if (!changed.ok()) return changed;
  if (s.ok()) {
    counters_.direct_reads.fetch_add(1, std::memory_order_relaxed);
  } else if (absl::IsInvalidArgument(s) || absl::IsDataLoss(s)) {
    // The file system (or an unaligned destination) refuses O_DIRECT
    // (tmpfs, some overlays): buffered.
    counters_.buffered_fallbacks.fetch_add(1, std::memory_order_relaxed);
    s = read_with(/*direct=*/false);
  }
  if (!s.ok()) return s;
  counters_.reads.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes.fetch_add(*got, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::StatusOr<Block> Dataset::ReadBlock(const std::string& file,
                                         uint64_t offset,
                                         uint64_t size) const {
  const uint64_t a = kDirectIoAlignment;
  const uint64_t begin = offset / a * a;
  const uint64_t end = (offset + size + a - 1) / a * a;
  Block block;
  block.offset = begin;
  uint8_t* raw = static_cast<uint8_t*>(std::aligned_alloc(a, end - begin));
  if (raw == nullptr) return absl::ResourceExhaustedError("block allocation");
  block.data = std::shared_ptr<uint8_t>(raw, AlignedFree());
  uint64_t got = 0;
  absl::Status s = ReadAlignedInto(file, begin, end, raw, &got);
  if (!s.ok()) return s;
  block.size = got;
  return block;
}

void Dataset::BlockRange(uint64_t id, uint64_t block_samples, uint64_t* lo_out,
                         uint64_t* hi_out, uint64_t* begin_out, uint64_t* end_out,
                         uint64_t base) const {
  const ListedSample& where = listed_[id];
  // The block's samples that live in this sample's file (a block may span
  // two shards; each part is read on its own).
  const uint64_t first = base + (id - base) / block_samples * block_samples;
  const uint64_t last =
      std::min<uint64_t>(first + block_samples, listed_.size());
  uint64_t lo = id, hi = id + 1;
  while (lo > first && listed_[lo - 1].file == where.file &&
         !listed_[lo - 1].whole_file) {
    --lo;
  }
  while (hi < last && listed_[hi].file == where.file &&
         !listed_[hi].whole_file) {
    ++hi;
  }
  uint64_t begin = RecordBegin(listed_[lo]), end = RecordEnd(listed_[lo]);
  for (uint64_t i = lo + 1; i < hi; ++i) {
    begin = std::min(begin, RecordBegin(listed_[i]));
    end = std::max(end, RecordEnd(listed_[i]));
  }
  *lo_out = lo;
  *hi_out = hi;
  *begin_out = begin;
  *end_out = end;
}

uint64_t Dataset::BlockBytesFor(uint64_t id, uint64_t block_samples) const {
  if (block_samples == 0 || id >= listed_.size() || listed_[id].whole_file ||
      listed_[id].record_bytes == 0 || !listed_[id].error.empty()) {
    return 0;
  }
  uint64_t lo = 0, hi = 0, begin = 0, end = 0;
  BlockRange(id, block_samples, &lo, &hi, &begin, &end);
  if (end - begin > kMaxBlockBytes) return 0;
  const uint64_t a = kDirectIoAlignment;
  return (end + a - 1) / a * a - begin / a * a;
}

absl::StatusOr<std::vector<BlockSample>> Dataset::ReadBlockInto(
    uint64_t id, uint64_t block_samples, uint8_t* dst, uint64_t capacity) const {
  const uint64_t need = BlockBytesFor(id, block_samples);
  if (need == 0 || need > capacity) {
    return absl::InvalidArgumentError(
        Where(id, absl::StrCat("no block of ", block_samples, " records fits ", capacity,
                               " bytes")));
  }
  uint64_t lo = 0, hi = 0, begin = 0, end = 0;
  BlockRange(id, block_samples, &lo, &hi, &begin, &end);
  const uint64_t a = kDirectIoAlignment;
  const uint64_t abegin = begin / a * a;
  uint64_t got = 0;
  const absl::Status rs = ReadAlignedInto(listed_[id].file, abegin, abegin + need, dst, &got);
  if (!rs.ok()) return absl::Status(rs.code(), Where(id, rs.message()));
  std::vector<BlockSample> out;
  for (uint64_t i = lo; i < hi; ++i) {
    const ListedSample& w = listed_[i];
    BlockSample b;
    b.id = i;
    if (!w.error.empty()) {
      b.status = absl::DataLossError(Where(i, w.error));
    } else if (w.record_bytes == 0 || RecordEnd(w) > abegin + got) {
      b.status = absl::DataLossError(
          Where(i, "truncated record (the shard shrank since it was indexed)"));
    } else {
      const uint64_t rec = w.record_offset - abegin;
      absl::StatusOr<size_t> start = CheckRecord(i, dst + rec, w.record_bytes);
      if (start.ok()) {
        b.offset = rec + *start;
        b.size = w.size;
        b.status = CheckDigest(i, dst + b.offset, b.size);
      } else {
        b.status = start.status();
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

absl::StatusOr<SampleView> Dataset::ViewInBlock(uint64_t id,
                                                const Block& b) const {
  const ListedSample& where = listed_[id];
  const Block* block = &b;
  const uint64_t rb = RecordBegin(where), re = RecordEnd(where);
  if (re > block->offset + block->size) {
    return absl::DataLossError(
        Where(id, "truncated record (the shard shrank since it was indexed)"));
  }
  SampleView view;
  view.keep = block->data;
  view.data = block->data.get() + (rb - block->offset);
  view.size = re - rb;
  if (where.record_bytes != 0) {
    absl::StatusOr<size_t> start = CheckRecord(id, view.data, view.size);
    if (!start.ok()) return start.status();
    view.data += *start;
    view.size = where.size;
  }
  if (absl::Status c = CheckTarLabel(id, nullptr, block->data.get(), block->offset,
                                     block->size); !c.ok()) {
    return c;
  }
  if (absl::Status c = CheckDigest(id, view.data, view.size); !c.ok()) return c;
  return view;
}

std::string Dataset::Where(uint64_t id, absl::string_view what) const {
  return absl::StrCat("dataset '", config_.name, "': ", samples_[id].path,
                      ": ", what);
}

uint64_t Dataset::block_cache_resident_bytes() const {
  return block_cache_->resident_bytes();
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
  if (absl::Status c = CheckShardIdentity(where.file, **file); !c.ok()) {
    return absl::DataLossError(Where(id, c.message()));
  }
  if (absl::Status c = CheckTarLabel(id, file->get()); !c.ok()) return c;
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
  return ReadAlone(id, out).status();
}

absl::StatusOr<SampleView> Dataset::ReadAlone(uint64_t id,
                                              std::vector<uint8_t>* scratch) const {
  absl::StatusOr<SampleFile> f = OpenSample(id, OpenOptions{});
  if (!f.ok()) return f.status();
  const ListedSample& where = listed_[id];
  counters_.reads.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes.fetch_add(
      where.record_bytes ? where.record_bytes : f->size,
      std::memory_order_relaxed);
  if (where.record_bytes == 0) {
    const absl::Status s = ReadRange(*f->file, f->offset, f->size, scratch);
    if (!s.ok()) return absl::DataLossError(Where(id, s.message()));
  } else {
    // A TFRecord sample: read the whole record (one read), check its framing
    // and CRCs again (the shard may have changed since it was indexed), then
    // keep the image bytes.
    const absl::Status s =
        ReadRange(*f->file, where.record_offset, where.record_bytes, scratch);
    if (!s.ok()) return absl::DataLossError(Where(id, s.message()));
    if (absl::Status c = CheckRecordAndKeepPayload(id, scratch); !c.ok()) {
      return c;
    }
  }
  if (absl::Status c = CheckDigest(id, scratch->data(), scratch->size()); !c.ok()) {
    return c;
  }
  SampleView view;
  view.data = scratch->data();
  view.size = scratch->size();
  return view;
}

absl::Status Dataset::CheckDigest(uint64_t id, const uint8_t* data, size_t n) const {
  if (sample_digests_.empty()) return absl::OkStatus();
  const char* want = sample_digests_.data() + id * fleet::kSampleDigestBytes;
  static constexpr char kNone[fleet::kSampleDigestBytes] = {};
  if (std::memcmp(want, kNone, sizeof(kNone)) == 0) return absl::OkStatus();
  uint8_t got[fleet::kSampleDigestBytes];
  fleet::Sha256(data, n, got);
  counters_.digest_checks.fetch_add(1, std::memory_order_relaxed);
  if (std::memcmp(got, want, sizeof(got)) == 0) return absl::OkStatus();
  counters_.digest_mismatches.fetch_add(1, std::memory_order_relaxed);
  return absl::DataLossError(Where(
      id, absl::StrCat("the image bytes read from shard ", listed_[id].file,
                       " are not the manifest's (their SHA-256 differs from the "
                       "per-sample digest): the shard was rewritten since the "
                       "manifest was made; not served")));
}

}  // namespace nearprep
