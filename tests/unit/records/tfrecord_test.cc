#include "server/records/tfrecord.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/records/crc32c.h"
#include "server/records/range_reader.h"

namespace nearprep::records {
namespace {

// Counts the reads it serves when `calls` is set.
RangeReader StringReader(const std::string& s, int* calls = nullptr) {
  RangeReader read = MemoryRangeReader(s.data(), s.size());
  return [read, calls](uint64_t off, size_t n, uint8_t* dst) {
    if (calls) ++*calls;
    return read(off, n, dst);
  };
}

std::string Records(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) AppendTfRecord(s, &out);
  return out;
}

TEST(TfRecordTest, FramingIsLengthCrcDataCrc) {
  const std::string file = Records({"abc"});
  ASSERT_EQ(file.size(), 3 + kTfRecordOverheadBytes);
  uint64_t len;
  std::memcpy(&len, file.data(), 8);
  EXPECT_EQ(len, 3u);
  uint32_t lcrc, dcrc;
  std::memcpy(&lcrc, file.data() + 8, 4);
  std::memcpy(&dcrc, file.data() + 15, 4);
  EXPECT_EQ(lcrc, MaskCrc(Crc32c(file.data(), 8)));
  EXPECT_EQ(dcrc, MaskCrc(Crc32c("abc", 3)));
  EXPECT_EQ(file.substr(12, 3), "abc");
}

TEST(TfRecordTest, ScanListsEveryRecordAcrossBlocks) {
  std::vector<std::string> items;
  for (int i = 0; i < 50; ++i) items.push_back(std::string(i * 997 + 1, 'a' + i % 26));
  const std::string file = Records(items);
  int calls = 0;
  std::vector<std::string> seen;
  TfRecordScan scan = ScanTfRecords(
      "s.tfrecord", file.size(), StringReader(file, &calls),
      [&](const RecordSpan&, const uint8_t* d, const absl::Status& crc) {
        EXPECT_TRUE(crc.ok());
        seen.emplace_back(reinterpret_cast<const char*>(d),
                          items[seen.size()].size());
      },
      64 << 10);
  ASSERT_TRUE(scan.damage.ok()) << scan.damage;
  ASSERT_EQ(scan.records.size(), items.size());
  EXPECT_EQ(seen, items);
  uint64_t off = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    EXPECT_EQ(scan.records[i].offset, off);
    EXPECT_EQ(scan.records[i].length, items[i].size());
    off += items[i].size() + kTfRecordOverheadBytes;
  }
  // Large reads: on average at least half a block each (a record that
  // straddles a block end starts the next read), not one per record.
  EXPECT_LE(calls, static_cast<int>(2 * file.size() / (64 << 10)) + 2);
  EXPECT_LT(calls, static_cast<int>(items.size()));
  EXPECT_EQ(scan.bytes_read, file.size());
}

TEST(TfRecordTest, BadDataCrcIsReportedAndScanGoesOn) {
  std::string file = Records({"first", "second", "third"});
  const size_t second = 5 + kTfRecordOverheadBytes;
  file[second + kTfRecordHeaderBytes] ^= 1;  // Damage "second"'s data.
  std::vector<absl::Status> verdicts;
  TfRecordScan scan = ScanTfRecords(
      "s.tfrecord", file.size(), StringReader(file),
      [&](const RecordSpan&, const uint8_t*, const absl::Status& crc) {
        verdicts.push_back(crc);
      });
  EXPECT_TRUE(scan.damage.ok());
  ASSERT_EQ(verdicts.size(), 3u);
  EXPECT_TRUE(verdicts[0].ok());
  EXPECT_EQ(verdicts[1].code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(verdicts[1].message().find("offset " + std::to_string(second)),
            std::string::npos)
      << verdicts[1];
  EXPECT_TRUE(verdicts[2].ok());
}

TEST(TfRecordTest, BadLengthCrcStopsTheScanThere) {
  std::string file = Records({"first", "second", "third"});
  const size_t second = 5 + kTfRecordOverheadBytes;
  file[second + 9] ^= 0x40;  // The length's CRC.
  TfRecordScan scan =
      ScanTfRecords("s.tfrecord", file.size(), StringReader(file), nullptr);
  EXPECT_EQ(scan.damage.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(scan.damaged_at, second);
  EXPECT_EQ(scan.records.size(), 1u);
  EXPECT_NE(scan.damage.message().find("length CRC"), std::string::npos);
}

TEST(TfRecordTest, TruncatedLastRecordIsDamage) {
  const std::string whole = Records({"first", "second"});
  for (size_t cut : {whole.size() - 1, whole.size() - 4,
                     size_t{5} + kTfRecordOverheadBytes + 6}) {
    const std::string file = whole.substr(0, cut);
    TfRecordScan scan =
        ScanTfRecords("s.tfrecord", file.size(), StringReader(file), nullptr);
    EXPECT_EQ(scan.damage.code(), absl::StatusCode::kDataLoss) << cut;
    EXPECT_EQ(scan.records.size(), 1u) << cut;
    EXPECT_EQ(scan.damaged_at, 5 + kTfRecordOverheadBytes);
    EXPECT_NE(scan.damage.message().find("truncated"), std::string::npos)
        << scan.damage;
  }
}

TEST(TfRecordTest, ImpossibleLengthIsDamage) {
  std::string file(12, '\0');
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(file.data(), &huge, 8);
  const uint32_t crc = MaskCrc(Crc32c(file.data(), 8));
  std::memcpy(file.data() + 8, &crc, 4);
  auto len = ParseTfRecordHeader(reinterpret_cast<const uint8_t*>(file.data()));
  EXPECT_EQ(len.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(len.status().message().find("impossible"), std::string::npos);
}

TEST(TfRecordTest, CompressedFileIsRefusedWithTheRewriteCommand) {
  const std::string gz("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03xyzxyzxyz", 19);
  TfRecordScan scan =
      ScanTfRecords("c.tfrecord.gz", gz.size(), StringReader(gz), nullptr);
  EXPECT_EQ(scan.damage.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(scan.damage.message().find("compressed"), std::string::npos);
  EXPECT_NE(scan.damage.message().find("nearprep pack --from-tfrecord"),
            std::string::npos);
  const std::string zlib("\x78\x9c\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b", 13);
  scan = ScanTfRecords("c.tfrecord.z", zlib.size(), StringReader(zlib), nullptr);
  EXPECT_EQ(scan.damage.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(LooksCompressed(reinterpret_cast<const uint8_t*>(zlib.data()), 2));
  EXPECT_FALSE(LooksCompressed(reinterpret_cast<const uint8_t*>("\x05\0"), 2));
}

TEST(TfRecordTest, ReadErrorNamesTheOffset) {
  const std::string file = Records({"first"});
  RangeReader failing = [](uint64_t, size_t, uint8_t*) -> absl::StatusOr<size_t> {
    return absl::DataLossError("read: Input/output error");
  };
  TfRecordScan scan = ScanTfRecords("s.tfrecord", file.size(), failing, nullptr);
  EXPECT_EQ(scan.damage.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(scan.damage.message().find("Input/output"), std::string::npos);
  EXPECT_TRUE(scan.records.empty());
}

}  // namespace
}  // namespace nearprep::records
