// Record datasets through the storage seam (in memory): sample ids, labels
// and bytes of TFRecord shards, block reads (one read per block, the same
// bytes as sample reads), per-sample errors for damaged records, and a read
// fault that is reported and not cached.
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nearprep/v1/tf_example.pb.h"
#include "server/data/block_shuffle.h"
#include "server/data/dataset.h"
#include "server/data/sample_source.h"
#include "server/records/crc32c.h"
#include "server/records/tfrecord.h"
#include "server/storage/fault_injection_storage.h"
#include "server/storage/mem_storage.h"
#include "tests/unit/storage/anonymous_storage.h"

namespace nearprep {
namespace {

// A stream's source over `d` reading blocks of `block_samples` (block
// shuffle; 0: each sample alone).
SampleSource Source(const Dataset& d, uint64_t block_samples) {
  SampleSourceOptions o;
  o.block_samples = block_samples;
  return SampleSource(d, o);
}

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
    ASSERT_TRUE((*ds)->store().ReadSample(i, &bytes).ok());
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
  const uint64_t reads_before = (*ds)->store().read_counters().reads.load();
  for (uint64_t id : order) {
    ASSERT_TRUE(Source(**ds, 8).ReadInto(id, &a).ok()) << id;
    EXPECT_EQ(std::string(a.begin(), a.end()), Image(static_cast<int>(id)));
  }
  const auto& c = (*ds)->store().read_counters();
  const uint64_t reads = c.reads.load() - reads_before;
  // 13 blocks of 8; three (ids 24..31, 56..63, 88..95) cross a shard
  // boundary (30, 60, 90): 13 + 3 reads, one per block part, none per sample.
  EXPECT_EQ(reads, 16u);
  EXPECT_EQ(c.block_misses.load(), 16u);
  EXPECT_EQ(c.block_hits.load(), 84u);
  // Without the hint: one read per sample, same bytes.
  for (uint64_t id = 0; id < 100; ++id) {
    ASSERT_TRUE((*ds)->store().ReadSample(id, &b).ok());
    EXPECT_EQ(std::string(b.begin(), b.end()), Image(static_cast<int>(id)));
  }
  EXPECT_EQ(c.reads.load() - reads_before, 116u);
}

TEST(RecordDatasetTest, BlockViewsPointIntoTheBlockWithoutACopy) {
  auto storage = Shards(20, 20);
  auto ds = Dataset::Open(Config(), storage);
  ASSERT_TRUE(ds.ok());
  std::vector<uint8_t> scratch;
  absl::StatusOr<SampleView> v3 = Source(**ds, 8).Read(3, &scratch);
  absl::StatusOr<SampleView> v5 = Source(**ds, 8).Read(5, &scratch);
  ASSERT_TRUE(v3.ok() && v5.ok());
  EXPECT_EQ(std::string(v3->data, v3->data + v3->size), Image(3));
  EXPECT_EQ(std::string(v5->data, v5->data + v5->size), Image(5));
  // Both are views of the same block (ids 0..7), held alive by `keep`; the
  // caller's scratch was not used.
  ASSERT_NE(v3->keep, nullptr);
  EXPECT_EQ(v3->keep, v5->keep);
  EXPECT_GT(v5->data, v3->data);
  EXPECT_TRUE(scratch.empty());
  EXPECT_EQ((*ds)->store().read_counters().reads.load(), 1u);
  // Without the hint the bytes land in the scratch vector.
  absl::StatusOr<SampleView> v9 = Source(**ds, 0).Read(9, &scratch);
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
    EXPECT_TRUE(Source(**ds, hint).ReadInto(0, &out).ok());
    absl::Status s = Source(**ds, hint).ReadInto(1, &out);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(s.message().find("s.tfrecord offset " + std::to_string(second)),
              std::string::npos)
        << s;
    EXPECT_TRUE(Source(**ds, hint).ReadInto(2, &out).ok());
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
  // The shard is no longer the file that was indexed: none of it is served
  // (issue 23 item 7), the records still in it included.
  for (uint64_t id : {uint64_t{9}, uint64_t{0}}) {
    for (uint64_t hint : {uint64_t{0}, uint64_t{5}}) {
      absl::Status s = Source(**ds, hint).ReadInto(id, &out);
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
      EXPECT_NE(s.message().find("replaced or rewritten since it was indexed (size "),
                std::string::npos) << s;
    }
  }
}

TEST(RecordDatasetTest, ReadFaultIsReportedAndNotCached) {
  auto mem = Shards(20, 20);
  auto faulty = std::make_shared<FaultInjectionStorage>(mem);
  auto ds = Dataset::Open(Config(), faulty);
  ASSERT_TRUE(ds.ok());
  faulty->FailReads("train-0.tfrecord", absl::DataLossError("read: Input/output error"));
  std::vector<uint8_t> out;
  absl::Status s = Source(**ds, 10).ReadInto(3, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("Input/output"), std::string::npos) << s;
  EXPECT_GT(faulty->injected().read_errors, 0u);
  faulty->Clear();
  ASSERT_TRUE(Source(**ds, 10).ReadInto(3, &out).ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), Image(3));
}

