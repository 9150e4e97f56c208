// See sample_source.h.
#include "server/data/sample_source.h"

#include <chrono>
#include <utility>

#include "server/data/block_cache.h"
#include "server/fleet/manifest.h"

namespace nearprep {

SampleSource::SampleSource(const Dataset& dataset,
                           const SampleSourceOptions& options)
    : dataset_(&dataset), options_(options) {
  if (options_.plan_block_samples > 0) {
    // Two plans (seed, epoch) reading the same block account it apart.
    plan_tag_ = options_.seed * 0x9E3779B97F4A7C15ull ^ (options_.epoch + 1);
  }
}

absl::StatusOr<SampleView> SampleSource::Read(
    uint64_t id, std::vector<uint8_t>* scratch) const {
  const Dataset& d = *dataset_;
  if (options_.plan_block_samples > 0 && d.InBlocks(id)) {
    absl::StatusOr<SampleView> view = ViewFromPlanBlock(id);
    // An empty view: too large or no room, read the sample alone below.
    if (!view.ok() || view->data != nullptr) return view;
  } else if (options_.block_samples > 0 && d.InBlocks(id)) {
    absl::StatusOr<SampleView> view = ViewFromBlock(id);
    // An empty view: the block is too large, read the sample alone below.
    if (!view.ok() || view->data != nullptr) return view;
  }
  return d.ReadAlone(id, scratch);
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
  return dataset_->BlockBytesFor(id, options_.block_samples);
}

absl::StatusOr<std::vector<BlockSample>> SampleSource::ReadBlockInto(
    uint64_t id, uint8_t* dst, uint64_t capacity) const {
  const uint64_t bs =
      options_.plan_block_samples > 0 ? 0 : options_.block_samples;
  return dataset_->ReadBlockInto(id, bs, dst, capacity);
}

absl::StatusOr<SampleFile> SampleSource::OpenSample(
    uint64_t id, const OpenOptions& options) const {
  return dataset_->OpenSample(id, options);
}

absl::StatusOr<SampleView> SampleSource::ViewFromBlock(uint64_t id) const {
  const Dataset& d = *dataset_;
  const ListedSample& where = d.listed_[id];
  uint64_t lo = 0, hi = 0, begin = 0, end = 0;
  d.BlockRange(id, options_.block_samples, &lo, &hi, &begin, &end);
  // Too large to be worth holding: an empty view, read the sample alone.
  if (end - begin > Dataset::kMaxBlockBytes) return SampleView{};
  bool loaded = false;
  absl::StatusOr<Block> block = d.block_cache_->GetOrLoad(
      BlockCache::Key{where.file, begin, end - begin},
      [&] { return d.ReadBlock(where.file, begin, end - begin); }, &loaded);
  if (!block.ok()) {
    return absl::Status(block.status().code(),
                        d.Where(id, block.status().message()));
  }
  if (block->data == nullptr) {  // no room in block_cache_bytes: alone
    d.counters_.block_bypasses.fetch_add(1, std::memory_order_relaxed);
    return SampleView{};
  }
  (loaded ? d.counters_.block_misses : d.counters_.block_hits)
      .fetch_add(1, std::memory_order_relaxed);
  return d.ViewInBlock(id, *block);
}

absl::StatusOr<SampleView> SampleSource::ViewFromPlanBlock(uint64_t id) const {
  const Dataset& d = *dataset_;
  const ListedSample& where = d.listed_[id];
  const fleet::Manifest* m = d.manifest_.get();
  const uint64_t base = m ? m->partition_start[m->PartitionOf(id)] : 0;
  uint64_t lo = 0, hi = 0, begin = 0, end = 0;
  d.BlockRange(id, options_.plan_block_samples, &lo, &hi, &begin, &end, base);
  if (end - begin > Dataset::kMaxBlockBytes) return SampleView{};
  // Held until each sample was served; a block whose samples went to
  // another node (failover) or whose epoch stopped is dropped once it has
  // been idle this long and room is needed.
  constexpr std::chrono::seconds kIdle{30};
  BlockCache::Once outcome = BlockCache::Once::kHit;
  uint64_t idle_drops = 0;
  absl::StatusOr<Block> block = d.block_cache_->GetOrLoadOnce(
      BlockCache::Key{where.file, begin, end - begin, plan_tag_},
      static_cast<uint32_t>(id - lo), static_cast<uint32_t>(hi - lo),
      [&] { return d.ReadBlock(where.file, begin, end - begin); }, kIdle,
      &outcome, &idle_drops,
      // Bad records are reported without a read (Dataset::ReadAlone).
      [&](uint32_t i) { return !d.listed_[lo + i].error.empty(); });
  if (idle_drops > 0) {
    d.counters_.block_idle_drops.fetch_add(idle_drops,
                                           std::memory_order_relaxed);
  }
  switch (outcome) {
    case BlockCache::Once::kNoRoom:
      d.counters_.block_bypasses.fetch_add(1, std::memory_order_relaxed);
      return SampleView{};
    case BlockCache::Once::kAlone:
      d.counters_.block_alone.fetch_add(1, std::memory_order_relaxed);
      return SampleView{};
    case BlockCache::Once::kLoaded:
    case BlockCache::Once::kHit:
      break;
  }
  if (!block.ok()) {
    return absl::Status(block.status().code(),
                        d.Where(id, block.status().message()));
  }
  (outcome == BlockCache::Once::kLoaded ? d.counters_.block_misses
                                        : d.counters_.block_hits)
      .fetch_add(1, std::memory_order_relaxed);
  return d.ViewInBlock(id, *block);
}

}  // namespace nearprep
