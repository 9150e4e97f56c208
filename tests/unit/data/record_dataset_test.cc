// Record datasets through the storage seam (in memory): sample ids, labels
// and bytes of TFRecord shards, block reads (one read per block, the same
// bytes as sample reads), per-sample errors for damaged records, and a read
// fault that is reported and not cached.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nearprep/v1/tf_example.pb.h"
#include "server/data/block_shuffle.h"
#include "server/data/dataset.h"
#include "server/records/tfrecord.h"
#include "server/storage/fault_injection_storage.h"
#include "server/storage/mem_storage.h"

namespace nearprep {
namespace {

std::string Image(int i) {
  return std::string(1000 + 37 * i, static_cast<char>('A' + i % 26));
}

std::string Example(const std::string& image, int64_t label) {
  tfexample::Example ex;
  auto& f = *ex.mutable_features()->mutable_feature();
  f["image/encoded"].mutable_bytes_list()->add_value(image);
  f["image/class/label"].mutable_int64_list()->add_value(label);
  return ex.SerializeAsString();
}

// Shards of `per_shard` records; sample i has Image(i) and label i % 7 + 1.
std::shared_ptr<MemStorage> Shards(int n, int per_shard) {
  auto storage = std::make_shared<MemStorage>();
  for (int s = 0; s * per_shard < n; ++s) {
    std::string shard;
    for (int i = s * per_shard; i < std::min(n, (s + 1) * per_shard); ++i) {
      records::AppendTfRecord(Example(Image(i), i % 7 + 1), &shard);
    }
    storage->AddFile("train-" + std::to_string(s) + ".tfrecord", shard);
  }
  return storage;
}

DatasetConfig Config() {
  DatasetConfig c;
  c.name = "rec";
  c.format = "tfrecord";
  c.label_offset = -1;
  return c;
}

TEST(RecordDatasetTest, IdsFollowShardsThenRecordsWithLabelOffset) {
  auto storage = Shards(25, 10);
  auto ds = Dataset::Open(Config(), storage);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ((*ds)->size(), 25u);
  EXPECT_EQ((*ds)->num_shards(), 3u);
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 25; ++i) {
    ASSERT_TRUE((*ds)->ReadSample(i, &bytes).ok());
    EXPECT_EQ(std::string(bytes.begin(), bytes.end()), Image(i)) << i;
    EXPECT_EQ((*ds)->samples()[i].label, i % 7) << i;  // offset -1 applied
  }
  EXPECT_EQ((*ds)->samples()[12].path, "train-1.tfrecord#0000000002");
  EXPECT_EQ((*ds)->num_classes(), 7u);
  // The index was cached beside each shard and is reused.
  std::string text;
  EXPECT_TRUE(ReadFileToString(*storage, "train-0.tfrecord.nearprep-index", &text).ok());
  auto again = Dataset::Open(Config(), storage);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->size(), 25u);
}

TEST(RecordDatasetTest, BlockReadsGiveTheSameBytesInFewLargeReads) {
  auto storage = Shards(100, 30);
  auto ds = Dataset::Open(Config(), storage);
  ASSERT_TRUE(ds.ok());
  BlockShuffleParams p;
  p.block_samples = 8;
  p.open_blocks = 3;
  p.window = 10;
  const auto order = BlockShuffledOrder(100, 9, 0, p);
  std::vector<uint8_t> a, b;
  const uint64_t reads_before = (*ds)->read_counters().reads.load();
  for (uint64_t id : order) {
    ASSERT_TRUE((*ds)->ReadSample(id, &a, ReadHint{8}).ok()) << id;
    EXPECT_EQ(std::string(a.begin(), a.end()), Image(static_cast<int>(id)));
  }
  const auto& c = (*ds)->read_counters();
  const uint64_t reads = c.reads.load() - reads_before;
  // 13 blocks of 8; three (ids 24..31, 56..63, 88..95) cross a shard
  // boundary (30, 60, 90): 13 + 3 reads, one per block part, none per sample.
  EXPECT_EQ(reads, 16u);
  EXPECT_EQ(c.block_misses.load(), 16u);
  EXPECT_EQ(c.block_hits.load(), 84u);
  // Without the hint: one read per sample, same bytes.
  for (uint64_t id = 0; id < 100; ++id) {
    ASSERT_TRUE((*ds)->ReadSample(id, &b).ok());
    EXPECT_EQ(std::string(b.begin(), b.end()), Image(static_cast<int>(id)));
  }
  EXPECT_EQ(c.reads.load() - reads_before, 116u);
}

