#include "server/records/shard_index.h"

#include <cinttypes>
#include <cstdio>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/percent_escape.h"
#include "server/records/crc32c.h"
#include "server/records/tar_shard.h"
#include "server/records/tf_example.h"
#include "server/records/tfrecord.h"

namespace nearprep::records {
namespace {

// The first line: this, a space, the version.
constexpr char kMagic[] = "nearprep-shard-index";

// A field of an index line: percent-escaped (common/percent_escape.h: no
// ';' or '=' escaping here, so files keep their bytes), "-" for an empty
// field, and a field that is "-" itself escaped as "%2D".
std::string Escape(const std::string& s) {
  if (s.empty()) return "-";
  if (s == "-") return "%2D";
  return PercentEscape(s);
}

bool Unescape(const std::string& s, std::string* out) {
  if (s == "-") {
    out->clear();
    return true;
  }
  return PercentUnescape(s, out);
}

// Fills a TFRecord entry from one record's data.
void TfRecordEntry(const RecordSpan& span, const uint8_t* data,
                   const absl::Status& crc, const IndexOptions& options,
                   const std::string& name, IndexEntry* e) {
  e->record_offset = span.offset;
  e->record_bytes = span.length + kTfRecordOverheadBytes;
  if (!crc.ok()) {
    e->error = std::string(crc.message());
    return;
  }
  auto f = LocateExampleFields(data, span.length, options.image_key,
                               options.label_key);
  if (!f.ok()) {
    e->error = absl::StrCat(name, " offset ", span.offset, ": ",
                            f.status().message());
    return;
  }
  // The footer (after the data; the scan checked it): the record's CRC.
  const uint8_t* footer = data + span.length;
  e->has_data_crc = true;
  e->data_crc = uint32_t{footer[0]} | uint32_t{footer[1]} << 8 |
                uint32_t{footer[2]} << 16 | uint32_t{footer[3]} << 24;
  e->payload_offset = span.offset + kTfRecordHeaderBytes + f->image_offset;
  e->payload_bytes = f->image_size;
  e->has_label = f->has_label;
  e->label = f->label;
}

}  // namespace

std::string IndexOptions::Fingerprint() const {
  if (format == "tfrecord") {
    return absl::StrCat("tfrecord image_key=", Escape(image_key),
                        " label_key=", Escape(label_key));
  }
  return format;
}

absl::StatusOr<std::string> ShardCheck(uint64_t shard_bytes,
                                       const RangeReader& read) {
  uint32_t crc = 0;
  std::vector<uint8_t> buf;
  auto add = [&](uint64_t off, uint64_t n) -> absl::Status {
    buf.resize(n);
    uint64_t got = 0;
    while (got < n) {
      auto r = read(off + got, n - got, buf.data() + got);
      if (!r.ok()) return r.status();
      if (*r == 0) break;
      got += *r;
    }
    if (got != n) return absl::DataLossError("shard shorter than its size");
    crc = Crc32cExtend(crc, buf.data(), n);
    return absl::OkStatus();
  };
  if (shard_bytes <= 2 * kShardCheckBytes) {
    if (absl::Status s = add(0, shard_bytes); !s.ok()) return s;
  } else {
    if (absl::Status s = add(0, kShardCheckBytes); !s.ok()) return s;
    if (absl::Status s = add(shard_bytes - kShardCheckBytes, kShardCheckBytes);
        !s.ok()) {
      return s;
    }
  }
  const std::string size = absl::StrCat(shard_bytes);
  crc = Crc32cExtend(crc, size.data(), size.size());
  char hex[16];
  std::snprintf(hex, sizeof(hex), "%08x", crc);
  return absl::StrCat("crc32c:", hex);
}

absl::StatusOr<ShardIndex> BuildShardIndex(const std::string& name,
                                           uint64_t shard_bytes,
                                           int64_t shard_mtime_ns,
                                           const RangeReader& read,
                                           const IndexOptions& options) {
  ShardIndex index;
  {
    absl::StatusOr<std::string> check = ShardCheck(shard_bytes, read);
    if (!check.ok()) {
      return absl::Status(check.status().code(),
                          absl::StrCat(name, ": ", check.status().message()));
    }
    index.shard_check = *std::move(check);
  }
  index.format = options.format;
  index.shard_bytes = shard_bytes;
  index.shard_mtime_ns = shard_mtime_ns;
  index.options = options.Fingerprint();
  if (options.format == "tfrecord") {
    TfRecordScan scan = ScanTfRecords(
        name, shard_bytes, read,
        [&](const RecordSpan& span, const uint8_t* data,
            const absl::Status& crc) {
          IndexEntry e;
          TfRecordEntry(span, data, crc, options, name, &e);
          index.entries.push_back(std::move(e));
        },
        options.block_bytes);
    index.scan_bytes_read = scan.bytes_read;
    index.scan_reads = scan.reads_issued;
    if (scan.damage.code() == absl::StatusCode::kInvalidArgument) {
      return scan.damage;
    }
    if (!scan.damage.ok()) {
      index.damage = std::string(scan.damage.message());
      index.damaged_at = scan.damaged_at;
    }
    return index;
  }
  if (options.format == "tar") {
    TarScan scan = ScanTarMembers(name, shard_bytes, read);
    if (scan.damage.code() == absl::StatusCode::kInvalidArgument) {
      return scan.damage;
    }
    if (!scan.damage.ok()) {
      index.damage = std::string(scan.damage.message());
      index.damaged_at = scan.damaged_at;
    }
    uint64_t without_image = 0;
    const auto samples = GroupWebDataset(
        scan.members,
        [&](uint64_t off, uint64_t n, std::string* text) -> absl::Status {
          text->resize(n);
          auto r = read(off, n, reinterpret_cast<uint8_t*>(text->data()));
          if (!r.ok()) return r.status();
          text->resize(*r);
          return absl::OkStatus();
        },
        &without_image);
    for (const auto& s : samples) {
      IndexEntry e;
      e.record_offset = s.image_offset;
      e.record_bytes = s.image_size;
      e.payload_offset = s.image_offset;
      e.payload_bytes = s.image_size;
      e.has_label = s.has_label;
      e.label = s.label;
      if (s.has_label) {  // the .cls parsed: checked again when served
        e.cls_offset = s.cls_offset;
        e.cls_bytes = s.cls_size;
      }
      e.key = s.key;
      if (!s.status.ok()) {
        e.error = absl::StrCat(name, ": ", s.status.message());
      }
      index.entries.push_back(std::move(e));
    }
    return index;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown record format '", options.format,
                   "' (known: tfrecord, tar)"));
}

