#include "server/pipeline/buffer_pool.h"

#include <sys/mman.h>

#include <cstdlib>

namespace nearprep {
namespace {

constexpr size_t kAlign = 64;

size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Buffers at least this large are mapped and unmapped directly: freed batch
// memory then leaves the process at once. Through malloc, glibc raises its
// mmap threshold after the first such free and serves later batches from
// its heaps, which keep freed memory resident (the daemon's RSS then stayed
// ~2x the live batches after a load; issue 12).
constexpr size_t kMapBytes = size_t{256} << 10;

uint8_t* Allocate(size_t bytes) {
  if (bytes >= kMapBytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }
  return static_cast<uint8_t*>(
      std::aligned_alloc(kAlign, RoundUp(bytes == 0 ? 1 : bytes)));
}

void Free(uint8_t* p, size_t bytes) {
  if (bytes >= kMapBytes) {
    ::munmap(p, bytes);
  } else {
    std::free(p);
  }
}

}  // namespace

BufferPool::BufferPool(size_t buffer_bytes, size_t max_cached)
    : bytes_(buffer_bytes), max_cached_(max_cached) {}

BufferPool::~BufferPool() {
  for (uint8_t* p : free_) Free(p, bytes_);
}

uint8_t* BufferPool::Acquire() {
  {
    MutexLock lock(&mu_);
    if (!free_.empty()) {
      uint8_t* p = free_.back();
      free_.pop_back();
      return p;
    }
  }
  uint8_t* p = Allocate(bytes_);
  if (p == nullptr) return nullptr;
  MutexLock lock(&mu_);
  ++allocated_;
  return p;
}

void BufferPool::Release(uint8_t* buffer) {
  if (buffer == nullptr) return;
  {
    MutexLock lock(&mu_);
    if (free_.size() < max_cached_) {
      free_.push_back(buffer);
      return;
    }
    --allocated_;
  }
  Free(buffer, bytes_);
}

std::shared_ptr<void> BufferPool::Wrap(uint8_t* buffer) {
  std::shared_ptr<BufferPool> self = shared_from_this();
  return std::shared_ptr<void>(buffer, [self](void* p) {
    self->Release(static_cast<uint8_t*>(p));
  });
}

size_t BufferPool::allocated() const {
  MutexLock lock(&mu_);
  return allocated_;
}

}  // namespace nearprep
