// PosixStorage: the Storage (storage.h) of a folder on a local file system,
// the one the daemon serves datasets from.
//
// Open() with OpenOptions::no_follow walks from the real (symlink-free) root
// one component at a time with openat(O_NOFOLLOW), so a file or folder
// swapped for a symlink after the listing is refused (PERMISSION_DENIED,
// "... (symlink not allowed here)"); the final open adds O_NONBLOCK (a FIFO
// never blocks the caller; it is then refused as not a regular file) and,
// with OpenOptions::direct, O_DIRECT. Lstat/Stat/ListDir/Resolve work on the
// absolute path below the real root (used by listings, which refuse what
// leads outside).
//
// Thread-safety: immutable after Create(); every method may be called
// concurrently. No descriptor is kept open between calls.
#ifndef NEARPREP_SERVER_STORAGE_POSIX_STORAGE_H_
#define NEARPREP_SERVER_STORAGE_POSIX_STORAGE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/storage/storage.h"

namespace nearprep {

class PosixStorage : public Storage {
 public:
  // Resolves `root` (symlinks allowed here). NOT_FOUND when it does not
  // exist ("root ROOT: reason") or is not a folder ("root ROOT is not a
  // folder").
  static absl::StatusOr<std::unique_ptr<PosixStorage>> Create(
      const std::string& root);

  // The symlink-free absolute root.
  const std::string& real_root() const { return real_root_; }

  std::string Describe(const std::string& path) const override;
  absl::Status ListDir(const std::string& path,
                       std::vector<std::string>* names) const override;
  absl::StatusOr<FileInfo> Lstat(const std::string& path) const override;
  absl::StatusOr<FileInfo> Stat(const std::string& path) const override;
  absl::StatusOr<std::string> Resolve(const std::string& path) const override;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(
      const std::string& path, const OpenOptions& options) const override;
  absl::Status WriteFile(const std::string& path,
                         const std::string& bytes) const override;

 private:
  explicit PosixStorage(std::string real_root)
      : real_root_(std::move(real_root)) {}
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenNoFollow(
      const std::string& path, bool direct) const;

  std::string real_root_;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_STORAGE_POSIX_STORAGE_H_