// Issue 23 items 6 and 7: a cached index is used only while it is bound to
// its shard, and a shard replaced after indexing is refused, never served
// with the old labels.

// The cached index of train-0.tfrecord, edited by `edit` on its lines
// (entry k of the shard is lines[first + k]).
void EditIndex(MemStorage* storage,
               const std::function<void(std::vector<std::string>*, size_t first)>& edit) {
  const std::string name = "train-0.tfrecord.nearprep-index";
  std::string text;
  ASSERT_TRUE(ReadFileToString(*storage, name, &text).ok());
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  size_t first = 0;
  while (first < lines.size() && lines[first].rfind("entries ", 0) != 0) ++first;
  ASSERT_LT(first, lines.size());
  edit(&lines, first + 1);
  storage->AddFile(name, absl::StrJoin(lines, "\n"));
}

// Every sample of Shards(n, n) has its own image and label.
void ExpectServedRight(const Dataset& ds, int n) {
  ASSERT_EQ(ds.size(), static_cast<size_t>(n));
  std::vector<uint8_t> bytes;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(ds.store().ReadSample(i, &bytes).ok()) << i;
    EXPECT_EQ(std::string(bytes.begin(), bytes.end()), Image(i)) << i;
    EXPECT_EQ(ds.samples()[i].label, i % 7) << i;
  }
}

TEST(RecordIndexTrustTest, ForgedLabelIsRebuiltNotServed) {
  auto storage = Shards(10, 10);
  ASSERT_TRUE(Dataset::Open(Config(), storage).ok());
  EditIndex(storage.get(), [](std::vector<std::string>* lines, size_t first) {
    std::vector<std::string> f = absl::StrSplit((*lines)[first + 3], ' ');
    f[f.size() - 2] = "6";  // the label (before the key '-'): was 4
    (*lines)[first + 3] = absl::StrJoin(f, " ");
  });
  auto ds = Dataset::Open(Config(), storage);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ExpectServedRight(**ds, 10);
  EXPECT_EQ((*ds)->indexes_rebuilt(), 1u);
  // The rebuilt index was cached again and is trusted from now on.
  auto again = Dataset::Open(Config(), storage);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->indexes_rebuilt(), 0u);
}

// The index's checksum is a CRC anyone can recompute: rewrite it after the
// edit so that the index is reused as it is.
void Reseal(std::vector<std::string>* lines) {
  while (!lines->empty() && lines->back().empty()) lines->pop_back();
  ASSERT_FALSE(lines->empty());
  ASSERT_EQ(lines->back().rfind("checksum ", 0), 0u);
  lines->pop_back();
  std::string body = absl::StrJoin(*lines, "\n") + "\n";
  char hex[16];
  std::snprintf(hex, sizeof(hex), "%08x", records::Crc32c(body.data(), body.size()));
  lines->push_back(std::string("checksum ") + hex);
  lines->push_back("");
}

