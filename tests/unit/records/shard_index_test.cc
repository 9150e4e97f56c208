#include "server/records/shard_index.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "nearprep/v1/tf_example.pb.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/records/crc32c.h"
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

// An index text edited by hand and given a correct checksum again (what a
// forger who knows the format does).
std::string Reseal(std::string text) {
  const size_t at = text.rfind("\nchecksum ");
  if (at != std::string::npos) text.resize(at + 1);
  if (text.empty() || text.back() != '\n') text += '\n';
  char hex[16];
  std::snprintf(hex, sizeof(hex), "%08x", Crc32c(text.data(), text.size()));
  return absl::StrCat(text, "checksum ", hex, "\n");
}

// The lines of `text`, and back.
std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n');
}

// A TFRecord shard of `n` records (image i: 200 + i bytes, label i) and its
// index.
std::string TfShard(int n, ShardIndex* index) {
  std::string shard;
  for (int i = 0; i < n; ++i) {
    AppendTfRecord(Example(std::string(200 + i, static_cast<char>('a' + i)), i), &shard);
  }
  *index = *BuildShardIndex("s.tfrecord", shard.size(), 9, StringReader(shard),
                            TfOptions());
  return shard;
}

// The line of entry `k` in a serialized index.
size_t EntryLine(const std::vector<std::string>& lines, int k) {
  for (size_t i = 0; i < lines.size(); ++i) {
    if (absl::StartsWith(lines[i], "entries ")) return i + 1 + k;
  }
  return 0;
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
  e.cls_offset = 4096;  // the .cls after the image's padding and header
  e.cls_bytes = 3;
  e.key = "caf\xc3\xa9 dir/50% off\x01";
  index.entries.push_back(e);
  e.key = "-";
  e.has_label = false;
  e.cls_offset = e.cls_bytes = 0;
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
  EXPECT_EQ(back->entries[0].cls_offset, 4096u);
  EXPECT_EQ(back->entries[0].cls_bytes, 3u);
  EXPECT_EQ(back->version, 3);
  EXPECT_EQ(text.rfind("nearprep-shard-index 3\n", 0), 0u) << text;
  EXPECT_NE(text.find("\n512 3000 512 3000 4096 3 - -7 "), std::string::npos) << text;
  EXPECT_FALSE(back->entries[1].has_label);
}

// The fields' escaping (common/percent_escape.h) as files on disk have it:
// a change here would make every .nearprep-index stale or unreadable.
TEST(ShardIndexTest, KeysKeepTheirEscapedBytes) {
  ShardIndex index;
  index.format = "tar";
  index.shard_bytes = 4096;
  index.options = "tar";
  IndexEntry e;
  e.payload_bytes = e.record_bytes = 5;
  for (const char* key : {"a;b=c d%\x7f\xc3\xa9", "-", "", "--"}) {
    e.key = key;
    index.entries.push_back(e);
    e.record_offset = e.payload_offset += 512;  // tar blocks
  }
  e.key = "k";
  e.error = "bad .cls";
  index.entries.push_back(e);
  const std::string text = SerializeShardIndex(index);
  EXPECT_NE(text.find("\n0 5 0 5 - - - - a;b=c%20d%25%7F%C3%A9\n"
                      "512 5 512 5 - - - - %2D\n"
                      "1024 5 1024 5 - - - - -\n"
                      "1536 5 1536 5 - - - - --\n"
                      "2048 5 2048 5 - - - - k bad%20.cls\n"),
            std::string::npos)
      << text;
  auto back = ParseShardIndex(text);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->entries.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(back->entries[i].key, index.entries[i].key) << i;
  }
  EXPECT_EQ(back->entries[4].error, "bad .cls");
  // Lowercase hex (a hand-edited file) reads the same.
  std::string lower = text;
  lower.replace(lower.find("%C3%A9"), 6, "%c3%a9");
  back = ParseShardIndex(Reseal(lower));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->entries[0].key, index.entries[0].key);
}

// A '%' not followed by two hex digits is refused, naming the line (the old
// strtol-based reader took "%+1" and "%-1" as bytes 1 and 0xff).
TEST(ShardIndexTest, RefusesAMalformedEscape) {
  ShardIndex index;
  index.format = "tar";
  index.shard_bytes = 100;
  index.options = "tar";
  IndexEntry e;
  e.payload_offset = 0;
  e.payload_bytes = e.record_bytes = 5;
  e.key = "k\x01";  // written "k%01"
  index.entries.push_back(e);
  const std::string text = SerializeShardIndex(index);
  ASSERT_TRUE(ParseShardIndex(text).ok());
  for (const char* bad : {"k%+1", "k%-1", "k%G1", "k%0", "k%"}) {
    SCOPED_TRACE(bad);
    std::string broken = text;
    broken.replace(broken.find("k%01"), 4, bad);
    auto r = ParseShardIndex(Reseal(broken));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("line 8"), std::string::npos)
        << r.status();
  }
}

