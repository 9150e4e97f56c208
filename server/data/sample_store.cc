// See sample_store.h.
#include "server/data/sample_store.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/fleet/manifest.h"
#include "server/records/tf_example.h"
#include "server/records/tfrecord.h"

namespace nearprep {

SampleStore::SampleStore(SampleStoreOptions options,
                         std::shared_ptr<const Storage> storage,
                         std::vector<ListedSample> listed,
                         std::map<std::string, FileInfo> shards,
                         std::string sample_digests)
    : options_(std::move(options)),
      storage_(std::move(storage)),
      listed_(std::move(listed)),
      shards_(std::move(shards)),
      sample_digests_(std::move(sample_digests)),
      block_cache_(options_.block_cache_bytes) {}

absl::Status SampleStore::CheckShardIdentity(const std::string& file,
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

absl::StatusOr<size_t> SampleStore::CheckRecord(uint64_t id, const uint8_t* record,
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
      data, *length, options_.image_key, options_.label_key);
  if (!fields.ok()) return at(fields.status().message());
  const int64_t label =
      fields->has_label ? fields->label + options_.label_offset : -1;
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

absl::Status SampleStore::CheckRecordAndKeepPayload(
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

absl::Status SampleStore::ReadAlignedInto(const std::string& file, uint64_t begin,
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

absl::StatusOr<Block> SampleStore::ReadBlock(const std::string& file,
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

void SampleStore::BlockRange(uint64_t id, uint64_t block_samples, uint64_t* lo_out,
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

uint64_t SampleStore::BlockBytesFor(uint64_t id, uint64_t block_samples) const {
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

absl::StatusOr<std::vector<BlockSample>> SampleStore::ReadBlockInto(
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

absl::StatusOr<SampleView> SampleStore::ReadInBlock(uint64_t id, uint64_t block_samples,
                                                    uint64_t base) const {
  if (block_samples == 0 || !InBlocks(id)) return SampleView{};
  const ListedSample& where = listed_[id];
  uint64_t lo = 0, hi = 0, begin = 0, end = 0;
  BlockRange(id, block_samples, &lo, &hi, &begin, &end, base);
  // Too large to be worth holding: an empty view, read the sample alone.
  if (end - begin > kMaxBlockBytes) return SampleView{};
  bool loaded = false;
  absl::StatusOr<Block> block = block_cache_.GetOrLoad(
      BlockCache::Key{where.file, begin, end - begin},
      [&] { return ReadBlock(where.file, begin, end - begin); }, &loaded);
  if (!block.ok()) {
    return absl::Status(block.status().code(), Where(id, block.status().message()));
  }
  if (block->data == nullptr) {  // no room in block_cache_bytes: alone
    counters_.block_bypasses.fetch_add(1, std::memory_order_relaxed);
    return SampleView{};
  }
  (loaded ? counters_.block_misses : counters_.block_hits)
      .fetch_add(1, std::memory_order_relaxed);
  return ViewInBlock(id, *block);
}

absl::StatusOr<SampleView> SampleStore::ReadInHeldBlock(uint64_t id,
                                                        uint64_t block_samples,
                                                        uint64_t base,
                                                        uint64_t tag) const {
  if (block_samples == 0 || !InBlocks(id)) return SampleView{};
  const ListedSample& where = listed_[id];
  uint64_t lo = 0, hi = 0, begin = 0, end = 0;
  BlockRange(id, block_samples, &lo, &hi, &begin, &end, base);
  if (end - begin > kMaxBlockBytes) return SampleView{};
  // Held until each sample was served; a block whose samples went to
  // another node (failover) or whose epoch stopped is dropped once it has
  // been idle this long and room is needed.
  constexpr std::chrono::seconds kIdle{30};
  BlockCache::Once outcome = BlockCache::Once::kHit;
  uint64_t idle_drops = 0;
  absl::StatusOr<Block> block = block_cache_.GetOrLoadOnce(
      BlockCache::Key{where.file, begin, end - begin, tag},
      static_cast<uint32_t>(id - lo), static_cast<uint32_t>(hi - lo),
      [&] { return ReadBlock(where.file, begin, end - begin); }, kIdle,
      &outcome, &idle_drops,
      // Bad records are reported without a read (ReadAlone).
      [&](uint32_t i) { return !listed_[lo + i].error.empty(); });
  if (idle_drops > 0) {
    counters_.block_idle_drops.fetch_add(idle_drops, std::memory_order_relaxed);
  }
  switch (outcome) {
    case BlockCache::Once::kNoRoom:
      counters_.block_bypasses.fetch_add(1, std::memory_order_relaxed);
      return SampleView{};
    case BlockCache::Once::kAlone:
      counters_.block_alone.fetch_add(1, std::memory_order_relaxed);
      return SampleView{};
    case BlockCache::Once::kLoaded:
    case BlockCache::Once::kHit:
      break;
  }
  if (!block.ok()) {
    return absl::Status(block.status().code(), Where(id, block.status().message()));
  }
  (outcome == BlockCache::Once::kLoaded ? counters_.block_misses : counters_.block_hits)
      .fetch_add(1, std::memory_order_relaxed);
  return ViewInBlock(id, *block);
}


absl::StatusOr<SampleView> SampleStore::ViewInBlock(uint64_t id,
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

std::string SampleStore::Where(uint64_t id, absl::string_view what) const {
  return absl::StrCat("dataset '", options_.name, "': ", listed_[id].key,
                      ": ", what);
}

uint64_t SampleStore::block_cache_resident_bytes() const {
  return block_cache_.resident_bytes();
}

absl::StatusOr<SampleFile> SampleStore::OpenSample(
    uint64_t id, const OpenOptions& options) const {
  if (id >= listed_.size()) {
    return absl::OutOfRangeError(absl::StrCat("dataset '", options_.name,
                                              "': no sample ", id, " (size ",
                                              listed_.size(), ")"));
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
  if (out.size > options_.max_file_bytes) {
    return absl::ResourceExhaustedError(
        Where(id, absl::StrCat(out.size, " bytes exceed max_file_bytes ",
                               options_.max_file_bytes)));
  }
  out.file = std::move(file).value();
  return out;
}

absl::Status SampleStore::ReadSample(uint64_t id, std::vector<uint8_t>* out) const {
  return ReadAlone(id, out).status();
}

absl::StatusOr<SampleView> SampleStore::ReadAlone(uint64_t id,
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

absl::Status SampleStore::CheckDigest(uint64_t id, const uint8_t* data, size_t n) const {
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