TEST(RecordIndexTrustTest, ForgedLabelWithResealedChecksumIsRefusedWhenRead) {
  auto storage = Shards(10, 10);
  ASSERT_TRUE(Dataset::Open(Config(), storage).ok());
  EditIndex(storage.get(), [](std::vector<std::string>* lines, size_t first) {
    std::vector<std::string> f = absl::StrSplit((*lines)[first + 3], ' ');
    f[f.size() - 2] = "6";  // the label (before the key '-'): was 4
    (*lines)[first + 3] = absl::StrJoin(f, " ");
    Reseal(lines);
  });
  auto ds = Dataset::Open(Config(), storage);
  ASSERT_TRUE(ds.ok()) << ds.status();
  // The forged index passed every check at open: it was reused as written
  // (labels are served with Config()'s label_offset -1).
  EXPECT_EQ((*ds)->indexes_rebuilt(), 0u);
  EXPECT_EQ((*ds)->samples()[3].label, 5);
  // The record itself says 4 (3 served): reading it refuses the sample,
  // named, counted.
  const uint64_t changed = (*ds)->store().read_counters().shard_changed.load();
  std::vector<uint8_t> bytes;
  absl::Status st = (*ds)->store().ReadSample(3, &bytes);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("train-0.tfrecord#0000000003"), std::string::npos) << st;
  EXPECT_NE(st.message().find("label 5; record:"), std::string::npos) << st;
  EXPECT_NE(st.message().find("label 3)"), std::string::npos) << st;
  EXPECT_EQ((*ds)->store().read_counters().shard_changed.load(), changed + 1);
  // So does the block path a stream uses.
  std::vector<uint8_t> a;
  EXPECT_EQ(Source(**ds, 4).ReadInto(3, &a).code(), absl::StatusCode::kDataLoss);
  // The other samples are served as before.
  for (int i : {0, 1, 2, 4, 9}) {
    ASSERT_TRUE((*ds)->store().ReadSample(i, &bytes).ok()) << i;
    EXPECT_EQ(std::string(bytes.begin(), bytes.end()), Image(i)) << i;
  }
}

TEST(RecordIndexTrustTest, ForgedImagePlaceWithResealedChecksumIsRefusedWhenRead) {
  auto storage = Shards(10, 10);
  ASSERT_TRUE(Dataset::Open(Config(), storage).ok());
  EditIndex(storage.get(), [](std::vector<std::string>* lines, size_t first) {
    // RECORD_OFFSET RECORD_BYTES PAYLOAD_OFFSET PAYLOAD_BYTES ...: the image
    // one byte later and one shorter, still inside the record.
    std::vector<std::string> f = absl::StrSplit((*lines)[first + 5], ' ');
    f[2] = std::to_string(std::stoull(f[2]) + 1);
    f[3] = std::to_string(std::stoull(f[3]) - 1);
    (*lines)[first + 5] = absl::StrJoin(f, " ");
    Reseal(lines);
  });
  auto ds = Dataset::Open(Config(), storage);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->indexes_rebuilt(), 0u);
  std::vector<uint8_t> bytes;
  absl::Status st = (*ds)->store().ReadSample(5, &bytes);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("the index does not hold"), std::string::npos) << st;
  ASSERT_TRUE((*ds)->store().ReadSample(6, &bytes).ok());
}

TEST(RecordIndexTrustTest, SwappedEntriesAreRebuiltNotServed) {
  auto storage = Shards(10, 10);
  ASSERT_TRUE(Dataset::Open(Config(), storage).ok());
  EditIndex(storage.get(), [](std::vector<std::string>* lines, size_t first) {
    std::swap((*lines)[first + 3], (*lines)[first + 4]);
  });
  auto ds = Dataset::Open(Config(), storage);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ExpectServedRight(**ds, 10);
  EXPECT_EQ((*ds)->indexes_rebuilt(), 1u);
}

TEST(RecordIndexTrustTest, DroppedEntryIsRebuiltNotServed) {
  auto storage = Shards(10, 10);
  ASSERT_TRUE(Dataset::Open(Config(), storage).ok());
  EditIndex(storage.get(), [](std::vector<std::string>* lines, size_t first) {
    lines->erase(lines->begin() + first + 5);
    (*lines)[first - 1] = "entries 9";
  });
  auto ds = Dataset::Open(Config(), storage);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ExpectServedRight(**ds, 10);
  EXPECT_EQ((*ds)->indexes_rebuilt(), 1u);
}

