#include "bulk_copy.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace nearprep {

#if defined(__x86_64__)

void StreamingCopy(uint8_t* dst, const uint8_t* src, size_t n) {
  // Bring dst to a 16-byte boundary with an ordinary copy, stream whole
  // 64-byte lines (SSE2: every x86-64 CPU has it), copy the tail.
  const size_t head = std::min<size_t>(
      n, (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + i, src + i, n - i);
}

void StreamingCopyDone() { _mm_sfence(); }

#else

void StreamingCopy(uint8_t* dst, const uint8_t* src, size_t n) {
  std::memcpy(dst, src, n);
}

void StreamingCopyDone() {}

#endif

}  // namespace nearprep
