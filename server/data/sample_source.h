// SampleSource: how one stream reads its samples. The catalogue (Dataset,
// dataset.h) says what the samples are; the dataset's SampleStore
// (sample_store.h) reads their bytes, alone or in blocks. A source is made
// once per stream from the two and the stream's order, and holds only the
// read strategy that order calls for:
//  - a plain stream reads each sample alone (one read per file or record);
//  - a block-shuffle stream (block_samples > 0) of a record dataset reads
//    each block's records (its part in one shard) with one large read, held
//    in the store's BlockCache, and serves the block's samples from it;
//  - a fleet plan's stream (plan_block_samples > 0: explicit ids whose
//    blocks are that many consecutive offsets of a partition, each sample
//    once per epoch, spread over many requests) reads each plan block of a
//    manifest dataset with one large read and holds it until each of its
//    samples has been served (BlockCache::GetOrLoadOnce). The blocks are
//    accounted per plan: the source derives the cache tag from the plan's
//    (seed, epoch), so two epochs' reads of one block are kept apart. A
//    block that does not fit the cache is not read, its samples are read
//    alone.
// Either way the bytes are the same and the store checks them (TFRecord
// framing and CRCs, shard identity, digests); a source only changes how
// many reads fetch them.
//
// Backends read through the source (WorkContext::source): Read for the CPU
// path, and for a reader that fills its own buffer (the FPGA backend's input
// buffer, the P2P target) BlockBytesFor / ReadBlockInto (this stream's block
// of a record dataset, read into that buffer), ReadInto (one sample into a
// host vector) and OpenSample (the file and range of one sample).
//
// The catalogue is reachable through the source too (dataset(): names,
// sizes, labels): a backend's WorkContext carries only the source.
//
// Thread-safety: immutable after construction; every call is safe from any
// thread (the store's reads are).
#ifndef NEARPREP_SERVER_DATA_SAMPLE_SOURCE_H_
#define NEARPREP_SERVER_DATA_SAMPLE_SOURCE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/data/dataset.h"
#include "server/data/sample_store.h"
#include "server/storage/storage.h"

namespace nearprep {

// What a stream's order is, as far as reading is concerned.
struct SampleSourceOptions {
  // > 0: block-shuffle order with blocks of this many samples.
  uint64_t block_samples = 0;
  // > 0: a fleet plan's explicit ids (server/fleet/global_plan.h) whose
  // blocks are this many consecutive offsets of a partition; `seed` and
  // `epoch` name the plan. Takes precedence over block_samples.
  uint64_t plan_block_samples = 0;
  uint64_t seed = 0;
  uint64_t epoch = 0;
};

class SampleSource {
 public:
  // `store` reads `dataset`'s samples; both must outlive the source.
  SampleSource(const SampleStore& store, const Dataset& dataset,
               const SampleSourceOptions& options = {});
  // Over dataset.store().
  explicit SampleSource(const Dataset& dataset,
                        const SampleSourceOptions& options = {});

  const Dataset& dataset() const { return *dataset_; }
  const SampleStore& store() const { return *store_; }
  const SampleSourceOptions& options() const { return options_; }

  // The bytes of sample `id`: a view into a block buffer (`keep` holds it)
  // when the source reads in blocks and the block could be held, otherwise
  // read into *scratch (the view points there, valid until *scratch
  // changes). Errors as SampleStore::ReadSample.
  absl::StatusOr<SampleView> Read(uint64_t id,
                                  std::vector<uint8_t>* scratch) const;
  // Read, with the bytes always in *out (copied out of a block buffer).
  absl::Status ReadInto(uint64_t id, std::vector<uint8_t>* out) const;

  // This stream's block that holds `id` (block-shuffle streams of record
  // datasets; the samples of that block in id's shard), for a reader with
  // its own buffer: BlockBytesFor gives the bytes of buffer it needs (its
  // records' range rounded out to 4 KiB), 0 when the source does not read
  // in blocks, `id` is not a TFRecord sample, is known bad, or the block is
  // over 64 MiB. ReadBlockInto reads that range with one read into dst
  // (capacity bytes; O_DIRECT when dst and the file system allow it),
  // checks every record and says where each sample's image bytes are.
  uint64_t BlockBytesFor(uint64_t id) const;
  absl::StatusOr<std::vector<BlockSample>> ReadBlockInto(
      uint64_t id, uint8_t* dst, uint64_t capacity) const;

  // Opens sample `id` (with `options`, e.g. O_DIRECT for a P2P reader) and
  // checks its size against max_file_bytes; the caller reads result.size
  // bytes at result.offset. Errors as SampleStore::ReadSample.
  absl::StatusOr<SampleFile> OpenSample(uint64_t id,
                                        const OpenOptions& options) const;

 private:
  const SampleStore* store_;
  const Dataset* dataset_;
  SampleSourceOptions options_;
  // With plan_block_samples: the plan's BlockCache tag, from (seed, epoch).
  uint64_t plan_tag_ = 0;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_DATA_SAMPLE_SOURCE_H_
