// RangeReader: how the record parsers read a shard, independent of where the
// bytes live (a storage RandomAccessFile in the daemon, a string in tests).
//
// Thread-safety: whatever the wrapped reader promises.
#ifndef NEARPREP_SERVER_RECORDS_RANGE_READER_H_
#define NEARPREP_SERVER_RECORDS_RANGE_READER_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"

namespace nearprep::records {

// Reads up to n bytes at `offset` into dst; returns the count (fewer than n
// only at the end of the file) or an I/O error.
using RangeReader = std::function<absl::StatusOr<size_t>(
    uint64_t offset, size_t n, uint8_t* dst)>;

}  // namespace nearprep::records

#endif  // NEARPREP_SERVER_RECORDS_RANGE_READER_H_
