// SampleStore::CheckTarLabel (sample_store.h): a tar sample's label is checked
// against its .cls member whenever the sample is read, because the shard
// index that says which label it has is a cache whose checksum anyone can
// recompute (docs/operations.md, "Indexes").
#include <memory>
#include <utility>

#include "server/data/sample_store.h"
#include "server/records/range_reader.h"
#include "server/records/tar_shard.h"

namespace nearprep {

absl::Status SampleStore::CheckTarLabel(uint64_t id, const RandomAccessFile* file,
                                        const uint8_t* have, uint64_t have_offset,
                                        uint64_t have_bytes) const {
  const ListedSample& where = listed_[id];
  if (where.cls_bytes == 0) return absl::OkStatus();
  std::unique_ptr<RandomAccessFile> opened;
  const records::RangeReader read =
      [&](uint64_t offset, size_t n, uint8_t* dst) -> absl::StatusOr<size_t> {
    if (file == nullptr) {
      // The .cls lies outside the block in hand (the block's first or last
      // sample): open the shard as every read does.
      absl::StatusOr<std::unique_ptr<RandomAccessFile>> f =
          storage_->Open(where.file, OpenOptions{});
      if (!f.ok()) return f.status();
      if (absl::Status c = CheckShardIdentity(where.file, **f); !c.ok()) return c;
      opened = std::move(f).value();
      file = opened.get();
    }
    size_t got = 0;
    if (absl::Status s = file->Read(offset, n, dst, &got); !s.ok()) return s;
    counters_.reads.fetch_add(1, std::memory_order_relaxed);
    counters_.bytes.fetch_add(got, std::memory_order_relaxed);
    return got;
  };
  records::TarLabelClaim claim;
  claim.shard = where.file;
  claim.cls_offset = where.cls_offset;
  claim.cls_bytes = where.cls_bytes;
  claim.label = where.label;
  claim.label_offset = options_.label_offset;
  bool index_does_not_hold = false;
  const absl::Status s = records::CheckTarLabel(claim, have, have_offset, have_bytes,
                                                read, &index_does_not_hold);
  if (s.ok()) return s;
  if (index_does_not_hold) {
    counters_.shard_changed.fetch_add(1, std::memory_order_relaxed);
  }
  return absl::Status(s.code(), Where(id, s.message()));
}

}  // namespace nearprep
