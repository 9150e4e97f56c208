// Fuzz target: the record-shard parsers (server/records) on arbitrary bytes,
// as a TFRecord shard, as a tar shard, as one serialized Example and as a
// cached shard index. Checks:
//  - a TFRecord scan lists records that lie wholly inside the bytes, back to
//    back from offset 0, stops at the first broken framing, and reads every
//    byte it lists; an Example located in a record points inside it;
//  - a tar scan lists members whose data lies inside the bytes, in
//    increasing offset order; WebDataset samples point at member data;
//  - a shard index that parses serializes and parses back to the same text,
//    and its entries lie inside the shard size it states.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/records/shard_index.h"
#include "server/records/range_reader.h"
#include "server/records/tar_shard.h"
#include "server/records/tf_example.h"
#include "server/records/tfrecord.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/unit/records/tar_test_writer.h"

namespace nearprep {
namespace fuzz {
namespace {

constexpr char kTarget[] = "records";
#define CHECK_REC(cond, msg) NEARPREP_FUZZ_CHECK(kTarget, cond, msg)

records::RangeReader Reader(const uint8_t* data, size_t size) {
  return records::MemoryRangeReader(data, size);
}

void CheckExample(const uint8_t* data, size_t n) {
  auto f = records::LocateExampleFields(data, n, "image/encoded",
                                        "image/class/label");
  if (!f.ok()) {
    CHECK_REC(f.status().code() == absl::StatusCode::kDataLoss,
              f.status().ToString());
    return;
  }
  CHECK_REC(f->image_offset <= n && f->image_size <= n - f->image_offset,
            absl::StrCat("image [", f->image_offset, ", +", f->image_size,
                         ") outside ", n));
}

}  // namespace

int FuzzRecords(const uint8_t* data, size_t size) {
  // As a TFRecord shard (small blocks so records straddle them).
  uint64_t expect = 0;
  records::TfRecordScan scan = records::ScanTfRecords(
      "fuzz", size, Reader(data, size),
      [&](const records::RecordSpan& s, const uint8_t* d, const absl::Status&) {
        CHECK_REC(s.offset == expect, "records not back to back");
        CHECK_REC(s.offset + s.length + records::kTfRecordOverheadBytes <= size,
                  "record past the end");
        CHECK_REC(std::memcmp(d, data + s.offset + records::kTfRecordHeaderBytes,
                              s.length) == 0,
                  "visited bytes differ from the input");
        expect = s.offset + s.length + records::kTfRecordOverheadBytes;
        CheckExample(d, s.length);
      },
      64 << 10);
  CHECK_REC(scan.damage.ok() == (expect == size),
            "damage iff the framing did not reach the end");
  CountOutcome(kTarget, scan.records.empty() ? "tfrecord:none" : "tfrecord:some");
  CheckExample(data, size);

  // As a tar shard.
  records::TarScan tar = records::ScanTarMembers("fuzz", size, Reader(data, size));
  uint64_t last = 0;
  for (const auto& m : tar.members) {
    CHECK_REC(m.data_offset <= size && m.size <= size - m.data_offset,
              "member data outside the shard");
    CHECK_REC(m.data_offset >= last, "members out of order");
    last = m.data_offset;
  }
  uint64_t without_image = 0;
  const auto samples = records::GroupWebDataset(
      tar.members,
      [&](uint64_t off, uint64_t n, std::string* text) -> absl::Status {
        text->assign(reinterpret_cast<const char*>(data) + off, n);
        return absl::OkStatus();
      },
      &without_image);
  for (const auto& s : samples) {
    CHECK_REC(s.image_offset <= size && s.image_size <= size - s.image_offset,
              "sample image outside the shard");
  }
  CountOutcome(kTarget, tar.members.empty() ? "tar:none" : "tar:some");

  // As a cached index.
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto index = records::ParseShardIndex(text);
  if (index.ok()) {
    const std::string again = records::SerializeShardIndex(*index);
    auto back = records::ParseShardIndex(again);
    CHECK_REC(back.ok() && records::SerializeShardIndex(*back) == again,
              "index does not round-trip");
    for (const auto& e : index->entries) {
      CHECK_REC(e.payload_offset <= index->shard_bytes &&
                    e.payload_bytes <= index->shard_bytes - e.payload_offset,
                "index entry outside its shard");
      CHECK_REC(e.record_offset <= index->shard_bytes &&
                    e.record_bytes <= index->shard_bytes - e.record_offset &&
                    e.record_bytes <= records::kMaxIndexedRecordBytes,
                "index record outside its shard or over the record limit");
      if (e.cls_bytes != 0) {
        CHECK_REC(e.cls_offset <= index->shard_bytes &&
                      e.cls_bytes <= index->shard_bytes - e.cls_offset &&
                      e.cls_bytes <= records::kMaxClassLabelBytes &&
                      e.cls_offset % 512 == 0,
                  "index .cls place outside its shard or not a .cls");
        // The read-time check over the fuzz input as the shard: any answer,
        // no crash, never a read past the page that holds the .cls.
        records::TarLabelClaim claim;
        claim.shard = "fuzz";
        claim.cls_offset = e.cls_offset;
        claim.cls_bytes = e.cls_bytes;
        claim.label = e.label;
        bool changed = false;
        (void)records::CheckTarLabel(claim, data, 0, size, Reader(data, size), &changed);
        (void)records::CheckTarLabel(claim, nullptr, 0, 0, Reader(data, size), &changed);
      }
    }
    CountOutcome(kTarget, "index:parsed");
  }
  return 0;
}

std::vector<std::vector<uint8_t>> RecordSeeds() {
  std::vector<std::vector<uint8_t>> seeds;
  // A TFRecord shard of three Examples (hand-encoded wire format).
  auto ld = [](int field, const std::string& payload) {
    std::string out(1, static_cast<char>(field << 3 | 2));
    uint64_t n = payload.size();
    while (n >= 0x80) {
      out.push_back(static_cast<char>((n & 0x7f) | 0x80));
      n >>= 7;
    }
    out.push_back(static_cast<char>(n));
    return out + payload;
  };
  std::string shard;
  for (int i = 0; i < 3; ++i) {
    const std::string image(40 + i * 30, static_cast<char>(0xd8 + i));
    std::string label = "\x08";
    label.push_back(static_cast<char>(i + 1));
    const std::string entries =
        ld(1, ld(1, "image/encoded") + ld(2, ld(1, ld(1, image)))) +
        ld(1, ld(1, "image/class/label") + ld(2, std::string("\x1a", 1) +
                                                  std::string(1, char(label.size() + 2)) +
                                                  ld(1, label.substr(1))));
    records::AppendTfRecord(ld(1, entries), &shard);
  }
  seeds.emplace_back(shard.begin(), shard.end());
  // A tar shard: two samples (tests/unit/records/tar_test_writer.h).
  std::string tar;
  for (const auto& [name, body] :
       std::vector<std::pair<std::string, std::string>>{
           {"a/x.jpg", std::string(700, 'j')}, {"a/x.cls", "7\n"},
           {"b/y.jpeg", std::string(100, 'k')}, {"b/y.cls", "oops"}}) {
    tartest::AppendMember(name, body, &tar);
  }
  tartest::Finish(&tar);
  seeds.emplace_back(tar.begin(), tar.end());
  // A cached index.
  records::ShardIndex index;
  index.format = "tar";
  index.shard_bytes = 5000;
  index.options = "tar";
  records::IndexEntry e;
  e.record_offset = e.payload_offset = 512;
  e.record_bytes = e.payload_bytes = 700;
  e.key = "a/x";
  e.has_label = true;
  e.label = 7;
  e.cls_offset = 1536;  // version 3: where the .cls is
  e.cls_bytes = 2;
  index.entries.push_back(e);
  const std::string text = records::SerializeShardIndex(index);
  seeds.emplace_back(text.begin(), text.end());
  return seeds;
}

}  // namespace fuzz
}  // namespace nearprep

#ifdef NEARPREP_LIBFUZZER_MAIN
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return nearprep::fuzz::FuzzRecords(data, size);
}
#endif
