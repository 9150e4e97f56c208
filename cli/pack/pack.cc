#include "cli/pack/pack.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "nearprep/v1/tf_example.pb.h"
#include "server/data/dataset.h"
#include "server/records/range_reader.h"
#include "server/records/shard_index.h"
#include "server/records/tfrecord.h"

namespace nearprep {
namespace {

absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
  if (!f) return absl::PermissionDeniedError("cannot write " + tmp);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) return absl::DataLossError("write failed: " + tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::DataLossError("rename failed: " + path);
  }
  return absl::OkStatus();
}

absl::Status ReadWholeFile(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError("cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return absl::OkStatus();
}

// Inflates a GZIP or ZLIB stream (both detected by zlib's header check).
absl::Status Inflate(const std::string& in, const std::string& name,
                     std::string* out) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) {
    return absl::InternalError("inflateInit2 failed");
  }
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  out->clear();
  char buf[1 << 16];
  int r = Z_OK;
  while (r != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    r = inflate(&z, Z_NO_FLUSH);
    if (r != Z_OK && r != Z_STREAM_END) {
      inflateEnd(&z);
      return absl::DataLossError(
          absl::StrCat(name, ": corrupt compressed stream (zlib error ", r,
                       ")"));
    }
    out->append(buf, sizeof(buf) - z.avail_out);
    if (r == Z_OK && z.avail_in == 0 && z.avail_out != 0) {
      inflateEnd(&z);
      return absl::DataLossError(name + ": compressed stream is truncated");
    }
  }
  inflateEnd(&z);
  return absl::OkStatus();
}

records::RangeReader StringReader(const std::string& s) {
  return records::MemoryRangeReader(s.data(), s.size());
}

void Octal(uint64_t v, size_t width, char* field) {
  // width includes the terminating NUL.
  std::string s = absl::StrFormat("%0*o", static_cast<int>(width - 1), v);
  std::memcpy(field, s.data(), width - 1);
  field[width - 1] = '\0';
}

void Header(const std::string& name, uint64_t size, char type, char* h) {
  std::memset(h, 0, 512);
  std::memcpy(h, name.data(), std::min<size_t>(name.size(), 100));
  Octal(0644, 8, h + 100);
  Octal(0, 8, h + 108);
  Octal(0, 8, h + 116);
  Octal(size, 12, h + 124);
  Octal(0, 12, h + 136);  // mtime 0: deterministic output.
  h[156] = type;
  std::memcpy(h + 257, "ustar", 6);  // magic "ustar\0"
  std::memcpy(h + 263, "00", 2);
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; ++i) sum += static_cast<unsigned char>(h[i]);
  std::string c = absl::StrFormat("%06o", sum);
  std::memcpy(h + 148, c.data(), 6);
  h[154] = '\0';
  h[155] = ' ';
}

void Pad(std::string* out) {
  const size_t rem = out->size() % 512;
  if (rem) out->append(512 - rem, '\0');
}

std::string WebDatasetKey(const std::string& path) {
  const size_t slash = path.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = path.rfind('.');
  std::string key =
      dot != std::string::npos && dot > base ? path.substr(0, dot) : path;
  for (size_t i = base; i < key.size(); ++i) {
    if (key[i] == '.') key[i] = '_';
  }
  return key;
}

class ShardWriter {
 public:
  explicit ShardWriter(const PackOptions& o) : o_(o) {}

  absl::Status Add(const std::string& tfrecord_data) {
    // A sample that would push a non-empty shard over the limit starts a
    // new shard.
    if (!buf_.empty() && buf_.size() + tfrecord_data.size() > o_.shard_bytes) {
      Close();
    }
    if (o_.format == "tfrecord") {
      records::AppendTfRecord(tfrecord_data, &buf_);
    } else {
      buf_ += tfrecord_data;  // Already tar members.
    }
    return absl::OkStatus();
  }

  void Close() {
    if (buf_.empty()) return;
    if (o_.format == "tar") buf_.append(1024, '\0');  // End of archive.
    pending_.push_back(std::move(buf_));
    buf_.clear();
  }

  // Writes every shard with its final name (the count is known now) and
  // its index.
  absl::Status Finish(PackResult* result) {
    Close();
    const size_t n = pending_.size();
    for (size_t i = 0; i < n; ++i) {
      const std::string name = absl::StrFormat(
          "%s-%05d-of-%05d.%s", o_.prefix, i, n,
          o_.format == "tfrecord" ? "tfrecord" : "tar");
      const std::string path = o_.out_dir + "/" + name;
      if (auto st = WriteFile(path, pending_[i]); !st.ok()) return st;
      struct stat sb;
      if (::stat(path.c_str(), &sb) != 0) {
        return absl::DataLossError("cannot stat " + path);
      }
      records::IndexOptions io;
      io.format = o_.format;
      auto index = records::BuildShardIndex(
          name, pending_[i].size(),
          int64_t{sb.st_mtim.tv_sec} * 1000000000 + sb.st_mtim.tv_nsec,
          StringReader(pending_[i]), io);
      if (!index.ok()) return index.status();
      if (!index->damage.empty()) {
        return absl::InternalError("pack wrote a damaged shard: " +
                                   index->damage);
      }
      if (auto st = WriteFile(path + ".nearprep-index",
                              records::SerializeShardIndex(*index));
          !st.ok()) {
        return st;
      }
      result->shards.push_back(name);
      result->bytes += pending_[i].size();
    }
    return absl::OkStatus();
  }

