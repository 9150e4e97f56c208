// AVX2 versions of the fused row kernels of preprocess.cc (this file is
// compiled with -mavx2; callers check the CPU first). Eight independent
// pixels per vector; the arithmetic per lane is exactly that of the scalar
// reference ops (no FMA: -ffp-contract=off and no FMA intrinsics). The
// per-block pieces are in preprocess_avx2_inl.h (the AVX-512 file uses
// them too).
#include "server/image/preprocess_kernels.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

#include "server/image/preprocess_avx2_inl.h"

namespace nearprep {
namespace internal {
namespace {

template <DType kType>
int PackRowImpl(const float* planes, int w, const PackTarget& t_in) {
  const PackTarget t = t_in;
  int x = 0;
  for (; x + 8 <= w; x += 8) {
    StoreBlock<kType>(_mm256_loadu_ps(planes + x), _mm256_loadu_ps(planes + w + x),
                      _mm256_loadu_ps(planes + 2 * w + x), x, w, t);
  }
  return x;
}


template <DType kType, bool kStream = false>
int RowColorImpl(const float* lo, const float* hi, float wy, int w,
                 const RowOps& ops, const PackTarget& t) {
  const int x = RowColorBlocks8<kType, kStream>(lo, hi, wy, w, ops, t, 0);
  if (kStream) _mm_sfence();
  return x;
}

}  // namespace

int RowColorAvx2(const float* lo, const float* hi, float wy, int w,
                 const RowOps& ops, const PackTarget& pack) {
  switch (pack.dtype) {
    case DType::kFloat32:
      // The float32 output is large and not read back here: non-temporal
      // stores save reading its cache lines first.
      if (StreamableRow(w, pack)) {
        return RowColorImpl<DType::kFloat32, true>(lo, hi, wy, w, ops, pack);
      }
      return RowColorImpl<DType::kFloat32>(lo, hi, wy, w, ops, pack);
    case DType::kFloat16:
      return RowColorImpl<DType::kFloat16>(lo, hi, wy, w, ops, pack);
    case DType::kBFloat16:
      return RowColorImpl<DType::kBFloat16>(lo, hi, wy, w, ops, pack);
    case DType::kUint8:
      return RowColorImpl<DType::kUint8>(lo, hi, wy, w, ops, pack);
  }
  return 0;
}

namespace {

// Horizontal taps of the 8 columns x..x+7: 4 bytes gathered at each tap
// offset minus `kShift` (R, G, B and one unused byte, in an order that
// depends on the shift), byte -> float times 1/255 (U8ToFloatTable's rule),
// then the lerp; channels unrolled by hand.
template <int kShift>
__attribute__((always_inline)) inline void HorizontalBlock(
    const uint8_t* row, const int32_t* x_lo, const int32_t* x_hi,
    const float* x_lerp, int x, float* dst, int w) {
  const __m256 k = _mm256_set1_ps(1.0f / 255.0f);
  // pshufb masks moving byte c + kShift of every dword to its low byte,
  // zeroing the rest.
  const __m256i pick_r = _mm256_add_epi8(
      _mm256_setr_epi8(0, -128, -128, -128, 4, -128, -128, -128, 8, -128, -128, -128,
                       12, -128, -128, -128, 0, -128, -128, -128, 4, -128, -128, -128,
                       8, -128, -128, -128, 12, -128, -128, -128),
      _mm256_set1_epi32(kShift));
  const __m256i pick_g = _mm256_add_epi8(pick_r, _mm256_set1_epi32(1));
  const __m256i pick_b = _mm256_add_epi8(pick_r, _mm256_set1_epi32(2));
  const int* base = reinterpret_cast<const int*>(row - kShift);
  const __m256i il = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x_lo + x));
  const __m256i ih = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x_hi + x));
  const __m256i gl = _mm256_i32gather_epi32(base, il, 1);
  const __m256i gh = _mm256_i32gather_epi32(base, ih, 1);
  const __m256 wx = _mm256_loadu_ps(x_lerp + x);
  auto channel = [&](__m256i shuffle, float* out) {
    const __m256 a = _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_shuffle_epi8(gl, shuffle)), k);
    const __m256 b = _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_shuffle_epi8(gh, shuffle)), k);
    _mm256_storeu_ps(out, _mm256_add_ps(a, _mm256_mul_ps(_mm256_sub_ps(b, a), wx)));
  };
  channel(pick_r, dst + x);
  channel(pick_g, dst + w + x);
  channel(pick_b, dst + 2 * w + x);
}

}  // namespace

int HorizontalRowAvx2(const uint8_t* row, const int32_t* x_lo,
                      const int32_t* x_hi, const float* x_lerp, int n,
                      float* dst, int w) {
  int x = 0;
  for (; x + 8 <= n; x += 8) {
    HorizontalBlock<0>(row, x_lo, x_hi, x_lerp, x, dst, w);
  }
  // Columns whose 4 bytes at the tap would pass the end of the row: read the
  // 4 bytes ending with the pixel instead (needs lower taps >= pixel 1, true
  // from here on when true for the first; taps are non-decreasing). The last
  // block may overlap the previous one (same values written again).
  if (x < w && w >= 8 && x_lo[std::min(x, w - 8)] > 0) {
    for (; x + 8 <= w; x += 8) {
      HorizontalBlock<1>(row, x_lo, x_hi, x_lerp, x, dst, w);
    }
    if (x < w) {
      HorizontalBlock<1>(row, x_lo, x_hi, x_lerp, w - 8, dst, w);
      x = w;
    }
  }
  return x;
}

int PackRowAvx2(const float* planes, int w, const PackTarget& pack) {
  switch (pack.dtype) {
    case DType::kFloat32:
      return PackRowImpl<DType::kFloat32>(planes, w, pack);
    case DType::kFloat16:
      return PackRowImpl<DType::kFloat16>(planes, w, pack);
    case DType::kBFloat16:
      return PackRowImpl<DType::kBFloat16>(planes, w, pack);
    case DType::kUint8:
      return PackRowImpl<DType::kUint8>(planes, w, pack);
  }
  return 0;
}

}  // namespace internal
}  // namespace nearprep

#endif  // __x86_64__ && __AVX2__