TEST(ShardIndexTest, MalformedIndexNamesTheLine) {
  ShardIndex index;
  index.format = "tar";
  index.shard_bytes = 10;
  index.options = "tar";
  IndexEntry e;
  e.payload_offset = 0;
  e.payload_bytes = e.record_bytes = 5;
  index.entries.push_back(e);
  std::string text = SerializeShardIndex(index);
  EXPECT_TRUE(ParseShardIndex(text).ok());
  std::string outside = text;
  outside.replace(outside.find("\n0 5 0 5 ") + 1, 8, "8 5 8 5 ");  // past shard_bytes
  auto r = ParseShardIndex(Reseal(outside));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("line 8"), std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("outside the shard"), std::string::npos)
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

// Issue 23 item 6: a cached index is not trusted on its word.

TEST(ShardIndexBindingTest, ForgedLabelFailsTheIndexChecksum) {
  ShardIndex index;
  TfShard(4, &index);
  const std::string text = SerializeShardIndex(index);
  ASSERT_TRUE(ParseShardIndex(text).ok());
  std::vector<std::string> lines = Lines(text);
  const size_t l = EntryLine(lines, 2);
  std::vector<std::string> f = absl::StrSplit(lines[l], ' ');
  ASSERT_EQ(f[7], "2");
  f[7] = "999";  // the forged label
  lines[l] = absl::StrJoin(f, " ");
  auto r = ParseShardIndex(absl::StrJoin(lines, "\n"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("checksum"), std::string::npos) << r.status();
}

TEST(ShardIndexBindingTest, SwappedEntriesAreRefusedEvenResealed) {
  ShardIndex index;
  TfShard(4, &index);
  std::vector<std::string> lines = Lines(SerializeShardIndex(index));
  std::swap(lines[EntryLine(lines, 1)], lines[EntryLine(lines, 2)]);
  auto r = ParseShardIndex(Reseal(absl::StrJoin(lines, "\n")));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("does not start where the previous"),
            std::string::npos) << r.status();
}

TEST(ShardIndexBindingTest, DroppedEntryIsRefusedEvenResealed) {
  for (int dropped : {0, 1, 3}) {
    ShardIndex index;
    TfShard(4, &index);
    std::vector<std::string> lines = Lines(SerializeShardIndex(index));
    lines.erase(lines.begin() + EntryLine(lines, dropped));
    lines[EntryLine(lines, 0) - 1] = "entries 3";
    auto r = ParseShardIndex(Reseal(absl::StrJoin(lines, "\n")));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << dropped;
    EXPECT_NE(r.status().message().find("missing"), std::string::npos)
        << dropped << ": " << r.status();
  }
}

TEST(ShardIndexBindingTest, HugeRecordIsRefusedBeforeAnyRead) {
  ShardIndex index;
  TfShard(2, &index);
  // The last entry claims 2^33 bytes, and the index a shard big enough to
  // hold them (the shard_bytes line is the index's own word too).
  for (uint64_t shard_bytes : {index.shard_bytes, uint64_t{1} << 40}) {
    std::vector<std::string> lines = Lines(SerializeShardIndex(index));
    lines[2] = absl::StrCat("shard_bytes ", shard_bytes);
    const size_t l = EntryLine(lines, 1);
    std::vector<std::string> f = absl::StrSplit(lines[l], ' ');
    f[1] = absl::StrCat(uint64_t{1} << 33);
    lines[l] = absl::StrJoin(f, " ");
    auto r = ParseShardIndex(Reseal(absl::StrJoin(lines, "\n")));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("record limit"), std::string::npos)
        << r.status();
  }
}

TEST(ShardIndexBindingTest, IndexIsBoundToTheShardBytes) {
  ShardIndex index;
  std::string shard = TfShard(3, &index);
  auto same = ShardCheck(shard.size(), StringReader(shard));
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, index.shard_check);
  EXPECT_EQ(index.shard_check.rfind("crc32c:", 0), 0u) << index.shard_check;
  // The same size, one byte of an image changed (mtime kept, e.g. cp -p).
  shard[index.entries[1].payload_offset] ^= 1;
  auto changed = ShardCheck(shard.size(), StringReader(shard));
  ASSERT_TRUE(changed.ok());
  EXPECT_NE(*changed, index.shard_check);
  // A shard larger than head + tail: a change in the tail is seen.
  std::string big(3 * kShardCheckBytes, 'x');
  auto a = ShardCheck(big.size(), StringReader(big));
  big[big.size() - 10] = 'y';
  auto b = ShardCheck(big.size(), StringReader(big));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  // The binding survives a round trip of the cached form.
  auto back = ParseShardIndex(SerializeShardIndex(index));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shard_check, index.shard_check);
  EXPECT_TRUE(back->entries[0].has_data_crc);
  EXPECT_EQ(back->entries[0].data_crc, index.entries[0].data_crc);
}

TEST(ShardIndexBindingTest, ShortTextsAreRefusedNotACrash) {
  for (const char* text : {"", "\n", "\n\n", "checksum 0\n", "x\nchecksum 0"}) {
    EXPECT_FALSE(ParseShardIndex(text).ok()) << text;
  }
}

TEST(ShardIndexBindingTest, OldVersionIndexIsNotParsed) {
  ShardIndex index;
  TfShard(2, &index);
  std::string text = SerializeShardIndex(index);
  text.replace(0, std::string("nearprep-shard-index 2").size(), "nearprep-shard-index 1");
  EXPECT_FALSE(ParseShardIndex(Reseal(text)).ok());
}

}  // namespace
}  // namespace nearprep::records
