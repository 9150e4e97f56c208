// RangeReader: how the record parsers read a shard, independent of where the
// bytes live (a storage RandomAccessFile in the daemon, a string in tests).
//
// Thread-safety: whatever the wrapped reader promises.
#ifndef NEARPREP_SERVER_RECORDS_RANGE_READER_H_
#define NEARPREP_SERVER_RECORDS_RANGE_READER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

#include "absl/status/statusor.h"

namespace nearprep::records {

// Reads up to n bytes at `offset` into dst; returns the count (fewer than n
// only at the end of the file) or an I/O error.
using RangeReader = std::function<absl::StatusOr<size_t>(
    uint64_t offset, size_t n, uint8_t* dst)>;

// A RangeReader over bytes in memory, [data, data + size), which must outlive
// it (tests, fuzz targets, and tools that hold a whole shard).
inline RangeReader MemoryRangeReader(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  return [bytes, size](uint64_t offset, size_t n,
                       uint8_t* dst) -> absl::StatusOr<size_t> {
    if (offset >= size) return size_t{0};
    const size_t k = std::min<size_t>(n, size - offset);
    std::memcpy(dst, bytes + offset, k);
    return k;
  };
}

}  // namespace nearprep::records

#endif  // NEARPREP_SERVER_RECORDS_RANGE_READER_H_
