// See posix_storage.h.
#include "server/storage/posix_storage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace nearprep {
namespace {

// Closes a file descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { Reset(-1); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int Release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// The status of a failed open/stat/list (see storage.h for the codes).
absl::Status ErrnoStatus(int err) {
  const std::string what = std::strerror(err);
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(what);
    case ELOOP:
      return absl::PermissionDeniedError(
          absl::StrCat(what, " (symlink not allowed here)"));
    case ENOTDIR:
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(what);
    default:
      return absl::DataLossError(what);
  }
}

int64_t MtimeNs(const struct stat& st) {
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}

FileType TypeOf(mode_t mode) {
  if (S_ISREG(mode)) return FileType::kRegular;
  if (S_ISDIR(mode)) return FileType::kDirectory;
  if (S_ISLNK(mode)) return FileType::kSymlink;
  return FileType::kOther;
}

class PosixFile : public RandomAccessFile {
 public:
  PosixFile(int fd, const FileInfo& info, bool direct)
      : fd_(fd), size_(info.size), info_(info), direct_(direct) {}
  ~PosixFile() override { ::close(fd_); }

  uint64_t size() const override { return size_; }
  FileInfo info() const override { return info_; }

  absl::Status Read(uint64_t offset, size_t n, uint8_t* dst,
                    size_t* bytes_read) const override {
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, dst + done, n - done,
                                static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        const std::string what = absl::StrCat("read: ", std::strerror(err));
        if (err == EINVAL && direct_) return absl::InvalidArgumentError(what);
        return absl::DataLossError(what);
      }
      if (r == 0) break;  // end of file
      done += static_cast<size_t>(r);
    }
    *bytes_read = done;
    return absl::OkStatus();
  }

 private:
  int fd_;
  uint64_t size_;
  FileInfo info_;
  bool direct_;
};

// The open file `*fd` (taken over) when it is a regular file.
absl::StatusOr<std::unique_ptr<RandomAccessFile>> FileFromFd(Fd* fd,
                                                             bool direct) {
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return ErrnoStatus(errno);
  if (!S_ISREG(st.st_mode)) {
    return absl::PermissionDeniedError("not a regular file");
  }
  const FileInfo info{FileType::kRegular, static_cast<uint64_t>(st.st_size),
                      MtimeNs(st), static_cast<uint64_t>(st.st_dev),
                      static_cast<uint64_t>(st.st_ino)};
  return std::unique_ptr<RandomAccessFile>(
      new PosixFile(fd->Release(), info, direct));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PosixStorage>> PosixStorage::Create(
    const std::string& root) {
  char* r = ::realpath(root.c_str(), nullptr);
  if (r == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("root ", root, ": ", std::strerror(errno)));
  }
  std::string real_root(r);
  std::free(r);
  struct stat st;
  if (::stat(real_root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat("root ", root, " is not a folder"));
  }
  return std::unique_ptr<PosixStorage>(new PosixStorage(std::move(real_root)));
}

absl::Status PosixStorage::WriteFile(const std::string& path,
                                     const std::string& bytes) const {
  if (path.empty() || path[0] == '/' || path.find("..") != std::string::npos) {
    return absl::InvalidArgumentError("not a clean relative path");
  }
  const std::string target = Describe(path);
  const std::string tmp = target + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(),
                        O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                        0644);
  if (fd < 0) {
    return errno == EACCES || errno == EROFS || errno == EPERM
               ? absl::PermissionDeniedError(std::strerror(errno))
               : absl::DataLossError(std::strerror(errno));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return absl::DataLossError(std::string("write: ") + std::strerror(err));
    }
    done += static_cast<size_t>(w);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return absl::DataLossError(std::string("rename: ") + std::strerror(err));
  }
  return absl::OkStatus();
}

std::string PosixStorage::Describe(const std::string& path) const {
  if (path.empty()) return real_root_;
  if (path[0] == '/') return path;
  return real_root_ == "/" ? "/" + path : real_root_ + "/" + path;
}

absl::Status PosixStorage::ListDir(const std::string& path,
                                   std::vector<std::string>* names) const {
  names->clear();
  DIR* d = ::opendir(Describe(path).c_str());
  if (d == nullptr) return ErrnoStatus(errno);
  while (struct dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) {
      continue;
    }
    names->emplace_back(e->d_name);
  }
  ::closedir(d);
  return absl::OkStatus();
}

absl::StatusOr<FileInfo> PosixStorage::Lstat(const std::string& path) const {
  struct stat st;
  if (::lstat(Describe(path).c_str(), &st) != 0) return ErrnoStatus(errno);
  return FileInfo{TypeOf(st.st_mode), static_cast<uint64_t>(st.st_size),
                  MtimeNs(st), static_cast<uint64_t>(st.st_dev),
                  static_cast<uint64_t>(st.st_ino)};
}

absl::StatusOr<FileInfo> PosixStorage::Stat(const std::string& path) const {
  struct stat st;
  if (::stat(Describe(path).c_str(), &st) != 0) return ErrnoStatus(errno);
  return FileInfo{TypeOf(st.st_mode), static_cast<uint64_t>(st.st_size),
                  MtimeNs(st), static_cast<uint64_t>(st.st_dev),
                  static_cast<uint64_t>(st.st_ino)};
}

absl::StatusOr<std::string> PosixStorage::Resolve(
    const std::string& path) const {
  char* r = ::realpath(Describe(path).c_str(), nullptr);
  if (r == nullptr) return absl::NotFoundError(std::strerror(errno));
  std::string real(r);
  std::free(r);
  if (real_root_ == "/") {
    if (real.size() <= 1) {
      return absl::PermissionDeniedError("leads outside the root");
    }
    return real.substr(1);
  }
  if (real.size() > real_root_.size() + 1 &&
      real.compare(0, real_root_.size(), real_root_) == 0 &&
      real[real_root_.size()] == '/') {
    return real.substr(real_root_.size() + 1);
  }
  return absl::PermissionDeniedError("leads outside the root");
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> PosixStorage::Open(
    const std::string& path, const OpenOptions& options) const {
  if (options.no_follow) return OpenNoFollow(path, options.direct);
  Fd fd(::open(Describe(path).c_str(),
               O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY |
                   (options.direct ? O_DIRECT : 0)));
  if (fd.get() < 0) return ErrnoStatus(errno);
  return FileFromFd(&fd, options.direct);
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> PosixStorage::OpenNoFollow(
    const std::string& path, bool direct) const {
  std::vector<absl::string_view> parts = absl::StrSplit(path, '/');
  for (absl::string_view p : parts) {
    if (p.empty() || p == "." || p == "..") {
      return absl::PermissionDeniedError("not a clean relative path");
    }
  }
  // Walk from the real root, one component at a time, never following a
  // symlink: whatever was swapped in since the listing cannot lead outside.
  Fd dir(::open(real_root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) return ErrnoStatus(errno);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const std::string comp(parts[i]);
    const int next = ::openat(dir.get(), comp.c_str(),
                              O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return ErrnoStatus(errno);
    dir.Reset(next);
  }
  const std::string last(parts.back());
  Fd fd(::openat(dir.get(), last.c_str(),
                 O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY |
                     (direct ? O_DIRECT : 0)));
  if (fd.get() < 0) return ErrnoStatus(errno);
  dir.Reset(-1);
  return FileFromFd(&fd, direct);
}

}  // namespace nearprep