absl::StatusOr<ShardIndex> BuildTfRecordIndexFromDali(
    const std::string& name, uint64_t shard_bytes, int64_t shard_mtime_ns,
    const RangeReader& read, const IndexOptions& options,
    const std::string& dali_index_text) {
  ShardIndex index;
  {
    absl::StatusOr<std::string> check = ShardCheck(shard_bytes, read);
    if (!check.ok()) {
      return absl::Status(check.status().code(),
                          absl::StrCat(name, ": ", check.status().message()));
    }
    index.shard_check = *std::move(check);
  }
  index.format = "tfrecord";
  index.shard_bytes = shard_bytes;
  index.shard_mtime_ns = shard_mtime_ns;
  index.options = options.Fingerprint();
  uint64_t expect = 0;
  int line_no = 0;
  std::vector<uint8_t> buf;
  for (absl::string_view line : absl::StrSplit(dali_index_text, '\n')) {
    ++line_no;
    if (line.empty()) continue;
    std::vector<absl::string_view> f =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    uint64_t off = 0, size = 0;
    if (f.size() < 2 || !absl::SimpleAtoi(f[0], &off) ||
        !absl::SimpleAtoi(f[1], &size) || off != expect ||
        size < kTfRecordOverheadBytes || size > shard_bytes - off ||
        off > shard_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ".idx line ", line_no, ": not a DALI index entry that fits "
          "this shard (want \"OFFSET SIZE\" with offsets contiguous from 0)"));
    }
    buf.resize(size);
    size_t got = 0;
    while (got < size) {
      auto r = read(off + got, size - got, buf.data() + got);
      if (!r.ok()) return r.status();
      if (*r == 0) break;
      got += *r;
    }
    index.scan_bytes_read += got;
    ++index.scan_reads;
    auto length = got >= kTfRecordHeaderBytes
                      ? ParseTfRecordHeader(buf.data())
                      : absl::StatusOr<uint64_t>(
                            absl::DataLossError("short read"));
    if (!length.ok() || *length + kTfRecordOverheadBytes != size ||
        got != size) {
      index.damage = absl::StrCat(name, " offset ", off,
                                  ": record does not match the DALI index");
      index.damaged_at = off;
      return index;
    }
    absl::Status crc = CheckTfRecordData(buf.data() + kTfRecordHeaderBytes,
                                         *length,
                                         buf.data() + kTfRecordHeaderBytes +
                                             *length);
    if (!crc.ok()) {
      crc = absl::DataLossError(
          absl::StrCat(name, " offset ", off, ": ", crc.message()));
    }
    IndexEntry e;
    TfRecordEntry(RecordSpan{off, *length}, buf.data() + kTfRecordHeaderBytes,
                  crc, options, name, &e);
    index.entries.push_back(std::move(e));
    expect = off + size;
  }
  if (expect != shard_bytes) {
    index.damage = absl::StrCat(name, " offset ", expect,
                                ": the DALI index ends before the shard");
    index.damaged_at = expect;
  }
  return index;
}

