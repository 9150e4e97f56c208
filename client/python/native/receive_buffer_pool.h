// A small pool of page-aligned, optionally page-locked (mlock) buffers that
// the native receive path copies batches into, reused from batch to batch.
//
// Why reuse: a fresh 19 MB buffer (a float32 batch of 32 224x224 images)
// costs ~4,700 page faults on first touch, a measurable share of the
// trainer's CPU per image; a recycled one costs none. Why page-aligned and
// locked: DMA engines (a GPU copying a batch to device memory) need resident
// pages; mlock keeps them resident. Note that mlock alone does not make
// memory "pinned" for CUDA: cudaMemcpyAsync from a host buffer is only
// asynchronous when the buffer was allocated or registered with CUDA
// (cudaHostAlloc / cudaHostRegister). A caller with CUDA can register each
// buffer once (they are reused, so the cost is paid once per buffer).
// mlock is limited by RLIMIT_MEMLOCK (often 8 MB for unprivileged users):
// a buffer that cannot be locked is used unlocked and counted in
// Stats::lock_failures, never an error.
//
// Thread-safety: every method is thread-safe; a Block may be destroyed on
// any thread (it returns itself to the pool, which it keeps alive).
#ifndef NEARPREP_CLIENT_PYTHON_NATIVE_RECEIVE_BUFFER_POOL_H_
#define NEARPREP_CLIENT_PYTHON_NATIVE_RECEIVE_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace nearprep {

class ReceiveBufferPool : public std::enable_shared_from_this<ReceiveBufferPool> {
 public:
  struct Options {
    // Free buffers kept for reuse; more are unmapped when released.
    size_t max_free = 4;
    // mlock every new buffer (best effort, see above).
    bool lock = false;
  };
  struct Stats {
    uint64_t allocated = 0;      // buffers mapped
    uint64_t reused = 0;         // Acquire() served from the free list
    uint64_t released = 0;       // buffers unmapped
    uint64_t lock_failures = 0;  // mlock refused (RLIMIT_MEMLOCK, ...)
    uint64_t locked_bytes = 0;   // bytes currently locked
    uint64_t free_buffers = 0;   // buffers currently waiting for reuse
  };

  // A page-aligned buffer of at least size() bytes.
  class Block {
   public:
    ~Block();
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;
    uint8_t* data() const { return data_; }
    // The size asked for (the mapping may be larger: capacity()).
    size_t size() const { return size_; }
    size_t capacity() const { return capacity_; }
    bool locked() const { return locked_; }

   private:
    friend class ReceiveBufferPool;
    Block(std::shared_ptr<ReceiveBufferPool> pool, uint8_t* data, size_t size,
          size_t capacity, bool locked)
        : pool_(std::move(pool)), data_(data), size_(size),
          capacity_(capacity), locked_(locked) {}
    std::shared_ptr<ReceiveBufferPool> pool_;
    uint8_t* data_;
    size_t size_;
    size_t capacity_;
    bool locked_;
  };

  static std::shared_ptr<ReceiveBufferPool> Create(Options options);
  ~ReceiveBufferPool();

  // A buffer of `bytes` bytes (> 0): the smallest free one whose capacity
  // fits, else a new mapping. nullptr if mmap fails.
  std::unique_ptr<Block> Acquire(size_t bytes);
  Stats stats() const;
  const Options& options() const { return options_; }

 private:
  struct Mapping {
    uint8_t* data;
    size_t capacity;
    bool locked;
  };
  explicit ReceiveBufferPool(Options options) : options_(options) {}
  void Release(Mapping m);
  void Unmap(const Mapping& m);  // requires mu_

  const Options options_;
  mutable std::mutex mu_;
  std::vector<Mapping> free_;  // guarded by mu_
  Stats stats_;                // guarded by mu_
};

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_PYTHON_NATIVE_RECEIVE_BUFFER_POOL_H_
