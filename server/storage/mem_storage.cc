// See mem_storage.h.
#include "server/storage/mem_storage.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace nearprep {
namespace {

constexpr char kNotFound[] = "No such file or directory";

class MemFile : public RandomAccessFile {
 public:
  explicit MemFile(std::shared_ptr<const std::string> bytes)
      : bytes_(std::move(bytes)) {}
  uint64_t size() const override { return bytes_->size(); }
  // As Lstat says: the content's address stands for mtime and inode.
  FileInfo info() const override {
    const auto id = reinterpret_cast<uintptr_t>(bytes_.get());
    return FileInfo{FileType::kRegular, bytes_->size(),
                    static_cast<int64_t>(id), 0, static_cast<uint64_t>(id)};
  }
  absl::Status Read(uint64_t offset, size_t n, uint8_t* dst,
                    size_t* bytes_read) const override {
    if (offset >= bytes_->size()) {
      *bytes_read = 0;
      return absl::OkStatus();
    }
    const size_t got =
        std::min<size_t>(n, bytes_->size() - static_cast<size_t>(offset));
    std::memcpy(dst, bytes_->data() + offset, got);
    *bytes_read = got;
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<const std::string> bytes_;
};

// "a/b/c" -> "a/b"; "a" -> "".
std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

}  // namespace

void MemStorage::AddFile(const std::string& path, std::string bytes) {
  MutexLock lock(&mu_);
  files_[path] = std::make_shared<const std::string>(std::move(bytes));
}

void MemStorage::AddFile(const std::string& path,
                         const std::vector<uint8_t>& bytes) {
  AddFile(path, std::string(bytes.begin(), bytes.end()));
}

void MemStorage::AddDir(const std::string& path) {
  MutexLock lock(&mu_);
  for (std::string p = path; !p.empty(); p = Parent(p)) dirs_.insert(p);
}

bool MemStorage::RemoveFile(const std::string& path) {
  MutexLock lock(&mu_);
  return files_.erase(path) > 0;
}

std::string MemStorage::Describe(const std::string& path) const {
  return "mem:/" + path;
}

bool MemStorage::IsDirLocked(const std::string& path) const {
  if (path.empty() || dirs_.count(path) > 0) return true;
  const std::string prefix = path + "/";
  auto it = files_.lower_bound(prefix);
  return it != files_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
}

absl::Status MemStorage::ListDir(const std::string& path,
                                 std::vector<std::string>* names) const {
  names->clear();
  MutexLock lock(&mu_);
  if (files_.count(path) > 0) return absl::PermissionDeniedError("Not a directory");
  if (!IsDirLocked(path)) return absl::NotFoundError(kNotFound);
  const std::string prefix = path.empty() ? "" : path + "/";
  std::set<std::string> children;
  auto add = [&](const std::string& key) {
    if (key.empty() || key[0] == '/') return;  // absolute names are no children
    if (key.compare(0, prefix.size(), prefix) != 0 || key.size() == prefix.size()) {
      return;
    }
    const std::string rest = key.substr(prefix.size());
    children.insert(rest.substr(0, rest.find('/')));
  };
  for (const auto& f : files_) add(f.first);
  for (const auto& d : dirs_) add(d);
  names->assign(children.begin(), children.end());
  return absl::OkStatus();
}

absl::StatusOr<FileInfo> MemStorage::Lstat(const std::string& path) const {
  MutexLock lock(&mu_);
  auto it = files_.find(path);
  if (it != files_.end()) {
    // The mtime of an in-memory file: its content's address, which changes
    // whenever the file is replaced (enough for cache validation).
    // Its inode likewise.
    const auto id = reinterpret_cast<uintptr_t>(it->second.get());
    return FileInfo{FileType::kRegular, it->second->size(),
                    static_cast<int64_t>(id), 0, static_cast<uint64_t>(id)};
  }
  if (IsDirLocked(path)) return FileInfo{FileType::kDirectory, 0, 0};
  return absl::NotFoundError(kNotFound);
}

absl::StatusOr<FileInfo> MemStorage::Stat(const std::string& path) const {
  return Lstat(path);  // no symlinks
}

absl::StatusOr<std::string> MemStorage::Resolve(const std::string& path) const {
  if (path.empty()) return absl::PermissionDeniedError("leads outside the root");
  absl::StatusOr<FileInfo> info = Lstat(path);
  if (!info.ok()) return info.status();
  return path;
}

absl::Status MemStorage::WriteFile(const std::string& path,
                                   const std::string& bytes) const {
  const_cast<MemStorage*>(this)->AddFile(path, bytes);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> MemStorage::Open(
    const std::string& path, const OpenOptions& /*options*/) const {
  MutexLock lock(&mu_);
  auto it = files_.find(path);
  if (it != files_.end()) {
    return std::unique_ptr<RandomAccessFile>(new MemFile(it->second));
  }
  if (IsDirLocked(path)) return absl::PermissionDeniedError("not a regular file");
  return absl::NotFoundError(kNotFound);
}

}  // namespace nearprep
