// See sample_source.h.
#include "server/data/sample_source.h"

#include "server/fleet/manifest.h"

namespace nearprep {

SampleSource::SampleSource(const SampleStore& store, const Dataset& dataset,
                           const SampleSourceOptions& options)
    : store_(&store), dataset_(&dataset), options_(options) {
  if (options_.plan_block_samples > 0) {
    // Two plans (seed, epoch) reading the same block account it apart.
    plan_tag_ = options_.seed * 0x9E3779B97F4A7C15ull ^ (options_.epoch + 1);
  }
}

SampleSource::SampleSource(const Dataset& dataset, const SampleSourceOptions& options)
    : SampleSource(dataset.store(), dataset, options) {}

absl::StatusOr<SampleView> SampleSource::Read(
    uint64_t id, std::vector<uint8_t>* scratch) const {
  const SampleStore& store = *store_;
  if (options_.plan_block_samples > 0 && store.InBlocks(id)) {
    // A fleet plan's blocks are aligned to the start of id's partition and
    // held until consumed.
    const fleet::Manifest* m = dataset_->manifest();
    const uint64_t base = m ? m->partition_start[m->PartitionOf(id)] : 0;
    absl::StatusOr<SampleView> view =
        store.ReadInHeldBlock(id, options_.plan_block_samples, base, plan_tag_);
    // An empty view: too large or no room, read the sample alone below.
    if (!view.ok() || view->data != nullptr) return view;
  } else if (options_.block_samples > 0 && store.InBlocks(id)) {
    absl::StatusOr<SampleView> view = store.ReadInBlock(id, options_.block_samples);
    // An empty view: the block is too large, read the sample alone below.
    if (!view.ok() || view->data != nullptr) return view;
  }
  return store.ReadAlone(id, scratch);
}

absl::Status SampleSource::ReadInto(uint64_t id,
                                    std::vector<uint8_t>* out) const {
  absl::StatusOr<SampleView> view = Read(id, out);
  if (!view.ok()) return view.status();
  if (view->keep != nullptr) out->assign(view->data, view->data + view->size);
  return absl::OkStatus();
}

uint64_t SampleSource::BlockBytesFor(uint64_t id) const {
  if (options_.plan_block_samples > 0 || options_.block_samples == 0) return 0;
  return store_->BlockBytesFor(id, options_.block_samples);
}

absl::StatusOr<std::vector<BlockSample>> SampleSource::ReadBlockInto(
    uint64_t id, uint8_t* dst, uint64_t capacity) const {
  const uint64_t bs =
      options_.plan_block_samples > 0 ? 0 : options_.block_samples;
  return store_->ReadBlockInto(id, bs, dst, capacity);
}

absl::StatusOr<SampleFile> SampleSource::OpenSample(
    uint64_t id, const OpenOptions& options) const {
  return store_->OpenSample(id, options);
}

}  // namespace nearprep
