#include "server/records/tfrecord.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/records/crc32c.h"

namespace nearprep::records {
namespace {

uint32_t LoadLe32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 |
         uint32_t{p[3]} << 24;
}
uint64_t LoadLe64(const uint8_t* p) {
  return uint64_t{LoadLe32(p)} | uint64_t{LoadLe32(p + 4)} << 32;
}
void StoreLe32(uint32_t v, char* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}

}  // namespace

absl::StatusOr<uint64_t> ParseTfRecordHeader(const uint8_t* header) {
  const uint64_t length = LoadLe64(header);
  if (MaskCrc(Crc32c(header, 8)) != LoadLe32(header + 8)) {
    return absl::DataLossError("TFRecord length CRC mismatch");
  }
  if (length > kMaxTfRecordBytes) {
    return absl::DataLossError(
        absl::StrCat("TFRecord length ", length, " is impossible (over ",
                     kMaxTfRecordBytes, " bytes)"));
  }
  return length;
}

absl::Status CheckTfRecordData(const uint8_t* data, uint64_t n,
                               const uint8_t* footer) {
  if (MaskCrc(Crc32c(data, n)) != LoadLe32(footer)) {
    return absl::DataLossError("TFRecord data CRC mismatch");
  }
  return absl::OkStatus();
}

void AppendTfRecord(std::string_view data, std::string* out) {
  char header[kTfRecordHeaderBytes];
  const uint64_t n = data.size();
  StoreLe32(static_cast<uint32_t>(n), header);
  StoreLe32(static_cast<uint32_t>(n >> 32), header + 4);
  StoreLe32(MaskCrc(Crc32c(header, 8)), header + 8);
  char footer[kTfRecordFooterBytes];
  StoreLe32(MaskCrc(Crc32c(data.data(), data.size())), footer);
  out->append(header, sizeof(header));
  out->append(data);
  out->append(footer, sizeof(footer));
}

bool LooksCompressed(const uint8_t* p, size_t n) {
  if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b) return true;  // GZIP
  // ZLIB: CM = 8 (deflate), CINFO <= 7, (CMF * 256 + FLG) % 31 == 0.
  if (n >= 2 && (p[0] & 0x0f) == 8 && (p[0] >> 4) <= 7 &&
      ((unsigned{p[0]} << 8) | p[1]) % 31 == 0) {
    return true;
  }
  return false;
}

TfRecordScan ScanTfRecords(const std::string& name, uint64_t file_size,
                           const RangeReader& read,
                           const RecordVisitor& visit, size_t block_bytes) {
  TfRecordScan scan;
  block_bytes = std::max<size_t>(block_bytes, 64 << 10);
  std::vector<uint8_t> buf;
  uint64_t buf_start = 0;  // File offset of buf[0].
  // Makes [off, off + n) resident in buf (n may exceed block_bytes for a
  // large record). Returns false at end of file (short) or on error.
  auto ensure = [&](uint64_t off, uint64_t n) -> absl::Status {
    if (off >= buf_start && off + n <= buf_start + buf.size()) {
      return absl::OkStatus();
    }
    if (off + n > file_size) {
      return absl::DataLossError(absl::StrCat(
          "truncated record in ", name, " at offset ", off, ": needs ", n,
          " bytes, file ends at ", file_size));
    }
    const uint64_t want =
        std::min<uint64_t>(std::max<uint64_t>(n, block_bytes), file_size - off);
    // Keep what is already resident from `off` on (a record that straddles
    // the end of the last block), and read only the rest: every byte of the
    // file is read once.
    size_t got = 0;
    if (off >= buf_start && off < buf_start + buf.size()) {
      got = static_cast<size_t>(buf_start + buf.size() - off);
      std::memmove(buf.data(), buf.data() + (off - buf_start), got);
    }
    buf.resize(want);
    while (got < want) {
      auto r = read(off + got, want - got, buf.data() + got);
      ++scan.reads_issued;
      if (!r.ok()) {
        buf.clear();
        return absl::Status(r.status().code(),
                            absl::StrCat("reading ", name, " at offset ",
                                         off + got, ": ",
                                         r.status().message()));
      }
      if (*r == 0) break;
      got += *r;
      scan.bytes_read += *r;
    }
    buf.resize(got);
    buf_start = off;
    if (got < n) {
      return absl::DataLossError(absl::StrCat(
          "truncated record in ", name, " at offset ", off,
          ": the file shrank while it was scanned"));
    }
    return absl::OkStatus();
  };

  uint64_t off = 0;
  while (off < file_size) {
    absl::Status st = ensure(off, std::min<uint64_t>(kTfRecordHeaderBytes,
                                                     file_size - off));
    if (st.ok() && file_size - off < kTfRecordHeaderBytes) {
      st = absl::DataLossError(
          absl::StrCat("truncated record header in ", name, " at offset ",
                       off, " (", file_size - off, " bytes left)"));
    }
    if (!st.ok()) {
      scan.damage = st;
      scan.damaged_at = off;
      return scan;
    }
    const uint8_t* h = buf.data() + (off - buf_start);
    auto length = ParseTfRecordHeader(h);
    if (!length.ok()) {
      if (off == 0 && LooksCompressed(h, kTfRecordHeaderBytes)) {
        scan.damage = absl::InvalidArgumentError(absl::StrCat(
            name,
            " looks GZIP/ZLIB-compressed; compressed TFRecord files cannot be "
            "read at random. Rewrite it uncompressed (JPEG bytes do not "
            "compress, nothing is lost): nearprep pack --from-tfrecord ",
            name, " --out DIR"));
      } else {
        scan.damage = absl::DataLossError(absl::StrCat(
            name, " offset ", off, ": ", length.status().message()));
      }
      scan.damaged_at = off;
      return scan;
    }
    const uint64_t total = kTfRecordOverheadBytes + *length;
    if (total > file_size - off) {
      scan.damage = absl::DataLossError(
          absl::StrCat(name, " offset ", off, ": truncated record (needs ",
                       total, " bytes, ", file_size - off, " left)"));
      scan.damaged_at = off;
      return scan;
    }
    st = ensure(off, total);
    if (!st.ok()) {
      scan.damage = st;
      scan.damaged_at = off;
      return scan;
    }
    const uint8_t* d = buf.data() + (off - buf_start);
    st = CheckTfRecordData(d + kTfRecordHeaderBytes, *length,
                           d + kTfRecordHeaderBytes + *length);
    if (!st.ok()) {
      st = absl::DataLossError(
          absl::StrCat(name, " offset ", off, ": ", st.message()));
    }
    const RecordSpan span{off, *length};
    scan.records.push_back(span);
    if (visit) visit(span, d + kTfRecordHeaderBytes, st);
    off += total;
  }
  return scan;
}

}  // namespace nearprep::records
