// TFRecord framing (the format of tf.io.TFRecordWriter, uncompressed):
//
//   uint64 length          little-endian
//   uint32 masked_crc32c(length's 8 bytes)
//   byte   data[length]
//   uint32 masked_crc32c(data)
//
// nearprep serves uncompressed TFRecord files with random access: a shard is
// scanned once (in large reads) into record offsets, and samples are then
// read by offset. GZIP/ZLIB-compressed files (TFRecordOptions) cannot be read
// at random and are refused at scan with a message that says how to rewrite
// them.
//
// Thread-safety: pure functions; TfRecordScanner is not shared.
#ifndef NEARPREP_SERVER_RECORDS_TFRECORD_H_
#define NEARPREP_SERVER_RECORDS_TFRECORD_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/records/range_reader.h"

namespace nearprep::records {

inline constexpr size_t kTfRecordHeaderBytes = 12;
inline constexpr size_t kTfRecordFooterBytes = 4;
inline constexpr size_t kTfRecordOverheadBytes =
    kTfRecordHeaderBytes + kTfRecordFooterBytes;
// No single record may claim more than this (an "impossible length").
inline constexpr uint64_t kMaxTfRecordBytes = uint64_t{1} << 31;

// The data length from a 12-byte header; DATA_LOSS when the length's CRC
// does not match or the length is impossible (> kMaxTfRecordBytes).
absl::StatusOr<uint64_t> ParseTfRecordHeader(const uint8_t* header);

// OK when `footer` (4 bytes) holds the masked CRC-32C of data[0..n).
absl::Status CheckTfRecordData(const uint8_t* data, uint64_t n,
                               const uint8_t* footer);

// Appends `data` framed as one record to *out.
void AppendTfRecord(std::string_view data, std::string* out);

// True when the first bytes of a file look like GZIP (1f 8b) or a ZLIB
// stream header (CMF/FLG with deflate and a valid check).
bool LooksCompressed(const uint8_t* p, size_t n);

// One record of a shard: `offset` is where its header starts; the data is
// at offset + kTfRecordHeaderBytes, `length` bytes.
struct RecordSpan {
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Called for each framed record in file order with its data (valid until
// the call returns) and the data CRC's verdict (OK or DATA_LOSS naming the
// offset: a record whose framing is intact but whose bytes are damaged; the
// scan goes on past it).
using RecordVisitor = std::function<void(
    const RecordSpan& span, const uint8_t* data, const absl::Status& crc)>;

struct TfRecordScan {
  std::vector<RecordSpan> records;  // Every framed record, in file order.
  // OK, or DATA_LOSS / INVALID_ARGUMENT (compressed) naming the offset
  // where the framing was lost (bad length CRC, impossible length, truncated
  // record); the records before it are listed, nothing after it is.
  absl::Status damage;
  uint64_t damaged_at = 0;     // Offset of the first damaged record.
  uint64_t bytes_read = 0;     // Total bytes read by the scan.
  uint64_t reads_issued = 0;   // Number of read calls.
};

// Scans a whole file of `file_size` bytes with reads of `block_bytes`
// (a record larger than a block is read whole), checking both CRCs of every
// record. `name` is used in messages; `visit` may be empty.
TfRecordScan ScanTfRecords(const std::string& name, uint64_t file_size,
                           const RangeReader& read,
                           const RecordVisitor& visit,
                           size_t block_bytes = size_t{4} << 20);

}  // namespace nearprep::records

#endif  // NEARPREP_SERVER_RECORDS_TFRECORD_H_
