// MemStorage: a Storage (storage.h) held in memory, for tests (leveldb's
// memenv): pipeline and backend tests build datasets without temp folders.
//
// Files are added with their bytes; folders exist when a file lies below
// them or when added with AddDir. There are no symlinks (Lstat never says
// kSymlink, Resolve returns the path itself), and OpenOptions are accepted
// but change nothing (no page cache to bypass). An absolute path is just a
// name: AddFile("/etc/list.txt", ...) makes it openable with
// OpenOptions::no_follow = false, for a file_list's list file.
//
// A file opened before RemoveFile/AddFile keeps the bytes it had (like an
// unlinked posix file).
//
// Thread-safety: every method may be called concurrently (one mutex; reads
// of an open file take no lock).
#ifndef NEARPREP_SERVER_STORAGE_MEM_STORAGE_H_
#define NEARPREP_SERVER_STORAGE_MEM_STORAGE_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "server/storage/storage.h"

namespace nearprep {

class MemStorage : public Storage {
 public:
  MemStorage() = default;

  // Adds or replaces file `path` (a clean relative path, or an absolute
  // name, see above).
  void AddFile(const std::string& path, std::string bytes);
  void AddFile(const std::string& path, const std::vector<uint8_t>& bytes);
  // Adds an empty folder (and its parents).
  void AddDir(const std::string& path);
  // Removes file `path`; false when there was none.
  bool RemoveFile(const std::string& path);

  std::string Describe(const std::string& path) const override;
  absl::Status ListDir(const std::string& path,
                       std::vector<std::string>* names) const override;
  absl::StatusOr<FileInfo> Lstat(const std::string& path) const override;
  absl::StatusOr<FileInfo> Stat(const std::string& path) const override;
  absl::StatusOr<std::string> Resolve(const std::string& path) const override;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(
      const std::string& path, const OpenOptions& options) const override;
  // Like AddFile (the storage is logically const: a cache write).
  absl::Status WriteFile(const std::string& path,
                         const std::string& bytes) const override;

 private:
  bool IsDirLocked(const std::string& path) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<const std::string>> files_ ABSL_GUARDED_BY(mu_);
  // Added with AddDir (and their parents).
  std::set<std::string> dirs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_STORAGE_MEM_STORAGE_H_
