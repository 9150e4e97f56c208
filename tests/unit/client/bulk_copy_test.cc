// StreamingCopy (client/cpp/src/bulk_copy.h) against memcpy's result: every
// size up to a few lines, every source and destination misalignment, and a
// large copy; the bytes around the destination stay untouched.
#include "bulk_copy.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace nearprep {
namespace {

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed);
  return v;
}

void CheckCopy(size_t n, size_t src_off, size_t dst_off) {
  const std::vector<uint8_t> src = Pattern(n + src_off, 17);
  std::vector<uint8_t> dst(n + dst_off + 64, 0xA5);
  StreamingCopy(dst.data() + dst_off, src.data() + src_off, n);
  StreamingCopyDone();
  for (size_t i = 0; i < dst_off; ++i) {
    ASSERT_EQ(dst[i], 0xA5) << "wrote before dst: n " << n << " off " << dst_off;
  }
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(dst[dst_off + i], src[src_off + i])
        << "n " << n << " src_off " << src_off << " dst_off " << dst_off << " i " << i;
  }
  for (size_t i = dst_off + n; i < dst.size(); ++i) {
    ASSERT_EQ(dst[i], 0xA5) << "wrote past dst: n " << n << " off " << dst_off;
  }
}

TEST(StreamingCopyTest, EverySizeAndAlignment) {
  for (size_t n = 0; n <= 260; ++n) {
    for (size_t src_off = 0; src_off < 17; src_off += 3) {
      for (size_t dst_off = 0; dst_off < 33; ++dst_off) {
        CheckCopy(n, src_off, dst_off);
      }
    }
  }
}

TEST(StreamingCopyTest, LargeCopies) {
  for (size_t n : {kStreamingCopyMinBytes, kStreamingCopyMinBytes + 4097}) {
    CheckCopy(n, 5, 0);
    CheckCopy(n, 0, 9);
  }
}

}  // namespace
}  // namespace nearprep