 private:
  const PackOptions& o_;
  std::string buf_;
  std::vector<std::string> pending_;
};

}  // namespace

void AppendTarMember(const std::string& name, const std::string& data,
                     std::string* out) {
  char h[512];
  if (name.size() > 99) {
    // A pax extended header carries the long path: one record
    // "LEN path=NAME\n" whose LEN counts its own digits too.
    const std::string body = absl::StrCat(" path=", name, "\n");
    size_t len = body.size() + 1;
    while (std::to_string(len).size() + body.size() != len) {
      len = std::to_string(len).size() + body.size();
    }
    const std::string full = absl::StrCat(len, body);
    Header("././@PaxHeader", full.size(), 'x', h);
    out->append(h, 512);
    *out += full;
    Pad(out);
  }
  Header(name.size() > 99 ? name.substr(0, 99) : name, data.size(), '0', h);
  out->append(h, 512);
  *out += data;
  Pad(out);
}

absl::StatusOr<PackResult> Pack(const PackOptions& o) {
  if (o.format != "tfrecord" && o.format != "tar") {
    return absl::InvalidArgumentError("--format must be tfrecord or tar");
  }
  if (o.shard_bytes == 0) {
    return absl::InvalidArgumentError("--shard-size must be > 0");
  }
  if (o.out_dir.empty()) return absl::InvalidArgumentError("--out is required");
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  struct stat sb;
  if (::stat(o.out_dir.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    return absl::InvalidArgumentError("cannot create folder " + o.out_dir);
  }
  PackResult result;
  ShardWriter writer(o);

  if (!o.from_tfrecord.empty()) {
    if (o.format != "tfrecord") {
      return absl::InvalidArgumentError(
          "--from-tfrecord writes TFRecord shards (--format tfrecord)");
    }
    for (const auto& file : o.from_tfrecord) {
      std::string bytes;
      if (auto st = ReadWholeFile(file, &bytes); !st.ok()) return st;
      if (records::LooksCompressed(
              reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())) {
        std::string plain;
        if (auto st = Inflate(bytes, file, &plain); !st.ok()) return st;
        bytes.swap(plain);
      }
      absl::Status bad;
      records::TfRecordScan scan = records::ScanTfRecords(
          file, bytes.size(), StringReader(bytes),
          [&](const records::RecordSpan&, const uint8_t*,
              const absl::Status& crc) {
            if (!crc.ok() && bad.ok()) bad = crc;
          });
      if (!scan.damage.ok()) return scan.damage;
      if (!bad.ok()) return bad;
      for (const auto& span : scan.records) {
        (void)writer.Add(bytes.substr(
            span.offset + records::kTfRecordHeaderBytes, span.length));
        ++result.samples;
        if (o.progress) o.progress(result.samples, 0, span.length);
      }
    }
    if (auto st = writer.Finish(&result); !st.ok()) return st;
    return result;
  }

  DatasetConfig dc;
  dc.name = "pack";
  dc.format = o.source_format;
  dc.root = o.source_root;
  dc.list_file = o.list_file;
  auto ds = Dataset::Open(dc);
  if (!ds.ok()) return ds.status();
  const auto& samples = (*ds)->samples();
  std::vector<uint8_t> image;
  for (size_t id = 0; id < samples.size(); ++id) {
    const auto& s = samples[id];
    if (auto st = (*ds)->store().ReadSample(id, &image); !st.ok()) {
      // Writing a placeholder would change the ids of all later samples:
      // refuse instead, so the packed ids always equal the source's.
      return absl::Status(
          st.code(), absl::StrCat("cannot read sample ", id, " (", s.path,
                                  "): ", st.message(),
                                  "; fix or remove it, then pack again"));
    }
    const std::string jpeg(image.begin(), image.end());
    if (o.format == "tfrecord") {
      nearprep::tfexample::Example ex;
      auto& f = *ex.mutable_features()->mutable_feature();
      f["image/encoded"].mutable_bytes_list()->add_value(jpeg);
      f["image/format"].mutable_bytes_list()->add_value("JPEG");
      f["image/filename"].mutable_bytes_list()->add_value(s.path);
      f["image/class/label"].mutable_int64_list()->add_value(s.label);
      std::string out;
      {  // Deterministic: map entries sorted by key.
        google::protobuf::io::StringOutputStream sos(&out);
        google::protobuf::io::CodedOutputStream cos(&sos);
        cos.SetSerializationDeterministic(true);
        ex.SerializeToCodedStream(&cos);
      }
      (void)writer.Add(out);
    } else {
      const std::string key = WebDatasetKey(s.path);
      std::string members;
      AppendTarMember(key + ".jpg", jpeg, &members);
      AppendTarMember(key + ".cls", std::to_string(s.label), &members);
      (void)writer.Add(members);
    }
    ++result.samples;
    if (o.progress) o.progress(result.samples, samples.size(), jpeg.size());
  }
  if (auto st = writer.Finish(&result); !st.ok()) return st;
  return result;
}

}  // namespace nearprep
