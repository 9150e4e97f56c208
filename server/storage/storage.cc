// See storage.h.
#include "server/storage/storage.h"

#include <algorithm>
#include <limits>

namespace nearprep {

absl::Status Storage::WriteFile(const std::string&, const std::string&) const {
  return absl::UnimplementedError("this storage is read-only");
}

absl::Status ReadRange(const RandomAccessFile& file, uint64_t offset,
                       uint64_t n, std::vector<uint8_t>* out) {
  // Never allocate more than the file holds, whatever the caller was told
  // (a range from a damaged index).
  const uint64_t size = file.size();
  n = std::min<uint64_t>(n, offset < size ? size - offset : 0);
  if (n > std::numeric_limits<size_t>::max()) {
    out->clear();
    return absl::ResourceExhaustedError("range larger than memory");
  }
  out->resize(static_cast<size_t>(n));
  size_t got = 0;
  const absl::Status s = file.Read(offset, static_cast<size_t>(n), out->data(),
                                   &got);
  if (!s.ok()) {
    out->clear();
    return s;
  }
  out->resize(std::min(got, static_cast<size_t>(n)));
  return absl::OkStatus();
}

absl::Status ReadFileToString(const Storage& storage, const std::string& path,
                              std::string* out) {
  OpenOptions options;
  options.no_follow = false;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> f =
      storage.Open(path, options);
  if (!f.ok()) return f.status();
  std::vector<uint8_t> bytes;
  absl::Status s = ReadRange(**f, 0, (*f)->size(), &bytes);
  if (!s.ok()) return s;
  out->assign(bytes.begin(), bytes.end());
  return absl::OkStatus();
}

}  // namespace nearprep
