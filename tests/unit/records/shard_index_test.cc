#include "server/records/shard_index.h"

#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "nearprep/v1/tf_example.pb.h"
#include "server/records/range_reader.h"
#include "server/records/tfrecord.h"

namespace nearprep::records {
namespace {

RangeReader StringReader(const std::string& s) {
  return MemoryRangeReader(s.data(), s.size());
}

std::string Example(const std::string& image, int64_t label) {
  nearprep::tfexample::Example ex;
  auto& f = *ex.mutable_features()->mutable_feature();
  if (!image.empty()) f["image/encoded"].mutable_bytes_list()->add_value(image);
  f["image/class/label"].mutable_int64_list()->add_value(label);
  return ex.SerializeAsString();
}

IndexOptions TfOptions() {
  IndexOptions o;
  o.format = "tfrecord";
  return o;
}

TEST(ShardIndexTest, TfRecordEntriesPointAtTheImageBytes) {
  std::string shard;
  AppendTfRecord(Example("JPEG-A", 1), &shard);
  AppendTfRecord(Example("", 2), &shard);  // No image feature.
  AppendTfRecord(Example("JPEG-CCC", 3), &shard);
  auto index = BuildShardIndex("s.tfrecord", shard.size(), 77,
                               StringReader(shard), TfOptions());
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->entries.size(), 3u);
  const auto& a = index->entries[0];
  EXPECT_EQ(shard.substr(a.payload_offset, a.payload_bytes), "JPEG-A");
  EXPECT_EQ(a.label, 1);
  EXPECT_TRUE(a.error.empty());
  EXPECT_NE(index->entries[1].error.find("has no feature 'image/encoded'"),
            std::string::npos);
  EXPECT_NE(index->entries[1].error.find("s.tfrecord offset "),
            std::string::npos);
  EXPECT_EQ(shard.substr(index->entries[2].payload_offset,
                         index->entries[2].payload_bytes),
            "JPEG-CCC");
  EXPECT_TRUE(index->damage.empty());
}

TEST(ShardIndexTest, SerializesAndParsesBack) {
  ShardIndex index;
  index.format = "tar";
  index.shard_bytes = 100000;
  index.shard_mtime_ns = 1234567890123;
  index.options = "tar";
  index.damage = "t.tar offset 5120: member 'x y' is truncated";
  index.damaged_at = 5120;
  IndexEntry e;
  e.record_offset = e.payload_offset = 512;
  e.record_bytes = e.payload_bytes = 3000;
  e.has_label = true;
  e.label = -7;
  e.key = "caf\xc3\xa9 dir/50% off\x01";
  index.entries.push_back(e);
  e.key = "-";
  e.has_label = false;
  e.error = "t.tar: sample: .cls is not a decimal integer";
  index.entries.push_back(e);
  const std::string text = SerializeShardIndex(index);
  auto back = ParseShardIndex(text);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << text;
  EXPECT_EQ(SerializeShardIndex(*back), text);
  EXPECT_EQ(back->entries[0].key, index.entries[0].key);
  EXPECT_EQ(back->entries[1].key, "-");
  EXPECT_EQ(back->entries[1].error, index.entries[1].error);
  EXPECT_EQ(back->damage, index.damage);
  EXPECT_EQ(back->entries[0].label, -7);
  EXPECT_FALSE(back->entries[1].has_label);
}

TEST(ShardIndexTest, MalformedIndexNamesTheLine) {
  ShardIndex index;
  index.format = "tar";
  index.shard_bytes = 10;
  index.options = "tar";
  IndexEntry e;
  e.payload_offset = 0;
  e.payload_bytes = 5;
  index.entries.push_back(e);
  std::string text = SerializeShardIndex(index);
  EXPECT_TRUE(ParseShardIndex(text).ok());
  std::string outside = text;
  outside.replace(outside.rfind("0 5"), 3, "8 5");  // past shard_bytes
  auto r = ParseShardIndex(outside);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("line 7"), std::string::npos)
      << r.status();
  EXPECT_FALSE(ParseShardIndex("garbage").ok());
  EXPECT_FALSE(ParseShardIndex(text.substr(0, text.size() - 6)).ok());
}

TEST(ShardIndexTest, MatchesOnlyTheSameShardAndOptions) {
  ShardIndex index;
  index.format = "tfrecord";
  index.shard_bytes = 10;
  index.shard_mtime_ns = 5;
  index.options = TfOptions().Fingerprint();
  EXPECT_TRUE(IndexMatches(index, 10, 5, TfOptions()));
  EXPECT_FALSE(IndexMatches(index, 11, 5, TfOptions()));
  EXPECT_FALSE(IndexMatches(index, 10, 6, TfOptions()));
  IndexOptions other = TfOptions();
  other.label_key = "label";
  EXPECT_FALSE(IndexMatches(index, 10, 5, other));
}

TEST(ShardIndexTest, DaliIndexGivesTheSameEntries) {
  std::string shard;
  std::string dali;
  for (int i = 0; i < 5; ++i) {
    const size_t off = shard.size();
    AppendTfRecord(Example(std::string(100 + i, 'a' + i), i), &shard);
    dali += std::to_string(off) + " " + std::to_string(shard.size() - off) + "\n";
  }
  auto scanned = BuildShardIndex("s", shard.size(), 1, StringReader(shard),
                                 TfOptions());
  auto from_dali = BuildTfRecordIndexFromDali("s", shard.size(), 1,
                                              StringReader(shard), TfOptions(),
                                              dali);
  ASSERT_TRUE(scanned.ok() && from_dali.ok());
  EXPECT_EQ(SerializeShardIndex(*scanned), SerializeShardIndex(*from_dali));
  EXPECT_EQ(from_dali->scan_reads, 5u);
  // An index that does not fit the shard is refused, naming the line.
  const std::string first = dali.substr(0, dali.find('\n') + 1);
  auto bad = BuildTfRecordIndexFromDali("s", shard.size(), 1,
                                        StringReader(shard), TfOptions(),
                                        first + "999999 5\n");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos);
  // One whose sizes disagree with the records' framing is damage there.
  auto mismatch = BuildTfRecordIndexFromDali("s", shard.size(), 1,
                                             StringReader(shard), TfOptions(),
                                             "0 16\n");
  ASSERT_TRUE(mismatch.ok());
  EXPECT_TRUE(mismatch->entries.empty());
  EXPECT_NE(mismatch->damage.find("does not match the DALI index"),
            std::string::npos);
}

}  // namespace
}  // namespace nearprep::records