std::string SerializeShardIndex(const ShardIndex& index) {
  const bool v3 = index.version >= 3;
  std::string out = absl::StrCat(kMagic, " ", v3 ? 3 : 2, "\nformat ", index.format,
                                 "\nshard_bytes ", index.shard_bytes,
                                 "\nshard_mtime_ns ", index.shard_mtime_ns,
                                 "\nshard_check ", index.shard_check,
                                 "\noptions ", index.options, "\n");
  if (!index.damage.empty()) {
    absl::StrAppend(&out, "damage ", index.damaged_at, " ",
                    Escape(index.damage), "\n");
  }
  absl::StrAppend(&out, "entries ", index.entries.size(), "\n");
  for (const auto& e : index.entries) {
    absl::StrAppend(&out, e.record_offset, " ", e.record_bytes, " ",
                    e.payload_offset, " ", e.payload_bytes, " ");
    if (v3) {
      if (e.cls_bytes != 0) {
        absl::StrAppend(&out, e.cls_offset, " ", e.cls_bytes, " ");
      } else {
        out += "- - ";
      }
    }
    if (e.has_data_crc) {
      char hex[16];
      std::snprintf(hex, sizeof(hex), "%08x", e.data_crc);
      out += hex;
    } else {
      out += "-";
    }
    absl::StrAppend(&out, " ",
                    e.has_label ? absl::StrCat(e.label) : std::string("-"),
                    " ", Escape(e.key));
    if (!e.error.empty()) absl::StrAppend(&out, " ", Escape(e.error));
    out += "\n";
  }
  char hex[16];
  std::snprintf(hex, sizeof(hex), "%08x", Crc32c(out.data(), out.size()));
  absl::StrAppend(&out, "checksum ", hex, "\n");
  return out;
}

