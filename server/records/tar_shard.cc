#include "server/records/tar_shard.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace nearprep::records {

namespace {

// libarchive's client callbacks over a RangeReader.
struct Source {
  const RangeReader* read = nullptr;
  uint64_t size = 0;
  uint64_t pos = 0;
  std::vector<uint8_t> buf;
  absl::Status error;
};

la_ssize_t ReadCallback(archive* a, void* data, const void** out) {
  auto* s = static_cast<Source*>(data);
  const size_t n = static_cast<size_t>(
      std::min<uint64_t>(s->buf.size(), s->size - std::min(s->pos, s->size)));
  if (n == 0) return 0;
  auto got = (*s->read)(s->pos, n, s->buf.data());
  if (!got.ok()) {
    s->error = got.status();
    archive_set_error(a, EIO, "%s",
                      std::string(got.status().message()).c_str());
    return -1;
  }
  s->pos += *got;
  *out = s->buf.data();
  return static_cast<la_ssize_t>(*got);
}

la_int64_t SkipCallback(archive*, void* data, la_int64_t request) {
  auto* s = static_cast<Source*>(data);
  const uint64_t left = s->size - std::min(s->pos, s->size);
  const uint64_t n = std::min<uint64_t>(static_cast<uint64_t>(request), left);
  s->pos += n;
  return static_cast<la_int64_t>(n);
}

}  // namespace

TarScan ScanTarMembers(const std::string& path, uint64_t file_size,
                       const RangeReader& read) {
  TarScan scan;
  Source src;
  src.read = &read;
  src.size = file_size;
  src.buf.resize(size_t{1} << 20);
  std::unique_ptr<archive, int (*)(archive*)> a(archive_read_new(),
                                                archive_read_free);
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  // Only the "none" filter: a compressed tar cannot be read at random.
  archive_read_set_callback_data(a.get(), &src);
  archive_read_set_read_callback(a.get(), ReadCallback);
  archive_read_set_skip_callback(a.get(), SkipCallback);
  if (archive_read_open1(a.get()) != ARCHIVE_OK) {
    const char* why = archive_error_string(a.get());
    scan.damage = absl::InvalidArgumentError(absl::StrCat(
        path, " is not an uncompressed tar file (", why ? why : "unknown",
        "); compressed shards cannot be read at random: decompress them"));
    return scan;
  }
  archive_entry* e = nullptr;
  while (true) {
    const int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF) break;
    const uint64_t header_offset =
        static_cast<uint64_t>(archive_read_header_position(a.get()));
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
      const char* why = archive_error_string(a.get());
      if (header_offset == 0 && scan.members.empty()) {
        scan.damage = absl::InvalidArgumentError(absl::StrCat(
            path, " is not an uncompressed tar file (", why ? why : "unknown",
            "); compressed shards cannot be read at random: decompress "
            "them"));
        return scan;
      }
      scan.damage = absl::DataLossError(absl::StrCat(
          path, " offset ", header_offset, ": unreadable tar header (",
          why ? why : "unknown", ")"));
      scan.damaged_at = header_offset;
      return scan;
    }
    TarMember m;
    // A pax name that cannot be converted to the locale's charset is a
    // warning; its UTF-8 form is still there.
    const char* name = archive_entry_pathname_utf8(e);
    if (name == nullptr) name = archive_entry_pathname(e);
    m.name = name ? name : "";
    m.header_offset = header_offset;
    m.data_offset = static_cast<uint64_t>(archive_filter_bytes(a.get(), -1));
    m.size = archive_entry_size_is_set(e)
                 ? static_cast<uint64_t>(archive_entry_size(e))
                 : 0;
    m.regular = archive_entry_filetype(e) == AE_IFREG;
    if (m.data_offset > file_size || m.size > file_size - m.data_offset) {
      scan.damage = absl::DataLossError(absl::StrCat(
          path, " offset ", header_offset, ": member '", m.name,
          "' is truncated (", m.size, " bytes at ", m.data_offset,
          ", file ends at ", file_size, ")"));
      scan.damaged_at = header_offset;
      return scan;
    }
    scan.members.push_back(std::move(m));
    if (archive_read_data_skip(a.get()) != ARCHIVE_OK) {
      const char* why = archive_error_string(a.get());
      scan.damage = absl::DataLossError(absl::StrCat(
          path, " offset ", header_offset, ": ", why ? why : "unreadable"));
      scan.damaged_at = header_offset;
      scan.members.pop_back();
      return scan;
    }
  }
  return scan;
}

void SplitWebDatasetName(const std::string& path, std::string* key,
                         std::string* ext) {
  const size_t slash = path.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = path.find('.', base);
  if (dot == std::string::npos) {
    *key = path;
    ext->clear();
  } else {
    *key = path.substr(0, dot);
    *ext = absl::AsciiStrToLower(path.substr(dot + 1));
  }
}

