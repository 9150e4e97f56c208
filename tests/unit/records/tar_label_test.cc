// Issue 37 item 11 for tar shards: index version 3 says where each sample's
// .cls member is, the parser refuses places a forger could use to pass a
// wrong label, and CheckTarLabel reads the .cls again when the sample is
// served. Version 2 indexes still parse; a tar one is not used.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "server/records/crc32c.h"
#include "server/records/range_reader.h"
#include "server/records/shard_index.h"
#include "server/records/tar_shard.h"
#include "server/records/tfrecord.h"
#include "tests/unit/records/tar_test_writer.h"

namespace nearprep::records {
namespace {

// The index text with its checksum recomputed (what a forger does).
std::string Reseal(std::string text) {
  const size_t at = text.rfind("\nchecksum ");
  if (at != std::string::npos) text.resize(at + 1);
  char hex[16];
  std::snprintf(hex, sizeof(hex), "%08x", Crc32c(text.data(), text.size()));
  return absl::StrCat(text, "checksum ", hex, "\n");
}

// Four samples: a (image, then .cls "7\n"), b (.cls "3" before its image),
// c (no .cls), d (a .cls that is not a number).
struct TarShard {
  std::string bytes;
  size_t a_image = 0, a_cls = 0, b_cls = 0, b_image = 0;
};

TarShard Shard() {
  TarShard t;
  t.a_image = tartest::AppendMember("a.jpg", std::string(700, 'j'), &t.bytes);
  t.a_cls = tartest::AppendMember("a.cls", "7\n", &t.bytes);
  t.b_cls = tartest::AppendMember("b.cls", "3", &t.bytes);
  t.b_image = tartest::AppendMember("b.jpg", std::string(100, 'k'), &t.bytes);
  tartest::AppendMember("c.jpg", std::string(50, 'l'), &t.bytes);
  tartest::AppendMember("d.jpg", std::string(60, 'm'), &t.bytes);
  tartest::AppendMember("d.cls", "x", &t.bytes);
  tartest::Finish(&t.bytes);
  return t;
}

IndexOptions TarOptions() {
  IndexOptions o;
  o.format = "tar";
  return o;
}

ShardIndex Index(const TarShard& t) {
  auto index = BuildShardIndex("s.tar", t.bytes.size(), 5,
                               MemoryRangeReader(t.bytes.data(), t.bytes.size()),
                               TarOptions());
  EXPECT_TRUE(index.ok()) << index.status();
  return index.ok() ? *index : ShardIndex();
}

// `text` with entry k's fields changed by `edit` and resealed.
std::string EditEntry(const std::string& text, int k,
                      const std::function<void(std::vector<std::string>*)>& edit) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  size_t first = 0;
  while (!absl::StartsWith(lines[first], "entries ")) ++first;
  std::vector<std::string> f = absl::StrSplit(lines[first + 1 + k], ' ');
  edit(&f);
  lines[first + 1 + k] = absl::StrJoin(f, " ");
  return Reseal(absl::StrJoin(lines, "\n"));
}

// The version 2 form of a version 3 text: no .cls places.
std::string AsVersion2(const std::string& v3) {
  std::vector<std::string> lines = absl::StrSplit(v3, '\n');
  EXPECT_EQ(lines[0], "nearprep-shard-index 3");
  lines[0] = "nearprep-shard-index 2";
  size_t i = 0;
  while (!absl::StartsWith(lines[i], "entries ")) ++i;
  for (++i; i < lines.size() && !absl::StartsWith(lines[i], "checksum "); ++i) {
    std::vector<std::string> f = absl::StrSplit(lines[i], ' ');
    f.erase(f.begin() + 4, f.begin() + 6);
    lines[i] = absl::StrJoin(f, " ");
  }
  return Reseal(absl::StrJoin(lines, "\n"));
}

TEST(TarIndexTest, RecordsWhereEachClsIs) {
  const TarShard t = Shard();
  const ShardIndex index = Index(t);
  ASSERT_EQ(index.entries.size(), 4u);
  const IndexEntry& a = index.entries[0];
  EXPECT_EQ(a.payload_offset, t.a_image);
  EXPECT_EQ(a.cls_offset, t.a_cls);
  EXPECT_EQ(a.cls_bytes, 2u);
  EXPECT_EQ(a.label, 7);
  const IndexEntry& b = index.entries[1];  // .cls before the image
  EXPECT_EQ(b.cls_offset, t.b_cls);
  EXPECT_LT(b.cls_offset, b.payload_offset);
  EXPECT_EQ(b.label, 3);
  EXPECT_EQ(index.entries[2].cls_bytes, 0u);  // no .cls, no label
  EXPECT_FALSE(index.entries[2].has_label);
  EXPECT_FALSE(index.entries[3].error.empty());  // bad .cls: not served
  EXPECT_EQ(index.entries[3].cls_bytes, 0u);
  const std::string text = SerializeShardIndex(index);
  EXPECT_EQ(text.rfind("nearprep-shard-index 3\nformat tar\n", 0), 0u) << text;
  EXPECT_NE(text.find(absl::StrCat("\n", t.a_image, " 700 ", t.a_image, " 700 ",
                                   t.a_cls, " 2 - 7 a\n")),
            std::string::npos)
      << text;
  auto back = ParseShardIndex(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(SerializeShardIndex(*back), text);
  EXPECT_TRUE(IndexMismatch(*back, t.bytes.size(), 5, TarOptions()).empty());
}

TEST(TarIndexTest, Version2StillParsesButATarOneIsNotUsed) {
  const TarShard t = Shard();
  const std::string v2 = AsVersion2(SerializeShardIndex(Index(t)));
  auto back = ParseShardIndex(v2);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << v2;
  EXPECT_EQ(back->version, 2);
  EXPECT_EQ(back->entries[0].label, 7);
  EXPECT_EQ(back->entries[0].cls_bytes, 0u);
  EXPECT_EQ(SerializeShardIndex(*back), v2);  // written back as it was
  EXPECT_NE(IndexMismatch(*back, t.bytes.size(), 5, TarOptions()).find(
                "index version 2 does not say where each sample's .cls"),
            std::string::npos);
  // A TFRecord index of version 2 has everything the read-time checks
  // need: it is used as it is.
  std::string tf;
  AppendTfRecord("not an Example", &tf);
  IndexOptions o;
  o.format = "tfrecord";
  auto tf_index = BuildShardIndex("s.tfrecord", tf.size(), 5,
                                  MemoryRangeReader(tf.data(), tf.size()), o);
  ASSERT_TRUE(tf_index.ok());
  auto tf_v2 = ParseShardIndex(AsVersion2(SerializeShardIndex(*tf_index)));
  ASSERT_TRUE(tf_v2.ok()) << tf_v2.status();
  EXPECT_EQ(tf_v2->version, 2);
  EXPECT_EQ(IndexMismatch(*tf_v2, tf.size(), 5, o), "");
  // Other versions are not read.
  for (const char* magic : {"nearprep-shard-index 1", "nearprep-shard-index 4",
                            "nearprep-shard-index 3 "}) {
    std::string text = SerializeShardIndex(Index(t));
    text.replace(0, text.find('\n'), magic);
    auto r = ParseShardIndex(Reseal(text));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << magic;
  }
}

TEST(TarIndexTest, ForgedClsPlacesAreRefusedEvenResealed) {
  const TarShard t = Shard();
  const std::string text = SerializeShardIndex(Index(t));
  ASSERT_TRUE(ParseShardIndex(text).ok());
  struct Case {
    const char* name;
    int entry;
    std::function<void(std::vector<std::string>*)> edit;
    const char* why;
  };
  const std::vector<Case> cases = {
      // a claims b's .cls (and its label): a's members would reach into b's.
      {"another sample's .cls", 0,
       [&](auto* f) {
         (*f)[4] = absl::StrCat(t.b_cls);
         (*f)[5] = "1";
         (*f)[7] = "3";
       },
       "out of file order"},
      {"not at a tar block", 0,
       [&](auto* f) { (*f)[4] = absl::StrCat(t.a_cls + 1); },
       "not a .cls member's place"},
      {"over 64 bytes", 0, [](auto* f) { (*f)[5] = "65"; },
       "not a .cls member's place"},
      {"inside the image", 0,
       [&](auto* f) { (*f)[4] = absl::StrCat(t.a_image); },
       "inside the image"},
      {"outside the shard", 3,  // d (bad) is last: no order to break
       [&](auto* f) {
         (*f)[4] = absl::StrCat(t.bytes.size());
         (*f)[5] = "1";
       },
       "outside the shard"},
      {"a label without its .cls", 0,
       [](auto* f) { (*f)[4] = (*f)[5] = "-"; }, "a label without its .cls place"},
      {"a .cls without a label", 2,
       [&](auto* f) {
         (*f)[4] = absl::StrCat(t.bytes.size() - 1024 - 512);
         (*f)[5] = "1";
       },
       "a .cls place without a label"},
      {"half a place", 0, [](auto* f) { (*f)[5] = "-"; }, "malformed .cls place"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = ParseShardIndex(EditEntry(text, c.entry, c.edit));
    ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.why), std::string::npos) << r.status();
  }
  // A TFRecord entry has no .cls.
  std::string tf;
  AppendTfRecord("x", &tf);
  IndexOptions o;
  o.format = "tfrecord";
  auto tf_index = BuildShardIndex("s.tfrecord", tf.size(), 5,
                                  MemoryRangeReader(tf.data(), tf.size()), o);
  ASSERT_TRUE(tf_index.ok());
  auto r = ParseShardIndex(EditEntry(SerializeShardIndex(*tf_index), 0, [](auto* f) {
    (*f)[4] = "0";
    (*f)[5] = "1";
  }));
  EXPECT_NE(r.status().message().find("a .cls place in a TFRecord index"),
            std::string::npos) << r.status();
}

// A RangeReader over `bytes` that reads as an O_DIRECT file must be read:
// offset, size and buffer 4 KiB aligned. Counts its reads.
RangeReader AlignedReader(const std::string* bytes, int* reads) {
  return [bytes, reads](uint64_t off, size_t n, uint8_t* dst) -> absl::StatusOr<size_t> {
    ++*reads;
    if (off % 4096 != 0 || n % 4096 != 0 ||
        reinterpret_cast<uintptr_t>(dst) % 4096 != 0) {
      return absl::InvalidArgumentError("unaligned O_DIRECT read");
    }
    return MemoryRangeReader(bytes->data(), bytes->size())(off, n, dst);
  };
}

TarLabelClaim ClaimOf(const TarShard& t, int64_t label) {
  TarLabelClaim c;
  c.shard = "s.tar";
  c.cls_offset = t.a_cls;
  c.cls_bytes = 2;
  c.label = label;
  return c;
}

TEST(CheckTarLabelTest, HonestLabelPassesFromTheBlockOrOneAlignedRead) {
  const TarShard t = Shard();
  int reads = 0;
  bool changed = true;
  const auto* bytes = reinterpret_cast<const uint8_t*>(t.bytes.data());
  // In the bytes in hand (a block from the image to past the .cls): no read.
  EXPECT_TRUE(CheckTarLabel(ClaimOf(t, 7), bytes + t.a_image, t.a_image,
                            t.a_cls + 2 - t.a_image, AlignedReader(&t.bytes, &reads),
                            &changed).ok());
  EXPECT_EQ(reads, 0);
  EXPECT_FALSE(changed);
  // A block that ends one byte short of it: one aligned read.
  EXPECT_TRUE(CheckTarLabel(ClaimOf(t, 7), bytes + t.a_image, t.a_image,
                            t.a_cls + 1 - t.a_image, AlignedReader(&t.bytes, &reads),
                            &changed).ok());
  EXPECT_EQ(reads, 1);
  // Nothing in hand; served with label_offset -1.
  TarLabelClaim offset = ClaimOf(t, 6);
  offset.label_offset = -1;
  EXPECT_TRUE(CheckTarLabel(offset, nullptr, 0, 0, AlignedReader(&t.bytes, &reads),
                            &changed).ok());
  EXPECT_EQ(reads, 2);
}

TEST(CheckTarLabelTest, AnotherLabelIsDataLossNamingTheShard) {
  TarShard t = Shard();
  int reads = 0;
  bool changed = false;
  // The index forged (says 5), the .cls says 7.
  absl::Status s = CheckTarLabel(ClaimOf(t, 5), nullptr, 0, 0,
                                 AlignedReader(&t.bytes, &reads), &changed);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(changed);
  EXPECT_NE(s.message().find(absl::StrCat("s.tar offset ", t.a_cls, ": the index does "
                                          "not hold for this sample (index: label 5; "
                                          ".cls: label 7)")),
            std::string::npos)
      << s;
  // The .cls rewritten in place (same size): 9, or not a number.
  for (const char* text : {"9\n", "x\n"}) {
    t.bytes.replace(t.a_cls, 2, text);
    changed = false;
    s = CheckTarLabel(ClaimOf(t, 7), nullptr, 0, 0, AlignedReader(&t.bytes, &reads),
                      &changed);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << text;
    EXPECT_TRUE(changed) << text;
    EXPECT_NE(s.message().find(text[0] == '9' ? ".cls: label 9" : "not a decimal integer"),
              std::string::npos)
        << s;
  }
}

TEST(CheckTarLabelTest, ShortOrFailedReadsAreNotCountedAsAChangedIndex) {
  const TarShard t = Shard();
  const std::string cut = t.bytes.substr(0, t.a_cls + 1);  // the shard shrank
  int reads = 0;
  bool changed = true;
  absl::Status s = CheckTarLabel(ClaimOf(t, 7), nullptr, 0, 0,
                                 AlignedReader(&cut, &reads), &changed);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("cut short"), std::string::npos) << s;
  EXPECT_FALSE(changed);
  s = CheckTarLabel(
      ClaimOf(t, 7), nullptr, 0, 0,
      [](uint64_t, size_t, uint8_t*) -> absl::StatusOr<size_t> {
        return absl::UnavailableError("disk gone");
      },
      &changed);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("disk gone"), std::string::npos) << s;
  EXPECT_FALSE(changed);
  // A place no parsed index can hold is refused without a read.
  TarLabelClaim bad = ClaimOf(t, 7);
  bad.cls_offset = 4096 - 10;
  bad.cls_bytes = 20;  // would cross a page
  reads = 0;
  EXPECT_EQ(CheckTarLabel(bad, nullptr, 0, 0, AlignedReader(&t.bytes, &reads), &changed)
                .code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(reads, 0);
}

}  // namespace
}  // namespace nearprep::records
