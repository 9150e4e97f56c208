// See fault_injection_storage.h.
#include "server/storage/fault_injection_storage.h"

#include <algorithm>
#include <thread>
#include <utility>

namespace nearprep {
namespace {

constexpr char kNotFound[] = "No such file or directory";

class FaultyFile : public RandomAccessFile {
 public:
  FaultyFile(const FaultInjectionStorage* storage, std::string path,
             std::unique_ptr<RandomAccessFile> base)
      : storage_(storage), path_(std::move(path)), base_(std::move(base)) {}

  uint64_t size() const override { return base_->size(); }
  FileInfo info() const override { return base_->info(); }

  absl::Status Read(uint64_t offset, size_t n, uint8_t* dst,
                    size_t* bytes_read) const override {
    using C = FaultInjectionStorage::Counts;
    const FaultInjectionStorage::Faults f = storage_->FaultsFor(path_);
    if (f.delay.count() > 0) {
      storage_->Count(&C::slow_reads);
      std::this_thread::sleep_for(f.delay);
    }
    if (!f.read_error.ok()) {
      storage_->Count(&C::read_errors);
      return f.read_error;
    }
    if (f.short_max >= 0) {
      const uint64_t end = static_cast<uint64_t>(f.short_max);
      if (offset + n > end) {
        storage_->Count(&C::short_reads);
        n = offset >= end ? 0 : static_cast<size_t>(end - offset);
        if (n == 0) {
          *bytes_read = 0;
          return absl::OkStatus();
        }
      }
    }
    return base_->Read(offset, n, dst, bytes_read);
  }

 private:
  const FaultInjectionStorage* storage_;
  std::string path_;
  std::unique_ptr<RandomAccessFile> base_;
};

}  // namespace

constexpr char FaultInjectionStorage::kEveryFile[];

FaultInjectionStorage::FaultInjectionStorage(std::shared_ptr<const Storage> base)
    : base_(std::move(base)) {}

void FaultInjectionStorage::FailOpen(const std::string& path,
                                     absl::Status error) {
  MutexLock lock(&mu_);
  faults_[path].open_error = std::move(error);
}

void FaultInjectionStorage::FailReads(const std::string& path,
                                      absl::Status error) {
  MutexLock lock(&mu_);
  faults_[path].read_error = std::move(error);
}

void FaultInjectionStorage::ShortReads(const std::string& path,
                                       uint64_t max_bytes) {
  MutexLock lock(&mu_);
  faults_[path].short_max = static_cast<int64_t>(max_bytes);
}

void FaultInjectionStorage::SlowReads(const std::string& path,
                                      std::chrono::microseconds delay) {
  MutexLock lock(&mu_);
  faults_[path].delay = delay;
}

void FaultInjectionStorage::Vanish(const std::string& path) {
  MutexLock lock(&mu_);
  faults_[path].vanished = true;
}

void FaultInjectionStorage::Clear() {
  MutexLock lock(&mu_);
  faults_.clear();
}

FaultInjectionStorage::Counts FaultInjectionStorage::injected() const {
  MutexLock lock(&mu_);
  return counts_;
}

FaultInjectionStorage::Faults FaultInjectionStorage::FaultsFor(
    const std::string& path) const {
  MutexLock lock(&mu_);
  auto it = faults_.find(path);
  if (it == faults_.end()) it = faults_.find(kEveryFile);
  return it == faults_.end() ? Faults{} : it->second;
}

void FaultInjectionStorage::Count(uint64_t Counts::*which) const {
  MutexLock lock(&mu_);
  ++(counts_.*which);
}

bool FaultInjectionStorage::VanishedCounted(const std::string& path) const {
  if (!FaultsFor(path).vanished) return false;
  Count(&Counts::vanished);
  return true;
}

std::string FaultInjectionStorage::Describe(const std::string& path) const {
  return base_->Describe(path);
}

absl::Status FaultInjectionStorage::ListDir(
    const std::string& path, std::vector<std::string>* names) const {
  absl::Status s = base_->ListDir(path, names);
  if (!s.ok()) return s;
  const std::string prefix = path.empty() ? "" : path + "/";
  names->erase(std::remove_if(names->begin(), names->end(),
                              [&](const std::string& name) {
                                return VanishedCounted(prefix + name);
                              }),
               names->end());
  return absl::OkStatus();
}

absl::StatusOr<FileInfo> FaultInjectionStorage::Lstat(
    const std::string& path) const {
  if (VanishedCounted(path)) return absl::NotFoundError(kNotFound);
  return base_->Lstat(path);
}

absl::StatusOr<FileInfo> FaultInjectionStorage::Stat(
    const std::string& path) const {
  if (VanishedCounted(path)) return absl::NotFoundError(kNotFound);
  return base_->Stat(path);
}

absl::StatusOr<std::string> FaultInjectionStorage::Resolve(
    const std::string& path) const {
  if (VanishedCounted(path)) return absl::NotFoundError(kNotFound);
  return base_->Resolve(path);
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> FaultInjectionStorage::Open(
    const std::string& path, const OpenOptions& options) const {
  if (VanishedCounted(path)) return absl::NotFoundError(kNotFound);
  const Faults f = FaultsFor(path);
  if (!f.open_error.ok()) {
    Count(&Counts::open_errors);
    return f.open_error;
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      base_->Open(path, options);
  if (!file.ok()) return file.status();
  return std::unique_ptr<RandomAccessFile>(
      new FaultyFile(this, path, std::move(file).value()));
}

}  // namespace nearprep
