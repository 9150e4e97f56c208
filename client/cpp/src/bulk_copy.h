// Copies into a large destination that is written once and read later,
// typically by another thread (a received tensor in a pooled buffer).
//
// StreamingCopy uses non-temporal (streaming) stores on x86-64: the
// destination lines are written without being read into the cache first
// (no read-for-ownership) and without evicting the cache's working set. For
// tensors of megabytes, which are cold by the time the trainer touches them
// anyway, that is about 30 % less CPU than memcpy on this project's VM
// (docs/benchmarks.md, "Trainer CPU"). Elsewhere it is memcpy.
//
// Streaming stores are weakly ordered: call StreamingCopyDone() after the
// last StreamingCopy into a buffer and before another thread may read it.
//
// Thread-safety: pure functions.
#ifndef NEARPREP_CLIENT_CPP_SRC_BULK_COPY_H_
#define NEARPREP_CLIENT_CPP_SRC_BULK_COPY_H_

#include <cstddef>
#include <cstdint>

namespace nearprep {

// Tensors at least this large are copied with StreamingCopy.
inline constexpr size_t kStreamingCopyMinBytes = size_t{1} << 20;

// Copies n bytes from src to dst (any alignment; the ranges must not
// overlap).
void StreamingCopy(uint8_t* dst, const uint8_t* src, size_t n);

// Orders the streaming stores before whatever follows (a fence).
void StreamingCopyDone();

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_SRC_BULK_COPY_H_
