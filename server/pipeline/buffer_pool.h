// BufferPool: fixed-size, 64-byte aligned batch buffers that are recycled.
//
// A stream owns one pool sized for its batch tensor. The pipeline takes a
// buffer, writes a batch into it once, and hands it to the consumer through
// BatchData::storage: a shared_ptr whose deleter gives the buffer back to the
// pool (or frees it when the pool already caches enough). The pool outlives
// every buffer it handed out because each deleter holds a reference to it.
// Buffers of 256 KiB or more are mmap'd and munmap'd directly, so memory
// that is neither in use nor cached is returned to the system at once.
//
// Thread-safety: all methods are thread-safe.
#ifndef NEARPREP_SERVER_PIPELINE_BUFFER_POOL_H_
#define NEARPREP_SERVER_PIPELINE_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace nearprep {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // Create with std::make_shared (Wrap needs shared_from_this).
  // `max_cached`: how many returned buffers are kept for reuse.
  BufferPool(size_t buffer_bytes, size_t max_cached);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  size_t buffer_bytes() const { return bytes_; }

  // A buffer of buffer_bytes() bytes (contents unspecified), or nullptr when
  // memory is exhausted.
  uint8_t* Acquire() ABSL_LOCKS_EXCLUDED(mu_);
  // Gives back a buffer obtained from Acquire().
  void Release(uint8_t* buffer) ABSL_LOCKS_EXCLUDED(mu_);
  // Ownership of `buffer` moves to the returned shared_ptr, whose deleter
  // calls Release.
  std::shared_ptr<void> Wrap(uint8_t* buffer);

  // Buffers currently allocated (cached or handed out), for tests.
  size_t allocated() const;

 private:
  const size_t bytes_;
  const size_t max_cached_;
  mutable Mutex mu_;
  std::vector<uint8_t*> free_ ABSL_GUARDED_BY(mu_);
  size_t allocated_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_PIPELINE_BUFFER_POOL_H_
