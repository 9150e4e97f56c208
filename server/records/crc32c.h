// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) and TFRecord's
// masked form. Used to check TFRecord framing (length and data CRCs).
//
// Thread-safety: pure functions.
#ifndef NEARPREP_SERVER_RECORDS_CRC32C_H_
#define NEARPREP_SERVER_RECORDS_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace nearprep::records {

// CRC-32C of data[0..n), continuing from `crc` (0 for a fresh checksum).
// Crc32c(Crc32c(0, a), b) == Crc32c(0, a + b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) {
  return Crc32cExtend(0, data, n);
}

namespace internal {
// The table-driven path, whatever the CPU has (tests compare it with the
// hardware path).
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n);
}  // namespace internal

// TFRecord's mask: rotate right by 15 bits, then add 0xa282ead8 (a CRC of
// data that itself contains CRCs is otherwise weak).
inline uint32_t MaskCrc(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
inline uint32_t UnmaskCrc(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace nearprep::records

#endif  // NEARPREP_SERVER_RECORDS_CRC32C_H_
