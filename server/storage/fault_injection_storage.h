// FaultInjectionStorage: a Storage (storage.h) that forwards to another one
// and injects faults on chosen files (leveldb's FaultInjectionTestEnv), so
// reliability tests exercise real failure paths without production flags:
//  - FailOpen:   Open() of the file returns the given error;
//  - FailReads:  every Read() of the file returns the given error;
//  - ShortReads: the file's bytes end after `max_bytes`, although size()
//                still reports the listed size (a file truncated after it
//                was opened);
//  - SlowReads:  every Read() of the file sleeps `delay` first;
//  - Vanish:     the file disappears (deleted between a listing and a read):
//                Lstat/Stat/Resolve/Open say NOT_FOUND, ListDir omits it.
// A fault applies to the path exactly as passed to Open() etc. (for a
// dataset: the symlink-free path, equal to the sample's path when no
// symlink is involved), or to every file with kEveryFile. Faults set after a
// file was opened apply to its later reads. injected() counts what was
// actually injected, so a test can prove the fault fired.
//
// Thread-safety: every method may be called concurrently. Files opened
// through this storage must not outlive it.
#ifndef NEARPREP_SERVER_STORAGE_FAULT_INJECTION_STORAGE_H_
#define NEARPREP_SERVER_STORAGE_FAULT_INJECTION_STORAGE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "server/storage/storage.h"

namespace nearprep {

class FaultInjectionStorage : public Storage {
 public:
  // Matches every path.
  static constexpr char kEveryFile[] = "*";

  explicit FaultInjectionStorage(std::shared_ptr<const Storage> base);

  void FailOpen(const std::string& path, absl::Status error);
  void FailReads(const std::string& path, absl::Status error);
  void ShortReads(const std::string& path, uint64_t max_bytes);
  void SlowReads(const std::string& path, std::chrono::microseconds delay);
  void Vanish(const std::string& path);
  // Removes every fault (counts stay).
  void Clear();

  // How many times each kind of fault was injected.
  struct Counts {
    uint64_t open_errors = 0;
    uint64_t read_errors = 0;
    uint64_t short_reads = 0;
    uint64_t slow_reads = 0;
    uint64_t vanished = 0;  // calls answered NOT_FOUND or entries hidden
  };
  Counts injected() const;

  std::string Describe(const std::string& path) const override;
  absl::Status ListDir(const std::string& path,
                       std::vector<std::string>* names) const override;
  absl::StatusOr<FileInfo> Lstat(const std::string& path) const override;
  absl::StatusOr<FileInfo> Stat(const std::string& path) const override;
  absl::StatusOr<std::string> Resolve(const std::string& path) const override;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(
      const std::string& path, const OpenOptions& options) const override;

  // The faults of one path (internal; public for the file wrapper).
  struct Faults {
    absl::Status open_error;
    absl::Status read_error;
    int64_t short_max = -1;  // -1: none
    std::chrono::microseconds delay{0};
    bool vanished = false;
  };
  // The faults that apply to `path` (its own, else kEveryFile's).
  Faults FaultsFor(const std::string& path) const;
  void Count(uint64_t Counts::*which) const;

 private:
  bool VanishedCounted(const std::string& path) const;

  std::shared_ptr<const Storage> base_;
  mutable Mutex mu_;
  std::map<std::string, Faults> faults_ ABSL_GUARDED_BY(mu_);
  mutable Counts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_STORAGE_FAULT_INJECTION_STORAGE_H_
