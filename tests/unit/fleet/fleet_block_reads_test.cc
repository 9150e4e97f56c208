// A daemon's reads of a fleet plan's explicit ids through a stream's
// SampleSource made for the plan's blocks (SampleSourceOptions::
// plan_block_samples, seed, epoch): every block part (a plan block, B
// consecutive offsets of a partition, cut at shard boundaries) is read once
// with one large read and each sample is then served from memory, the bytes
// equal per-sample reads, nothing stays held after the epoch, and a cache
// too small for the working set falls back to per-sample reads (never more
// reads than samples). The requests come in the order trainers ask for them:
// global batches in turn, T trainers' slices each.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nearprep/v1/tf_example.pb.h"
#include "server/data/dataset.h"
#include "server/data/sample_source.h"
#include "server/fleet/global_plan.h"
#include "server/fleet/manifest.h"
#include "server/records/tfrecord.h"
#include "server/storage/mem_storage.h"

namespace nearprep {
namespace {

std::string Image(uint64_t i) {
  return std::string(700 + 13 * (i % 50), static_cast<char>('a' + i % 26));
}

// Shards of uneven sizes (so partition starts are not multiples of B and
// plan blocks cross shard boundaries); sample i has Image(i).
const std::vector<int> kShardRecords = {13, 9, 17, 4, 21, 11, 8, 19, 6, 15, 10, 12};

struct Fleet {
  std::shared_ptr<MemStorage> storage = std::make_shared<MemStorage>();
  fleet::Manifest manifest;
  std::vector<std::string> names;
};

Fleet Build(uint32_t partitions) {
  Fleet f;
  std::vector<fleet::ManifestShard> shards;
  uint64_t id = 0;
  for (size_t s = 0; s < kShardRecords.size(); ++s) {
    std::string shard;
    for (int r = 0; r < kShardRecords[s]; ++r, ++id) {
      tfexample::Example ex;
      auto& feat = *ex.mutable_features()->mutable_feature();
      feat["image/encoded"].mutable_bytes_list()->add_value(Image(id));
      feat["image/class/label"].mutable_int64_list()->add_value(static_cast<int64_t>(id % 5));
      records::AppendTfRecord(ex.SerializeAsString(), &shard);
    }
    char name[48];
    std::snprintf(name, sizeof name, "part-%02zu.tfrecord", s);
    fleet::ManifestShard m;
    m.name = name;
    m.records = static_cast<uint64_t>(kShardRecords[s]);
    m.bytes = shard.size();
    shards.push_back(m);
    f.names.push_back(name);
    f.storage->AddFile(name, std::move(shard));
  }
  absl::StatusOr<fleet::Manifest> m = fleet::BuildManifest("tfrecord", shards, partitions);
  EXPECT_TRUE(m.ok()) << m.status();
  f.manifest = *m;
  f.storage->AddFile("MANIFEST", fleet::SerializeManifest(*m));
  return f;
}

DatasetConfig Config(uint64_t cache_bytes) {
  DatasetConfig c;
  c.name = "fleet";
  c.format = "tfrecord";
  c.manifest = "MANIFEST";
  c.block_cache_bytes = cache_bytes;
  c.shard_pattern = "*.tfrecord";
  return c;
}

// Block parts of the plan's blocks among the held ids: (partition-aligned
// block, shard) pairs, computed from the manifest alone.
uint64_t ExpectedParts(const fleet::Manifest& m, uint64_t b, const Dataset& d) {
  std::vector<uint64_t> shard_start = {0};
  for (const auto& s : m.shards) shard_start.push_back(shard_start.back() + s.records);
  std::set<std::pair<uint64_t, size_t>> parts;
  for (uint64_t id = 0; id < m.num_samples; ++id) {
    if (!d.Holds(id)) continue;
    const uint32_t p = m.PartitionOf(id);
    const uint64_t block = (id - m.partition_start[p]) / b;
    size_t shard = 0;
    while (shard_start[shard + 1] <= id) ++shard;
    parts.insert({m.partition_start[p] * 1000 + block, shard});
  }
  return parts.size();
}

// What a daemon's stream for plan `p` with blocks of `block` reads with.
SampleSourceOptions PlanBlocks(uint64_t block, const fleet::PlanParams& p) {
  SampleSourceOptions o;
  o.plan_block_samples = block;
  o.seed = p.seed;
  o.epoch = p.epoch;
  return o;
}

// Reads every held position of one epoch in trainer request order and
// checks the bytes.
void ReadEpoch(const SampleSource& source, const fleet::GlobalPlan& plan, uint32_t trainers) {
  const Dataset& d = source.dataset();
  std::vector<uint8_t> scratch;
  for (uint64_t g = 0; g < plan.num_batches(); ++g) {
    for (uint32_t k = 0; k < trainers; ++k) {
      const auto [lo, hi] = plan.Slice(g, k, trainers);
      for (uint64_t pos = lo; pos < hi; ++pos) {
        const uint64_t id = plan.At(pos).sample_id;
        if (!d.Holds(id)) continue;
        absl::StatusOr<SampleView> v = source.Read(id, &scratch);
        ASSERT_TRUE(v.ok()) << id << ": " << v.status();
        ASSERT_EQ(std::string(reinterpret_cast<const char*>(v->data), v->size), Image(id))
            << id;
      }
    }
  }
}

struct Case {
  uint32_t partitions;
  uint64_t block;
  uint32_t window;
  uint64_t global_batch;
  uint32_t trainers;
};

TEST(FleetBlockReads, EachBlockPartReadOnceThenServedFromMemory) {
  for (const Case& c : {Case{4, 8, 16, 12, 3}, Case{6, 5, 7, 10, 2}, Case{3, 16, 64, 32, 4},
                        Case{12, 3, 1, 6, 6}}) {
    SCOPED_TRACE(testing::Message() << "C=" << c.partitions << " B=" << c.block
                                    << " W=" << c.window << " G=" << c.global_batch);
    Fleet f = Build(c.partitions);
    // This daemon holds every other shard's partitions: drop the shards of
    // odd partitions.
    for (size_t s = 0; s < f.manifest.shards.size(); ++s) {
      if (f.manifest.shards[s].partition % 2 == 1) f.storage->RemoveFile(f.names[s]);
    }
    auto ds = Dataset::Open(Config(uint64_t{64} << 20), f.storage);
    ASSERT_TRUE(ds.ok()) << ds.status();
    const Dataset& d = **ds;
    ASSERT_FALSE(d.partitions_held().empty());
    fleet::PlanParams params;
    params.seed = 7;
    params.block_samples = c.block;
    params.window = c.window;
    params.global_batch = c.global_batch;
    // Another plan (epoch 5) stopped halfway: its partly served blocks stay
    // held and do not count for the epochs below.
    {
      params.epoch = 5;
      auto half = fleet::GlobalPlan::Create(f.manifest.partition_start, params);
      ASSERT_TRUE(half.ok());
      const SampleSource source(d, PlanBlocks(c.block, params));
      std::vector<uint8_t> scratch;
      for (uint64_t pos = 0; pos < (*half)->size() / 2; ++pos) {
        const uint64_t id = (*half)->At(pos).sample_id;
        if (d.Holds(id)) {
          ASSERT_TRUE(source.Read(id, &scratch).ok());
        }
      }
    }
    const uint64_t left_over = d.store().block_cache_resident_bytes();
    EXPECT_GT(left_over, 0u);
    const uint64_t alone0 = d.store().read_counters().block_alone, misses0 = d.store().read_counters().block_misses;
    for (uint64_t epoch : {0, 1}) {
      params.epoch = epoch;
      auto plan = fleet::GlobalPlan::Create(f.manifest.partition_start, params);
      ASSERT_TRUE(plan.ok()) << plan.status();
      const ReadCounters& rc = d.store().read_counters();
      const uint64_t reads0 = rc.reads, hits0 = rc.block_hits;
      ReadEpoch(SampleSource(d, PlanBlocks(c.block, params)), **plan, c.trainers);
      uint64_t held = 0;
      for (uint64_t id = 0; id < d.size(); ++id) held += d.Holds(id) ? 1 : 0;
      const uint64_t parts = ExpectedParts(f.manifest, c.block, d);
      EXPECT_EQ(rc.reads - reads0, parts);
      EXPECT_EQ(rc.block_hits - hits0, held - parts);
      EXPECT_EQ(rc.block_bypasses.load(), 0u);
      // Parts of one sample are read alone (the same one read).
      EXPECT_EQ(rc.block_alone + rc.block_misses - alone0 - misses0, parts * (epoch + 1));
      EXPECT_LT(parts, held);
      // Every block of this epoch was consumed and dropped.
      EXPECT_EQ(d.store().block_cache_resident_bytes(), left_over);
    }
    // A source without plan blocks: one read per sample, the same bytes.
    const uint64_t reads0 = d.store().read_counters().reads;
    params.epoch = 2;
    auto plan = fleet::GlobalPlan::Create(f.manifest.partition_start, params);
    ReadEpoch(SampleSource(d), **plan, c.trainers);
    uint64_t held = 0;
    for (uint64_t id = 0; id < d.size(); ++id) held += d.Holds(id) ? 1 : 0;
    EXPECT_EQ(d.store().read_counters().reads - reads0, held);
  }
}

TEST(FleetBlockReads, ASmallCacheFallsBackToSampleReadsWithoutRereadingBlocks) {
  Fleet f = Build(4);
  // Room for about one block of 16 samples (~16 KB) at a time.
  auto ds = Dataset::Open(Config(20000), f.storage);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const Dataset& d = **ds;
  fleet::PlanParams params;
  params.seed = 3;
  params.block_samples = 16;
  params.window = 32;
  params.global_batch = 16;
  auto plan = fleet::GlobalPlan::Create(f.manifest.partition_start, params);
  ASSERT_TRUE(plan.ok());
  ReadEpoch(SampleSource(d, PlanBlocks(16, params)), **plan, 2);
  const ReadCounters& rc = d.store().read_counters();
  EXPECT_GT(rc.block_bypasses.load(), 0u);
  EXPECT_GT(rc.block_hits.load(), 0u);
  // Each sample is read alone (bypass, alone), comes from a block read once
  // (miss), or is served from memory (hit); no block is read twice.
  EXPECT_EQ(rc.block_bypasses + rc.block_alone + rc.block_misses + rc.block_hits, d.size());
  EXPECT_EQ(rc.reads.load(), rc.block_bypasses + rc.block_alone + rc.block_misses);
  EXPECT_LE(rc.reads.load(), d.size());
  EXPECT_EQ(d.store().block_cache_resident_bytes(), 0u);
}

}  // namespace
}  // namespace nearprep