absl::StatusOr<ShardIndex> ParseShardIndex(const std::string& text) {
  ShardIndex index;
  // The last line is the checksum of everything before it.
  {
    const size_t end = text.size() >= 1 && text.back() == '\n' ? text.size() - 1 : text.size();
    const size_t start = end == 0 ? std::string::npos : text.rfind('\n', end - 1);
    const size_t body = start == std::string::npos ? 0 : start + 1;  // <= end
    const absl::string_view last(text.data() + body, end - body);
    uint32_t want = 0;
    if (!absl::StartsWith(last, "checksum ") ||
        !absl::SimpleHexAtoi(last.substr(9), &want) ||
        Crc32c(text.data(), body) != want) {
      return absl::InvalidArgumentError(
          "shard index: checksum missing or wrong (the index was changed "
          "after it was written)");
    }
  }
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  size_t i = 0;
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard index line ", i + 1, ": ", why));
  };
  auto next = [&](absl::string_view key, std::string* value) {
    while (i < lines.size() && !lines[i].empty() && lines[i][0] == '#') ++i;
    if (i >= lines.size()) return false;
    const std::string& l = lines[i];
    if (l.size() < key.size() + 1 || absl::string_view(l).substr(0, key.size()) != key ||
        l[key.size()] != ' ') {
      return false;
    }
    *value = l.substr(key.size() + 1);
    ++i;
    return true;
  };
  if (lines.empty() || !absl::StartsWith(lines[0], kMagic)) {
    return bad("not a shard index");
  }
  if (lines[0] == absl::StrCat(kMagic, " 2")) {
    index.version = 2;
  } else if (lines[0] == absl::StrCat(kMagic, " 3")) {
    index.version = 3;
  } else {
    return bad(absl::StrCat("'", absl::CEscape(lines[0]),
                            "': not a version read here (2, 3)"));
  }
  const size_t cls_fields = index.version >= 3 ? 2 : 0;
  i = 1;
  std::string v;
  if (!next("format", &index.format)) return bad("want 'format'");
  if (!next("shard_bytes", &v) || !absl::SimpleAtoi(v, &index.shard_bytes)) {
    return bad("want 'shard_bytes N'");
  }
  if (!next("shard_mtime_ns", &v) ||
      !absl::SimpleAtoi(v, &index.shard_mtime_ns)) {
    return bad("want 'shard_mtime_ns N'");
  }
  if (!next("shard_check", &index.shard_check)) {
    return bad("want 'shard_check'");
  }
  if (!next("options", &index.options)) return bad("want 'options'");
  if (next("damage", &v)) {
    const size_t sp = v.find(' ');
    if (sp == std::string::npos ||
        !absl::SimpleAtoi(v.substr(0, sp), &index.damaged_at) ||
        !Unescape(v.substr(sp + 1), &index.damage)) {
      return bad("malformed 'damage'");
    }
  }
  uint64_t n = 0;
  if (!next("entries", &v) || !absl::SimpleAtoi(v, &n)) {
    return bad("want 'entries N'");
  }
  const bool tfrecord = index.format == "tfrecord";
  const uint64_t size = index.shard_bytes;
  uint64_t prev_end = 0;
  for (uint64_t k = 0; k < n; ++k, ++i) {
    if (i >= lines.size()) return bad("missing entries");
    std::vector<std::string> f = absl::StrSplit(lines[i], ' ');
    IndexEntry e;
    // Version 3 has CLS_OFFSET CLS_BYTES after PAYLOAD_BYTES; `c` is where
    // CRC is.
    const size_t c = 4 + cls_fields;
    if (f.size() < c + 3 || f.size() > c + 4 ||
        !absl::SimpleAtoi(f[0], &e.record_offset) ||
        !absl::SimpleAtoi(f[1], &e.record_bytes) ||
        !absl::SimpleAtoi(f[2], &e.payload_offset) ||
        !absl::SimpleAtoi(f[3], &e.payload_bytes) ||
        !Unescape(f[c + 2], &e.key) ||
        (f.size() == c + 4 && !Unescape(f[c + 3], &e.error))) {
      return bad("malformed entry");
    }
    if (cls_fields != 0 && (f[4] != "-" || f[5] != "-")) {
      if (!absl::SimpleAtoi(f[4], &e.cls_offset) ||
          !absl::SimpleAtoi(f[5], &e.cls_bytes)) {
        return bad("malformed .cls place");
      }
      if (tfrecord) return bad("a .cls place in a TFRecord index");
      if (e.cls_bytes == 0 || e.cls_bytes > kMaxClassLabelBytes ||
          e.cls_offset % 512 != 0) {
        return bad(absl::StrCat("not a .cls member's place (want 1..",
                                kMaxClassLabelBytes,
                                " bytes at a 512-byte tar block)"));
      }
      if (e.cls_offset > size || e.cls_bytes > size - e.cls_offset) {
        return bad(".cls member outside the shard");
      }
    }
    if (f[c] != "-") {
      if (f[c].size() != 8 || !absl::SimpleHexAtoi(f[c], &e.data_crc)) {
        return bad("malformed record CRC");
      }
      e.has_data_crc = true;
    }
    if (f[c + 1] != "-") {
      if (!absl::SimpleAtoi(f[c + 1], &e.label)) return bad("malformed label");
      e.has_label = true;
    }
    // Bounds before anything trusts the numbers (a reader allocates
    // record_bytes).
    if (e.record_bytes > kMaxIndexedRecordBytes ||
        e.payload_bytes > kMaxIndexedRecordBytes) {
      return bad(absl::StrCat("entry claims ", std::max(e.record_bytes, e.payload_bytes),
                              " bytes, over the record limit ",
                              kMaxIndexedRecordBytes));
    }
    if (e.record_offset > size || e.record_bytes > size - e.record_offset ||
        e.payload_offset > size || e.payload_bytes > size - e.payload_offset) {
      return bad("entry outside the shard");
    }
    // A tar sample's members follow the previous sample's: its image and
    // .cls lie after the previous ones (a .cls place moved to another
    // sample's .cls is refused here).
    uint64_t begin = e.record_offset, end = e.record_offset + e.record_bytes;
    if (e.cls_bytes != 0) {
      begin = std::min(begin, e.cls_offset);
      end = std::max(end, e.cls_offset + e.cls_bytes);
    }
    if ((tfrecord || e.error.empty()) && begin < prev_end) {
      return bad("entry out of file order (overlaps the previous one)");
    }
    if (tfrecord) {
      if (e.record_offset != prev_end) {
        return bad(absl::StrCat("record at ", e.record_offset,
                                " does not start where the previous one ends (",
                                prev_end, "): an entry is missing or moved"));
      }
      if (e.record_bytes < kTfRecordOverheadBytes) return bad("record too short");
      if (e.error.empty() &&
          (e.payload_offset < e.record_offset + kTfRecordHeaderBytes ||
           e.payload_offset + e.payload_bytes >
               e.record_offset + e.record_bytes - kTfRecordFooterBytes)) {
        return bad("image bytes outside their record");
      }
    } else if (e.error.empty() && (e.record_offset != e.payload_offset ||
                                   e.record_bytes != e.payload_bytes ||
                                   e.payload_offset % 512 != 0)) {
      return bad("tar entry not a member's data");
    } else if (e.error.empty() && cls_fields != 0) {
      if (e.has_label != (e.cls_bytes != 0)) {
        return bad(e.has_label ? "a label without its .cls place"
                               : "a .cls place without a label");
      }
      if (e.cls_bytes != 0 && e.cls_offset < e.payload_offset + e.payload_bytes &&
          e.payload_offset < e.cls_offset + e.cls_bytes) {
        return bad("the .cls place lies inside the image");
      }
    }
    if (tfrecord || e.error.empty()) prev_end = end;
    index.entries.push_back(std::move(e));
  }
  if (tfrecord && prev_end != (index.damage.empty() ? size : index.damaged_at)) {
    return bad(absl::StrCat("the records end at ", prev_end, ", not at the ",
                            index.damage.empty() ? "shard's end " : "damage at ",
                            index.damage.empty() ? size : index.damaged_at,
                            ": an entry is missing"));
  }
  return index;
}

std::string IndexMismatch(const ShardIndex& index, uint64_t shard_bytes,
                          int64_t shard_mtime_ns, const IndexOptions& options) {
  if (index.shard_bytes != shard_bytes) {
    return absl::StrCat("shard size ", shard_bytes, ", index says ",
                        index.shard_bytes);
  }
  if (index.shard_mtime_ns != shard_mtime_ns) {
    return absl::StrCat("shard mtime ", shard_mtime_ns, " ns, index says ",
                        index.shard_mtime_ns);
  }
  if (index.format != options.format || index.options != options.Fingerprint()) {
    return absl::StrCat("options '", options.Fingerprint(), "', index has '",
                        index.options, "'");
  }
  if (index.format == "tar" && index.version < 3) {
    return absl::StrCat("index version ", index.version,
                        " does not say where each sample's .cls member is, so "
                        "its labels could not be checked when read");
  }
  return "";
}

}  // namespace nearprep::records
