// AVX2 passes of PIL's BILINEAR resize (pil_resample.cc; this file is
// compiled with -mavx2, callers check the CPU first). Integer arithmetic
// only, lane for lane that of the scalar code: sums start at 2^21, add
// uint8 * int32 weight products (exact: |sum| < 2^31), shift right by 22
// arithmetically, clamp to [0, 255] (packs to int16 cannot saturate after
// the shift; packus clamps).
#include "server/image/preprocess_kernels.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

#include <cstring>

#include "server/image/pil_resample.h"

namespace nearprep {
namespace internal {
namespace {

inline __m128i Load4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm_cvtsi32_si128(v);
}

inline __m128i Load8(const uint8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm_cvtsi64_si128(v);
}

}  // namespace

void PilHorizontalAvx2(const uint8_t* in, int origin, const int32_t* start,
                       const int32_t* size, const int32_t* k, int ksize,
                       int count, uint8_t* out) {
  // Two taps per step: bytes R0 G0 B0 R1 G1 B1 of pixels t, t+1 spread to
  // [R0 G0 B0 0 | R1 G1 B1 0] as int32 lanes, times [k0 x4 | k1 x4].
  const __m128i spread = _mm_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, -1, -1, -1,
                                       -1, -1, -1, -1, -1);
  const __m128i round = _mm_set1_epi32(1 << (kPilPrecisionBits - 1));
  for (int x = 0; x < count; ++x) {
    const uint8_t* p = in + static_cast<size_t>(start[x] - origin) * 3;
    const int32_t* w = k + static_cast<size_t>(x) * ksize;
    const int n = size[x];
    __m256i acc2 = _mm256_setzero_si256();
    int t = 0;
    for (; t + 2 <= n; t += 2, p += 6) {
      const __m256i px = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(Load8(p), spread));
      const __m256i wk = _mm256_setr_m128i(_mm_set1_epi32(w[t]),
                                           _mm_set1_epi32(w[t + 1]));
      acc2 = _mm256_add_epi32(acc2, _mm256_mullo_epi32(px, wk));
    }
    __m128i acc = _mm_add_epi32(
        round, _mm_add_epi32(_mm256_castsi256_si128(acc2),
                             _mm256_extracti128_si256(acc2, 1)));
    if (t < n) {
      const __m128i px = _mm_cvtepu8_epi32(Load4(p));
      acc = _mm_add_epi32(acc, _mm_mullo_epi32(px, _mm_set1_epi32(w[t])));
    }
    // Lane 3 carries the byte after the tap (times a weight): discarded.
    const __m128i s = _mm_srai_epi32(acc, kPilPrecisionBits);
    const __m128i b = _mm_packus_epi16(_mm_packs_epi32(s, s), s);
    const int32_t v = _mm_cvtsi128_si32(b);
    std::memcpy(out + 3 * static_cast<size_t>(x), &v, 3);
  }
}

size_t PilVerticalAvx2(const uint8_t* const* taps, const int32_t* k,
                       int ntaps, size_t n, uint8_t* out) {
  const __m256i round = _mm256_set1_epi32(1 << (kPilPrecisionBits - 1));
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i lo = round, hi = round;
    for (int t = 0; t < ntaps; ++t) {
      const __m128i px =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(taps[t] + i));
      const __m256i w = _mm256_set1_epi32(k[t]);
      lo = _mm256_add_epi32(lo, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(px), w));
      hi = _mm256_add_epi32(
          hi, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(px, 8)), w));
    }
    lo = _mm256_srai_epi32(lo, kPilPrecisionBits);
    hi = _mm256_srai_epi32(hi, kPilPrecisionBits);
    // packs works within 128-bit halves: lo0 hi0 | lo1 hi1 -> reorder.
    const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi),
                                                 0xD8);
    const __m128i b = _mm_packus_epi16(_mm256_castsi256_si128(w16),
                                       _mm256_extracti128_si256(w16, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), b);
  }
  for (; i + 8 <= n; i += 8) {
    __m256i acc = round;
    for (int t = 0; t < ntaps; ++t) {
      acc = _mm256_add_epi32(
          acc, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(Load8(taps[t] + i)),
                                  _mm256_set1_epi32(k[t])));
    }
    acc = _mm256_srai_epi32(acc, kPilPrecisionBits);
    const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(acc),
                                        _mm256_extracti128_si256(acc, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i),
                     _mm_packus_epi16(w16, w16));
  }
  return i;
}

}  // namespace internal
}  // namespace nearprep

#endif  // __x86_64__ && __AVX2__