TEST(RecordIndexTrustTest, CorruptedChecksumIsRebuilt) {
  auto storage = Shards(10, 10);
  ASSERT_TRUE(Dataset::Open(Config(), storage).ok());
  EditIndex(storage.get(), [](std::vector<std::string>* lines, size_t) {
    for (auto it = lines->rbegin(); it != lines->rend(); ++it) {
      if (it->rfind("checksum ", 0) == 0) {
        (*it)[it->size() - 1] = (*it)[it->size() - 1] == '0' ? '1' : '0';
        return;
      }
    }
    ADD_FAILURE() << "no checksum line";
  });
  auto ds = Dataset::Open(Config(), storage);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ExpectServedRight(**ds, 10);
  EXPECT_EQ((*ds)->indexes_rebuilt(), 1u);
}

using testing::AnonymousStorage;  // tests/unit/storage/anonymous_storage.h

// Shard 0 rewritten with records of the same sizes: other images (and
// labels), valid framing and CRCs.
void ReplaceShardSameSizes(MemStorage* storage, int n) {
  std::string shard;
  for (int i = 0; i < n; ++i) {
    std::string image = Image(i);
    for (char& c : image) c = static_cast<char>(c + 1);
    records::AppendTfRecord(Example(image, (i + 3) % 7 + 1), &shard);
  }
  std::string old;
  ASSERT_TRUE(ReadFileToString(*storage, "train-0.tfrecord", &old).ok());
  ASSERT_EQ(shard.size(), old.size());
  storage->AddFile("train-0.tfrecord", shard);
}

TEST(RecordShardReplacedTest, ReplacedShardIsRefusedNotMixed) {
  auto storage = Shards(20, 10);
  auto ds = Dataset::Open(Config(), storage);
  ASSERT_TRUE(ds.ok());
  ReplaceShardSameSizes(storage.get(), 10);
  std::vector<uint8_t> out;
  // Alone, from a block, and a fleet plan's block: each read of the
  // replaced shard is DATA_LOSS naming it; the other shard is served.
  for (int i = 0; i < 10; ++i) {
    for (uint64_t hint : {uint64_t{0}, uint64_t{4}}) {
      absl::Status s = Source(**ds, hint).ReadInto(i, &out);
      ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << i << ": " << s;
      EXPECT_NE(s.message().find("train-0.tfrecord"), std::string::npos) << s;
      EXPECT_NE(s.message().find("replaced or rewritten"), std::string::npos) << s;
    }
  }
  auto opened = Source(**ds, 0).OpenSample(3, OpenOptions{});
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kDataLoss);
  for (int i = 10; i < 20; ++i) {
    ASSERT_TRUE((*ds)->store().ReadSample(i, &out).ok()) << i;
    EXPECT_EQ(std::string(out.begin(), out.end()), Image(i));
  }
  EXPECT_GE((*ds)->store().read_counters().shard_changed.load(), 20u);
  // Opened again, the dataset indexes the new shard and serves it whole.
  auto fresh = Dataset::Open(Config(), storage);
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE((*fresh)->store().ReadSample(2, &out).ok());
  EXPECT_EQ((*fresh)->samples()[2].label, (2 + 3) % 7);
  EXPECT_EQ((*fresh)->indexes_rebuilt(), 1u);
}

TEST(RecordShardReplacedTest, RecordCrcCatchesARewriteTheFileSystemHides) {
  auto mem = Shards(10, 10);
  auto anon = std::make_shared<AnonymousStorage>(mem);
  auto ds = Dataset::Open(Config(), anon);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ReplaceShardSameSizes(mem.get(), 10);
  std::vector<uint8_t> out;
  for (int i = 0; i < 10; ++i) {
    for (uint64_t hint : {uint64_t{0}, uint64_t{4}}) {
      absl::Status s = Source(**ds, hint).ReadInto(i, &out);
      ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << i << ": " << s;
      EXPECT_NE(s.message().find("changed since the shard was indexed"),
                std::string::npos) << s;
    }
  }
}

}  // namespace
}  // namespace nearprep
