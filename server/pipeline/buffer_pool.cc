#include "server/pipeline/buffer_pool.h"

#include <cstdlib>

namespace nearprep {
namespace {

constexpr size_t kAlign = 64;

size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

BufferPool::BufferPool(size_t buffer_bytes, size_t max_cached)
    : bytes_(buffer_bytes), max_cached_(max_cached) {}

BufferPool::~BufferPool() {
  for (uint8_t* p : free_) std::free(p);
}

uint8_t* BufferPool::Acquire() {
  {
    absl::MutexLock lock(&mu_);
    if (!free_.empty()) {
      uint8_t* p = free_.back();
      free_.pop_back();
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlign, RoundUp(bytes_ == 0 ? 1 : bytes_));
  if (p == nullptr) return nullptr;
  absl::MutexLock lock(&mu_);
  ++allocated_;
  return static_cast<uint8_t*>(p);
}

void BufferPool::Release(uint8_t* buffer) {
  if (buffer == nullptr) return;
  {
    absl::MutexLock lock(&mu_);
    if (free_.size() < max_cached_) {
      free_.push_back(buffer);
      return;
    }
    --allocated_;
  }
  std::free(buffer);
}

std::shared_ptr<void> BufferPool::Wrap(uint8_t* buffer) {
  std::shared_ptr<BufferPool> self = shared_from_this();
  return std::shared_ptr<void>(buffer, [self](void* p) {
    self->Release(static_cast<uint8_t*>(p));
  });
}

size_t BufferPool::allocated() const {
  absl::MutexLock lock(&mu_);
  return allocated_;
}

}  // namespace nearprep