TEST(RecordDatasetTest, BlockViewsPointIntoTheBlockWithoutACopy) {
  auto storage = Shards(20, 20);
  auto ds = Dataset::Open(Config(), storage);
  ASSERT_TRUE(ds.ok());
  std::vector<uint8_t> scratch;
  absl::StatusOr<SampleView> v3 = (*ds)->ReadSampleView(3, ReadHint{8}, &scratch);
  absl::StatusOr<SampleView> v5 = (*ds)->ReadSampleView(5, ReadHint{8}, &scratch);
  ASSERT_TRUE(v3.ok() && v5.ok());
  EXPECT_EQ(std::string(v3->data, v3->data + v3->size), Image(3));
  EXPECT_EQ(std::string(v5->data, v5->data + v5->size), Image(5));
  // Both are views of the same block (ids 0..7), held alive by `keep`; the
  // caller's scratch was not used.
  ASSERT_NE(v3->keep, nullptr);
  EXPECT_EQ(v3->keep, v5->keep);
  EXPECT_GT(v5->data, v3->data);
  EXPECT_TRUE(scratch.empty());
  EXPECT_EQ((*ds)->read_counters().reads.load(), 1u);
  // Without the hint the bytes land in the scratch vector.
  absl::StatusOr<SampleView> v9 = (*ds)->ReadSampleView(9, ReadHint{}, &scratch);
  ASSERT_TRUE(v9.ok());
  EXPECT_EQ(v9->keep, nullptr);
  EXPECT_EQ(v9->data, scratch.data());
  EXPECT_EQ(std::string(v9->data, v9->data + v9->size), Image(9));
}

TEST(RecordDatasetTest, DamagedRecordFailsAloneWithShardAndOffset) {
  auto storage = std::make_shared<MemStorage>();
  std::string shard;
  for (int i = 0; i < 4; ++i) records::AppendTfRecord(Example(Image(i), i), &shard);
  const size_t second = Example(Image(0), 0).size() + records::kTfRecordOverheadBytes;
  shard[second + 200] ^= 0x5a;
  storage->AddFile("s.tfrecord", shard);
  auto ds = Dataset::Open(Config(), storage);
  ASSERT_TRUE(ds.ok());
  ASSERT_EQ((*ds)->size(), 4u);
  std::vector<uint8_t> out;
  for (uint64_t hint : {uint64_t{0}, uint64_t{4}}) {
    EXPECT_TRUE((*ds)->ReadSample(0, &out, ReadHint{hint}).ok());
    absl::Status s = (*ds)->ReadSample(1, &out, ReadHint{hint});
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(s.message().find("s.tfrecord offset " + std::to_string(second)),
              std::string::npos)
        << s;
    EXPECT_TRUE((*ds)->ReadSample(2, &out, ReadHint{hint}).ok());
  }
}

TEST(RecordDatasetTest, ShardChangedAfterIndexingIsDataLossNotACrash) {
  auto storage = Shards(10, 10);
  auto ds = Dataset::Open(Config(), storage);
  ASSERT_TRUE(ds.ok());
  std::string text;
  ASSERT_TRUE(ReadFileToString(*storage, "train-0.tfrecord", &text).ok());
  storage->AddFile("train-0.tfrecord", text.substr(0, text.size() / 2));
  std::vector<uint8_t> out;
  for (uint64_t hint : {uint64_t{0}, uint64_t{5}}) {
    absl::Status s = (*ds)->ReadSample(9, &out, ReadHint{hint});
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find("truncated"), std::string::npos) << s;
  }
  EXPECT_TRUE((*ds)->ReadSample(0, &out, ReadHint{0}).ok());
}

TEST(RecordDatasetTest, ReadFaultIsReportedAndNotCached) {
  auto mem = Shards(20, 20);
  auto faulty = std::make_shared<FaultInjectionStorage>(mem);
  auto ds = Dataset::Open(Config(), faulty);
  ASSERT_TRUE(ds.ok());
  faulty->FailReads("train-0.tfrecord", absl::DataLossError("read: Input/output error"));
  std::vector<uint8_t> out;
  absl::Status s = (*ds)->ReadSample(3, &out, ReadHint{10});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("Input/output"), std::string::npos) << s;
  EXPECT_GT(faulty->injected().read_errors, 0u);
  faulty->Clear();
  ASSERT_TRUE((*ds)->ReadSample(3, &out, ReadHint{10}).ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), Image(3));
}

}  // namespace
}  // namespace nearprep
