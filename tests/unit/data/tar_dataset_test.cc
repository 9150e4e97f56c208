// Issue 37 item 11 for tar shards: the label a tar sample is served with
// is checked against its .cls member whenever the sample is read (alone,
// from a block, opened for a P2P read), so an index whose label was edited
// and its checksum recomputed, or a .cls rewritten in place where the file
// system cannot tell, is DATA_LOSS naming the shard, counted, never served.
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "server/data/dataset.h"
#include "server/data/sample_source.h"
#include "server/records/crc32c.h"
#include "server/storage/mem_storage.h"
#include "tests/unit/storage/anonymous_storage.h"
#include "tests/unit/records/tar_test_writer.h"

namespace nearprep {
namespace {

constexpr int kSamples = 12;
constexpr char kShard[] = "train-0.tar";
constexpr char kIndex[] = "train-0.tar.nearprep-index";

std::string Image(int i) {
  return std::string(2000 + 613 * i, static_cast<char>('A' + i));
}
int Label(int i) { return i % 5; }

// Where each sample's image and .cls are in the shard.
struct Places {
  std::vector<size_t> image, cls;
};

// kSamples samples "sNN.jpg" + "sNN.cls" ("LABEL\n"); `cls_text` overrides
// the .cls of one sample (same size, a rewrite in place).
std::string Shard(Places* places = nullptr, int cls_of = -1,
                  const std::string& cls_text = "") {
  std::string tar;
  Places p;
  for (int i = 0; i < kSamples; ++i) {
    char key[8];
    std::snprintf(key, sizeof(key), "s%02d", i);
    p.image.push_back(tartest::AppendMember(absl::StrCat(key, ".jpg"), Image(i), &tar));
    const std::string cls = i == cls_of ? cls_text : absl::StrCat(Label(i), "\n");
    p.cls.push_back(tartest::AppendMember(absl::StrCat(key, ".cls"), cls, &tar));
  }
  tartest::Finish(&tar);
  if (places) *places = p;
  return tar;
}

DatasetConfig Config() {
  DatasetConfig c;
  c.name = "tars";
  c.format = "tar";
  return c;
}

SampleSource Source(const Dataset& d, uint64_t block_samples) {
  SampleSourceOptions o;
  o.block_samples = block_samples;
  return SampleSource(d, o);
}

// The cached index's lines edited by `edit` (entry k is lines[first + k]),
// with the checksum recomputed, as a forger who knows the format does.
void EditIndex(MemStorage* storage,
               const std::function<void(std::vector<std::string>*, size_t first)>& edit) {
  std::string text;
  ASSERT_TRUE(ReadFileToString(*storage, kIndex, &text).ok());
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  size_t first = 0;
  while (first < lines.size() && !absl::StartsWith(lines[first], "entries ")) ++first;
  ASSERT_LT(first, lines.size());
  edit(&lines, first + 1);
  while (!lines.empty() && !absl::StartsWith(lines.back(), "checksum ")) lines.pop_back();
  ASSERT_FALSE(lines.empty());
  lines.pop_back();
  std::string body = absl::StrJoin(lines, "\n") + "\n";
  char hex[16];
  std::snprintf(hex, sizeof(hex), "%08x", records::Crc32c(body.data(), body.size()));
  storage->AddFile(kIndex, absl::StrCat(body, "checksum ", hex, "\n"));
}

void ForgeLabel(MemStorage* storage, int sample, int label) {
  EditIndex(storage, [&](std::vector<std::string>* lines, size_t first) {
    std::vector<std::string> f = absl::StrSplit((*lines)[first + sample], ' ');
    f[f.size() - 2] = absl::StrCat(label);  // LABEL, before KEY
    (*lines)[first + sample] = absl::StrJoin(f, " ");
  });
}

// Whether the block of sample i alone (its image rounded out to 4 KiB)
// misses its .cls, so that the check reads it.
bool ClsOutsideItsBlock(const Places& p, int i) {
  const size_t end = (p.image[i] + Image(i).size() + 4095) / 4096 * 4096;
  return p.cls[i] + 2 > end;
}

TEST(TarLabelCheckTest, HonestSamplesAreServedAloneAndFromBlocks) {
  auto storage = std::make_shared<MemStorage>();
  Places p;
  storage->AddFile(kShard, Shard(&p));
  auto ds = Dataset::Open(Config(), storage);
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::string text;
  ASSERT_TRUE(ReadFileToString(*storage, kIndex, &text).ok());
  EXPECT_EQ(text.rfind("nearprep-shard-index 3\n", 0), 0u);
  const ReadCounters& c = (*ds)->store().read_counters();
  std::vector<uint8_t> out;
  for (int i = 0; i < kSamples; ++i) {
    const uint64_t reads = c.reads.load();
    ASSERT_TRUE((*ds)->store().ReadSample(i, &out).ok()) << i;
    EXPECT_EQ(std::string(out.begin(), out.end()), Image(i)) << i;
    EXPECT_EQ((*ds)->samples()[i].label, Label(i));
    // Alone: the image, and the page that holds the .cls.
    EXPECT_EQ(c.reads.load() - reads, 2u) << i;
  }
  // Blocks of one sample: the .cls is read from the block when the block's
  // 4 KiB rounding holds it, else with one more read.
  int outside = 0;
  for (int i = 0; i < kSamples; ++i) outside += ClsOutsideItsBlock(p, i);
  ASSERT_GT(outside, 0);
  ASSERT_LT(outside, kSamples);
  uint64_t reads = c.reads.load();
  for (int i = 0; i < kSamples; ++i) {
    ASSERT_TRUE(Source(**ds, 1).ReadInto(i, &out).ok()) << i;
    EXPECT_EQ(std::string(out.begin(), out.end()), Image(i)) << i;
  }
  EXPECT_EQ(c.reads.load() - reads, static_cast<uint64_t>(kSamples + outside));
  // Blocks of four: one read each (their .cls lie between their images,
  // the last one's inside the rounding or read alone).
  reads = c.reads.load();
  for (int i = 0; i < kSamples; ++i) {
    ASSERT_TRUE(Source(**ds, 4).ReadInto(i, &out).ok()) << i;
    EXPECT_EQ(std::string(out.begin(), out.end()), Image(i)) << i;
  }
  EXPECT_LE(c.reads.load() - reads, 6u);
  EXPECT_EQ(c.shard_changed.load(), 0u);
}

TEST(TarLabelCheckTest, ForgedLabelWithResealedChecksumIsRefusedWhenRead) {
  auto storage = std::make_shared<MemStorage>();
  Places p;
  storage->AddFile(kShard, Shard(&p));
  ASSERT_TRUE(Dataset::Open(Config(), storage).ok());
  // One sample whose .cls lies in its one-sample block, one outside it.
  int inside = -1, outside = -1;
  for (int i = 0; i < kSamples; ++i) {
    (ClsOutsideItsBlock(p, i) ? outside : inside) = i;
  }
  ASSERT_GE(inside, 0);
  ASSERT_GE(outside, 0);
  for (int forged : {inside, outside}) {
    SCOPED_TRACE(forged);
    ForgeLabel(storage.get(), forged, Label(forged) + 1);
  }
  auto ds = Dataset::Open(Config(), storage);
  ASSERT_TRUE(ds.ok()) << ds.status();
  // The forged index passed every check at open: it is used as written.
  EXPECT_EQ((*ds)->indexes_rebuilt(), 0u);
  const ReadCounters& c = (*ds)->store().read_counters();
  std::vector<uint8_t> out;
  for (int forged : {inside, outside}) {
    SCOPED_TRACE(forged);
    EXPECT_EQ((*ds)->samples()[forged].label, Label(forged) + 1);
    const uint64_t changed = c.shard_changed.load();
    absl::Status s = (*ds)->store().ReadSample(forged, &out);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    char path[40];
    std::snprintf(path, sizeof(path), "%s#%010d", kShard, forged);
    EXPECT_NE(s.message().find(absl::StrCat("dataset 'tars': ", path, ": ", kShard,
                                            " offset ", p.cls[forged])),
              std::string::npos)
        << s;
    EXPECT_NE(s.message().find(absl::StrCat("(index: label ", Label(forged) + 1,
                                            "; .cls: label ", Label(forged), ")")),
              std::string::npos)
        << s;
    EXPECT_EQ(c.shard_changed.load(), changed + 1);
    // From a block (the .cls in it, or read), from a block of four, and
    // opened for a P2P read: refused the same.
    for (uint64_t block : {1, 4}) {
      s = Source(**ds, block).ReadInto(forged, &out);
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << block << ": " << s;
      EXPECT_NE(s.message().find("the index does not hold"), std::string::npos) << s;
    }
    OpenOptions direct;
    direct.direct = true;
    EXPECT_EQ(Source(**ds, 0).OpenSample(forged, direct).status().code(),
              absl::StatusCode::kDataLoss);
    EXPECT_EQ(c.shard_changed.load(), changed + 4);
  }
  // The others are served as before.
  for (int i = 0; i < kSamples; ++i) {
    if (i == inside || i == outside) continue;
    ASSERT_TRUE((*ds)->store().ReadSample(i, &out).ok()) << i;
    EXPECT_EQ(std::string(out.begin(), out.end()), Image(i)) << i;
    ASSERT_TRUE(Source(**ds, 4).ReadInto(i, &out).ok()) << i;
  }
}

using testing::AnonymousStorage;  // tests/unit/storage/anonymous_storage.h

TEST(TarLabelCheckTest, ClsRewrittenInPlaceIsRefused) {
  // Sample 6's .cls rewritten under a running dataset: another label, or
  // not a label; same size.
  for (const std::string& cls : {std::string("4\n"), std::string("?\n")}) {
    SCOPED_TRACE(cls);
    ASSERT_NE(cls, absl::StrCat(Label(6), "\n"));
    auto mem = std::make_shared<MemStorage>();
    mem->AddFile(kShard, Shard());
    auto ds = Dataset::Open(Config(), std::make_shared<AnonymousStorage>(mem));
    ASSERT_TRUE(ds.ok()) << ds.status();
    mem->AddFile(kShard, Shard(nullptr, 6, cls));
    std::vector<uint8_t> out;
    for (uint64_t block : {0, 1, 4}) {
      absl::Status s = Source(**ds, block).ReadInto(6, &out);
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << block << ": " << s;
      EXPECT_NE(s.message().find("train-0.tar#0000000006"), std::string::npos) << s;
      EXPECT_NE(s.message().find(cls[0] == '4' ? ".cls: label 4)" : "not a decimal integer"),
                std::string::npos)
          << s;
    }
    for (int i : {0, 5, 7, 11}) ASSERT_TRUE((*ds)->store().ReadSample(i, &out).ok()) << i;
    EXPECT_EQ((*ds)->store().read_counters().shard_changed.load(), 3u);
  }
}

TEST(TarLabelCheckTest, Version2IndexIsRebuiltThenChecked) {
  auto storage = std::make_shared<MemStorage>();
  storage->AddFile(kShard, Shard());
  ASSERT_TRUE(Dataset::Open(Config(), storage).ok());
  // The index as version 2 wrote it (no .cls places), with a forged label.
  EditIndex(storage.get(), [](std::vector<std::string>* lines, size_t first) {
    (*lines)[0] = "nearprep-shard-index 2";
    for (size_t i = first; i < lines->size() && !absl::StartsWith((*lines)[i], "checksum ");
         ++i) {
      std::vector<std::string> f = absl::StrSplit((*lines)[i], ' ');
      f.erase(f.begin() + 4, f.begin() + 6);
      if (i == first + 2) f[f.size() - 2] = "4";  // sample 2: label 2
      (*lines)[i] = absl::StrJoin(f, " ");
    }
  });
  auto ds = Dataset::Open(Config(), storage);
  ASSERT_TRUE(ds.ok()) << ds.status();
  // Its labels cannot be checked when read: not used, rebuilt (and cached
  // as version 3), every sample served with its own label.
  EXPECT_EQ((*ds)->indexes_rebuilt(), 1u);
  std::string text;
  ASSERT_TRUE(ReadFileToString(*storage, kIndex, &text).ok());
  EXPECT_EQ(text.rfind("nearprep-shard-index 3\n", 0), 0u);
  std::vector<uint8_t> out;
  for (int i = 0; i < kSamples; ++i) {
    EXPECT_EQ((*ds)->samples()[i].label, Label(i)) << i;
    ASSERT_TRUE((*ds)->store().ReadSample(i, &out).ok()) << i;
  }
  auto again = Dataset::Open(Config(), storage);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->indexes_rebuilt(), 0u);
}

}  // namespace
}  // namespace nearprep
