// AnonymousStorage: a test Storage over a MemStorage whose files say nothing
// but their size (mtime, inode and device read as 0), like a shard rewritten
// in place with its mtime restored: only the bytes read can tell that it
// changed (the records' CRCs, a tar sample's .cls check). Used by the
// TFRecord and tar dataset tests.
#ifndef NEARPREP_TESTS_UNIT_STORAGE_ANONYMOUS_STORAGE_H_
#define NEARPREP_TESTS_UNIT_STORAGE_ANONYMOUS_STORAGE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/storage/mem_storage.h"

namespace nearprep::testing {

class AnonymousStorage : public Storage {
 public:
  explicit AnonymousStorage(std::shared_ptr<MemStorage> base) : base_(std::move(base)) {}
  std::string Describe(const std::string& p) const override { return base_->Describe(p); }
  absl::Status ListDir(const std::string& p, std::vector<std::string>* n) const override {
    return base_->ListDir(p, n);
  }
  absl::StatusOr<FileInfo> Lstat(const std::string& p) const override {
    auto i = base_->Lstat(p);
    if (i.ok()) i->mtime_ns = 0, i->inode = 0, i->device = 0;
    return i;
  }
  absl::StatusOr<FileInfo> Stat(const std::string& p) const override { return Lstat(p); }
  absl::StatusOr<std::string> Resolve(const std::string& p) const override {
    return base_->Resolve(p);
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(
      const std::string& p, const OpenOptions& o) const override {
    auto f = base_->Open(p, o);
    if (!f.ok()) return f.status();
    return std::unique_ptr<RandomAccessFile>(new File(std::move(f).value()));
  }
  absl::Status WriteFile(const std::string& p, const std::string& b) const override {
    return base_->WriteFile(p, b);
  }

 private:
  // Wraps the file so that nothing but Read and size reach the caller.
  class File : public RandomAccessFile {
   public:
    explicit File(std::unique_ptr<RandomAccessFile> f) : f_(std::move(f)) {}
    uint64_t size() const override { return f_->size(); }
    absl::Status Read(uint64_t off, size_t n, uint8_t* dst, size_t* got) const override {
      return f_->Read(off, n, dst, got);
    }

   private:
    std::unique_ptr<RandomAccessFile> f_;
  };
  std::shared_ptr<MemStorage> base_;
};

}  // namespace nearprep::testing

#endif  // NEARPREP_TESTS_UNIT_STORAGE_ANONYMOUS_STORAGE_H_
