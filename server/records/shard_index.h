// The index of one record shard: where each sample's image bytes are, its
// label, and whether it is known to be bad. Built by scanning the shard once
// (large sequential reads), then cached as a small text file next to the
// shard or in a cache folder, and trusted only while it is bound to the
// shard: the shard's size, mtime and head-and-tail checksum (ShardCheck)
// and the options that shaped it are unchanged, the index's own checksum
// holds, and every entry lies inside the shard, in file order, within the
// record limit (ParseShardIndex). Anything else is rebuilt by a scan.
//
// Cached form (text, one line per entry; '#' lines are comments):
//   nearprep-shard-index 3
//   format tfrecord|tar
//   shard_bytes N
//   shard_mtime_ns N
//   shard_check crc32c:HEX             (ShardCheck of the shard's bytes)
//   options <the IndexOptions fingerprint>
//   damage OFFSET MESSAGE...            (only when the scan stopped early)
//   entries N
//   RECORD_OFFSET RECORD_BYTES PAYLOAD_OFFSET PAYLOAD_BYTES CLS_OFFSET|- CLS_BYTES|- CRC|- LABEL|- KEY|- [ERROR...]
//   checksum HEX                        (CRC-32C of every byte before this line)
// KEY is the tar sample key, percent-escaped (bytes <= 0x20, '%' and
// >= 0x7f as %XX), or '-'. PAYLOAD_OFFSET is absolute in the shard. CRC is
// a TFRecord record's masked data CRC (its footer, 8 hex digits), checked
// against the record read at serve time, '-' for tar. CLS_OFFSET and
// CLS_BYTES (tar only, else '-'): where the sample's .cls member's data is,
// the label's source, read again when the sample is served
// (records::CheckTarLabel); a tar entry without ERROR has them exactly when
// it has a LABEL, at a 512-byte tar block, 1..kMaxClassLabelBytes bytes, not
// inside the image, and each sample's image and .cls lie after the
// previous sample's. ERROR, when present, is the message of the DATA_LOSS
// the sample fails with.
// Version 2 (the same without CLS_OFFSET and CLS_BYTES) is still parsed and
// written back as it is: a TFRecord index of version 2 holds all the
// read-time checks need and is used; a tar one cannot have its labels
// checked, so IndexMismatch refuses it and it is rebuilt. Version 1
// indexes (no binding) are not parsed (rebuilt).
// DALI's tfrecord2idx index ("OFFSET SIZE" per record) is read to skip the
// framing scan when a FILE.idx sits beside a TFRecord shard: the records
// are still parsed and their CRCs checked.
//
// Thread-safety: pure functions.
#ifndef NEARPREP_SERVER_RECORDS_SHARD_INDEX_H_
#define NEARPREP_SERVER_RECORDS_SHARD_INDEX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/records/range_reader.h"

namespace nearprep::records {

struct IndexOptions {
  std::string format;  // "tfrecord" or "tar"
  // TFRecord: the Example features holding the image and the label.
  std::string image_key = "image/encoded";
  std::string label_key = "image/class/label";
  // Scan read size.
  size_t block_bytes = size_t{4} << 20;
  // What changes the index (not block_bytes).
  std::string Fingerprint() const;
};

// The version SerializeShardIndex writes for a built index.
inline constexpr int kShardIndexVersion = 3;

struct IndexEntry {
  uint64_t record_offset = 0;  // TFRecord: header start; tar: image data.
  uint64_t record_bytes = 0;   // TFRecord: header + data + footer.
  uint64_t payload_offset = 0; // Absolute offset of the image bytes.
  uint64_t payload_bytes = 0;
  bool has_label = false;
  int64_t label = 0;
  // TFRecord: the record's masked data CRC (its footer) when the record's
  // CRC was good at indexing.
  bool has_data_crc = false;
  uint32_t data_crc = 0;
  // Tar (version 3): the .cls member's data, where the label came from
  // (cls_bytes 0: no .cls).
  uint64_t cls_offset = 0;
  uint64_t cls_bytes = 0;
  std::string key;    // Tar: the WebDataset key.
  std::string error;  // Non-empty: the sample fails with DATA_LOSS(error).
};

struct ShardIndex {
  // 2 or 3 (kShardIndexVersion): what the text was; written back the same.
  int version = kShardIndexVersion;
  std::string format;
  uint64_t shard_bytes = 0;
  int64_t shard_mtime_ns = 0;
  std::string options;  // IndexOptions::Fingerprint()
  std::string shard_check;  // ShardCheck() of the shard indexed
  std::vector<IndexEntry> entries;
  // Where the scan stopped (damaged framing, truncation): entries end before
  // it; empty when the whole shard was read.
  std::string damage;
  uint64_t damaged_at = 0;
  // The scan's own read counters (not cached).
  uint64_t scan_bytes_read = 0;
  uint64_t scan_reads = 0;
};

// Scans a shard. INVALID_ARGUMENT for a shard that cannot be served at all
// (compressed, not a tar file); a shard damaged part-way is OK with
// `damage` set.
absl::StatusOr<ShardIndex> BuildShardIndex(const std::string& name,
                                           uint64_t shard_bytes,
                                           int64_t shard_mtime_ns,
                                           const RangeReader& read,
                                           const IndexOptions& options);

// TFRecord with DALI's index: records at the given (offset, size) are
// parsed instead of scanning the framing.
absl::StatusOr<ShardIndex> BuildTfRecordIndexFromDali(
    const std::string& name, uint64_t shard_bytes, int64_t shard_mtime_ns,
    const RangeReader& read, const IndexOptions& options,
    const std::string& dali_index_text);

// No record of an index may claim more bytes than this (TFRecord's own
// impossible length plus its framing); checked before anything is read.
inline constexpr uint64_t kMaxIndexedRecordBytes = (uint64_t{1} << 31) + 16;
// Bytes of the head and of the tail of a shard that ShardCheck reads.
inline constexpr uint64_t kShardCheckBytes = uint64_t{64} << 10;

// "crc32c:HEX": the CRC-32C of the shard's first and last kShardCheckBytes
// (the whole shard when it is at most twice that) and of its size. Two
// reads; binds a cached index to the bytes it was built from.
absl::StatusOr<std::string> ShardCheck(uint64_t shard_bytes,
                                       const RangeReader& read);

std::string SerializeShardIndex(const ShardIndex& index);
// INVALID_ARGUMENT naming the line for a malformed index: a bad checksum,
// an entry outside the shard, over kMaxIndexedRecordBytes, out of file order
// or overlapping the previous one, a TFRecord entry whose payload is not
// inside its record or that does not start where the previous record ends
// (a dropped or swapped entry), records that do not reach the shard's end
// (or the damage), a .cls place that breaks the rules above, or a version
// other than 2 or 3.
absl::StatusOr<ShardIndex> ParseShardIndex(const std::string& text);

// Why a cached index does not describe the shard (size, mtime, options, a
// tar index of version 2, whose labels cannot be checked when read), empty
// when it still does. The shard's bytes (shard_check) are compared by
// the caller, which can read them.
std::string IndexMismatch(const ShardIndex& index, uint64_t shard_bytes,
                          int64_t shard_mtime_ns, const IndexOptions& options);
inline bool IndexMatches(const ShardIndex& index, uint64_t shard_bytes,
                         int64_t shard_mtime_ns, const IndexOptions& options) {
  return IndexMismatch(index, shard_bytes, shard_mtime_ns, options).empty();
}

}  // namespace nearprep::records

#endif  // NEARPREP_SERVER_RECORDS_SHARD_INDEX_H_
