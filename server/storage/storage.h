// Storage: where sample bytes come from. The seam between datasets
// (server/data) and the bytes on a disk, in the spirit of leveldb's Env: a
// small abstract interface with a posix implementation for the daemon
// (posix_storage.h), an in-memory one for tests (mem_storage.h) and a
// fault-injecting wrapper for reliability tests (fault_injection_storage.h).
// What a dataset is made of (which files, which labels, which byte ranges)
// is listed by sample_listing.h on top of this interface.
//
// Paths are relative to the storage's root, '/'-separated, without "." or
// ".." components ("" is the root itself). The one exception is
// OpenOptions::no_follow = false, for configuration files (a file_list's
// list), where an absolute path names a file of the host.
//
// Errors are values (absl::Status). Messages say what failed ("No such file
// or directory", "read: Input/output error", "not a regular file") but not
// which path: callers name the sample the way their users know it (a
// dataset names the visible path of a sample, not the symlink-free one it
// opens). Codes: NOT_FOUND (does not exist), PERMISSION_DENIED (a symlink
// where none may be, not a regular file, leads outside the root, access
// refused), INVALID_ARGUMENT (an O_DIRECT read the file system refuses, e.g.
// unaligned), DATA_LOSS (any other I/O error).
//
// Thread-safety: every method of Storage and RandomAccessFile is const and
// may be called from any number of threads at once.
#ifndef NEARPREP_SERVER_STORAGE_STORAGE_H_
#define NEARPREP_SERVER_STORAGE_STORAGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace nearprep {

enum class FileType { kRegular, kDirectory, kSymlink, kOther };

struct FileInfo {
  FileType type = FileType::kOther;
  uint64_t size = 0;  // bytes (regular files)
  // Last modification, in ns since the epoch (posix: st_mtim); part of what
  // binds a record shard's index to the shard (shard_index.h).
  int64_t mtime_ns = 0;
  // Which file it is (posix: st_dev, st_ino; 0 where the storage cannot
  // tell): a shard replaced by a rename keeps its name, not its inode.
  uint64_t device = 0;
  uint64_t inode = 0;
};

struct OpenOptions {
  // true: walk the path from the root one component at a time, never
  // following a symlink (O_NOFOLLOW on every component), so nothing swapped
  // in after a listing can lead outside the root. A symlink on the way is
  // PERMISSION_DENIED. false: a plain open that follows symlinks; absolute
  // paths name host files. Only for configuration files, never for samples.
  bool no_follow = true;
  // O_DIRECT: reads bypass the page cache (DMA straight into the caller's
  // buffer, e.g. a P2P-mapped FPGA buffer). The caller keeps offsets,
  // lengths and buffer addresses aligned to 4096 bytes; a read the file
  // system refuses is INVALID_ARGUMENT. An open the file system refuses
  // fails like any other open. Implementations without a page cache ignore
  // the flag.
  bool direct = false;
};

// An open regular file. Reads are positional (pread): no shared cursor.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // The file's size when it was opened.
  virtual uint64_t size() const = 0;
  // What the open file is (fstat when it was opened): size, mtime, device
  // and inode where the storage knows them (else only the size). A dataset
  // compares it with what it indexed to notice a shard replaced in place.
  virtual FileInfo info() const {
    FileInfo i;
    i.type = FileType::kRegular;
    i.size = size();
    return i;
  }
  // Reads up to `n` bytes at `offset` into `dst` (which holds n bytes);
  // *bytes_read gets the count, fewer than n only at the end of the file.
  // On error *bytes_read is unspecified.
  virtual absl::Status Read(uint64_t offset, size_t n, uint8_t* dst,
                            size_t* bytes_read) const = 0;
};

class Storage {
 public:
  virtual ~Storage() = default;

  // How `path` is shown in messages and logs (posix: the absolute path).
  virtual std::string Describe(const std::string& path) const = 0;

  // The names in folder `path` ("" = the root), in no particular order,
  // without "." and "..". *names is cleared first.
  virtual absl::Status ListDir(const std::string& path,
                               std::vector<std::string>* names) const = 0;

  // What `path` is, without following a final symlink (lstat).
  virtual absl::StatusOr<FileInfo> Lstat(const std::string& path) const = 0;

  // What `path` leads to, following symlinks (stat).
  virtual absl::StatusOr<FileInfo> Stat(const std::string& path) const = 0;

  // The symlink-free form of `path` (realpath), relative to the root.
  // NOT_FOUND when it leads nowhere (dangling, missing; the message is the
  // reason), PERMISSION_DENIED when it leads outside the root or to the
  // root itself.
  virtual absl::StatusOr<std::string> Resolve(const std::string& path) const = 0;

  // Opens the regular file `path` for reading. A folder, FIFO, device or
  // socket is PERMISSION_DENIED ("not a regular file"); opening never blocks.
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(
      const std::string& path, const OpenOptions& options) const = 0;

  // Replaces file `path` (its folder must exist) with `bytes`, atomically
  // (readers see the old or the new file, never a mix). Used for caches
  // (record shard indexes). UNIMPLEMENTED where the storage is read-only;
  // PERMISSION_DENIED where the folder is not writable.
  virtual absl::Status WriteFile(const std::string& path,
                                 const std::string& bytes) const;
};

// Reads bytes [offset, offset + n) of `file` into *out (resized to what was
// read: fewer than n bytes only when the file ends first). On error *out is
// empty and the status is the file's.
absl::Status ReadRange(const RandomAccessFile& file, uint64_t offset,
                       uint64_t n, std::vector<uint8_t>* out);

// Reads the whole file `path` (following symlinks, see OpenOptions) into
// *out. For small configuration files.
absl::Status ReadFileToString(const Storage& storage, const std::string& path,
                              std::string* out);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_STORAGE_STORAGE_H_
