#include "receive_buffer_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace nearprep {
namespace {

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

ReceiveBufferPool::Block::~Block() {
  pool_->Release(Mapping{data_, capacity_, locked_});
}

std::shared_ptr<ReceiveBufferPool> ReceiveBufferPool::Create(Options options) {
  return std::shared_ptr<ReceiveBufferPool>(new ReceiveBufferPool(options));
}

ReceiveBufferPool::~ReceiveBufferPool() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Mapping& m : free_) Unmap(m);
  free_.clear();
}

std::unique_ptr<ReceiveBufferPool::Block> ReceiveBufferPool::Acquire(size_t bytes) {
  if (bytes == 0) return nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The smallest free buffer that fits. A bigger one costs nothing: its
    // pages are resident already, while a new mapping for the epoch's short
    // last batch would be faulted in page by page (and dropped again).
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->capacity >= bytes &&
          (best == free_.end() || it->capacity < best->capacity)) {
        best = it;
      }
    }
    if (best != free_.end()) {
      const Mapping m = *best;
      free_.erase(best);
      ++stats_.reused;
      stats_.free_buffers = free_.size();
      return std::unique_ptr<Block>(
          new Block(shared_from_this(), m.data, bytes, m.capacity, m.locked));
    }
  }
  const size_t page = PageSize();
  const size_t capacity = (bytes + page - 1) / page * page;
  void* p = mmap(nullptr, capacity, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  bool locked = false;
  if (options_.lock) locked = mlock(p, capacity) == 0;
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.allocated;
  if (options_.lock && !locked) ++stats_.lock_failures;
  if (locked) stats_.locked_bytes += capacity;
  return std::unique_ptr<Block>(new Block(
      shared_from_this(), static_cast<uint8_t*>(p), bytes, capacity, locked));
}

void ReceiveBufferPool::Release(Mapping m) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(m);
  if (free_.size() > options_.max_free) {
    // Drop the smallest: the big ones are the expensive ones to fault in.
    auto smallest = std::min_element(
        free_.begin(), free_.end(), [](const Mapping& a, const Mapping& b) {
          return a.capacity < b.capacity;
        });
    Unmap(*smallest);
    free_.erase(smallest);
  }
  stats_.free_buffers = free_.size();
}

void ReceiveBufferPool::Unmap(const Mapping& m) {
  if (m.locked) stats_.locked_bytes -= m.capacity;
  munmap(m.data, m.capacity);  // Also unlocks.
  ++stats_.released;
}

ReceiveBufferPool::Stats ReceiveBufferPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace nearprep