absl::StatusOr<int64_t> ParseClassLabel(const std::string& text) {
  size_t i = 0;
  auto blank = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
  };
  while (i < text.size() && blank(text[i])) ++i;
  bool negative = false;
  if (i < text.size() && text[i] == '-') {
    negative = true;
    ++i;
  }
  const size_t digits_start = i;
  uint64_t v = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    v = v * 10 + static_cast<uint64_t>(text[i] - '0');
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError("class label out of range");
    }
    ++i;
  }
  const bool has_digits = i > digits_start;
  while (i < text.size() && blank(text[i])) ++i;
  if (!has_digits || i != text.size()) {
    return absl::InvalidArgumentError("class label is not a decimal integer");
  }
  return negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
}

std::vector<TarSample> GroupWebDataset(
    const std::vector<TarMember>& members,
    const std::function<absl::Status(uint64_t, uint64_t, std::string*)>&
        read_cls,
    uint64_t* without_image) {
  std::vector<TarSample> out;
  *without_image = 0;
  size_t i = 0;
  while (i < members.size()) {
    std::string key, ext;
    SplitWebDatasetName(members[i].name, &key, &ext);
    size_t j = i;
    TarSample s;
    s.key = key;
    bool has_image = false;
    const TarMember* cls = nullptr;
    for (; j < members.size(); ++j) {
      std::string k2, e2;
      SplitWebDatasetName(members[j].name, &k2, &e2);
      if (k2 != key) break;
      if (!members[j].regular) continue;
      if ((e2 == "jpg" || e2 == "jpeg") && !has_image) {
        has_image = true;
        s.image_offset = members[j].data_offset;
        s.image_size = members[j].size;
      } else if (e2 == "cls") {
        cls = &members[j];
      }
    }
    // Members that are not files (directories) do not make samples.
    if (!has_image) {
      bool any_regular = false;
      for (size_t k = i; k < j; ++k) any_regular |= members[k].regular;
      if (any_regular) ++*without_image;
      i = j;
      continue;
    }
    if (cls != nullptr) {
      s.has_cls = true;
      s.cls_offset = cls->data_offset;
      s.cls_size = cls->size;
      std::string text;
      absl::Status st = cls->size > kMaxClassLabelBytes
                            ? absl::InvalidArgumentError(absl::StrCat(
                                  "class label member is over ",
                                  kMaxClassLabelBytes, " bytes"))
                            : read_cls(cls->data_offset, cls->size, &text);
      absl::StatusOr<int64_t> label =
          st.ok() ? ParseClassLabel(text) : absl::StatusOr<int64_t>(st);
      if (label.ok()) {
        s.has_label = true;
        s.label = *label;
      } else {
        s.status = absl::DataLossError(
            absl::StrCat("sample '", key, "': .cls at offset ",
                         cls->data_offset, ": ", label.status().message()));
      }
    }
    out.push_back(std::move(s));
    i = j;
  }
  return out;
}

absl::Status CheckTarLabel(const TarLabelClaim& claim, const uint8_t* have,
                           uint64_t have_offset, uint64_t have_bytes,
                           const RangeReader& read, bool* index_does_not_hold) {
  *index_does_not_hold = false;
  const auto at = [&](absl::StatusCode code, absl::string_view what) {
    return absl::Status(code, absl::StrCat(claim.shard, " offset ",
                                           claim.cls_offset, ": ", what));
  };
  const uint64_t off = claim.cls_offset, n = claim.cls_bytes;
  const uint64_t page = off / kTarLabelReadBytes * kTarLabelReadBytes;
  if (n == 0 || n > kMaxClassLabelBytes ||
      off + n - page > kTarLabelReadBytes) {
    // The index parser refuses such an entry; never read past the page.
    return at(absl::StatusCode::kDataLoss, "not a .cls member's place");
  }
  std::string text;
  if (have != nullptr && off >= have_offset && n <= have_bytes &&
      off - have_offset <= have_bytes - n) {
    text.assign(reinterpret_cast<const char*>(have) + (off - have_offset), n);
  } else {
    alignas(kTarLabelReadBytes) uint8_t buf[kTarLabelReadBytes];
    absl::StatusOr<size_t> got = read(page, sizeof(buf), buf);
    if (!got.ok()) {
      return at(got.status().code(),
                absl::StrCat("reading the .cls member: ", got.status().message()));
    }
    if (*got < off + n - page) {
      return at(absl::StatusCode::kDataLoss,
                "the .cls member is cut short (the shard shrank since it "
                "was indexed)");
    }
    text.assign(reinterpret_cast<const char*>(buf) + (off - page), n);
  }
  absl::StatusOr<int64_t> parsed = ParseClassLabel(text);
  if (parsed.ok() && *parsed + claim.label_offset == claim.label) {
    return absl::OkStatus();
  }
  *index_does_not_hold = true;
  return at(absl::StatusCode::kDataLoss,
            absl::StrCat(
                "the index does not hold for this sample (index: label ",
                claim.label, "; .cls: ",
                parsed.ok() ? absl::StrCat("label ", *parsed + claim.label_offset)
                            : std::string(parsed.status().message()),
                "): the index was edited or the shard rewritten; none of it "
                "is trusted until the daemon re-indexes it (delete the index, "
                "restart)"));
}

}  // namespace nearprep::records
