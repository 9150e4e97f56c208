// Inline AVX2 pieces of the fused row kernels, shared by preprocess_avx2.cc
// (compiled with -mavx2) and preprocess_avx512.cc (-mavx512f and friends),
// whose callers check the CPU first. Eight independent pixels per vector;
// the arithmetic per lane is exactly that of the scalar reference ops (no
// FMA: -ffp-contract=off and no FMA intrinsics).
//
// Everything here has internal linkage (an anonymous namespace) on purpose:
// the two files are compiled for different instruction sets, and one
// shared (ODR-merged) definition of an inline function could be the copy
// with AVX-512 instructions, picked by the linker for the AVX2 file too.
// Include only from those two files.
#ifndef NEARPREP_SERVER_IMAGE_PREPROCESS_AVX2_INL_H_
#define NEARPREP_SERVER_IMAGE_PREPROCESS_AVX2_INL_H_

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "server/image/preprocess_kernels.h"
#include "server/image/tf_ops_internal.h"

namespace nearprep {
namespace internal {
namespace {

// TensorFlow's hue sum for a lane whose maximum is g or b:
// float(double(t) + K), K = 2/6 or 4/6 as doubles (RgbToHsv in tf_ops.cc),
// computed in float. K = kh + kl + kll exactly (kh = float(K), kl =
// float(K - kh), |kll| < 2^-50). For |t| < 1/4, Fast2Sum gives t + kh = s +
// e exactly (|kh| >= 1/3 > |t|), s < 1 so |e| <= 2^-25, and then
//   lo = float(s + float(e + (kl - E))),  hi = float(s + float(e + (kl + E)))
// with E = 2^-44 (kl -+ E are exact floats) bracket the double sum D =
// double(t) + K: each inner rounding is off by at most 2^-49, |kll| <
// 2^-50 and |D - (t + K)| <= 2^-54, so s + float(e + kl - E) < D < s +
// float(e + kl + E). Rounding to float is monotonic, so lo == hi means
// float(D) == lo. lo != hi (a midpoint between floats within about 2^-44
// of D; random inputs hit that about once in 2^19) sends the whole vector
// to the double computation. |t| < 1/4 always holds for finite t: |t| =
// |norm * d| with |d| <= range and norm = float(1 / float(6 * range)),
// so |t| <= 1/6 * (1 + 2^-21); a non-finite t gives NaN in lo and hi (no
// fallback), and such a lane leaves the vector path later (non-finite hue)
// unless its hue is not used (grey pixels, or r the maximum).
constexpr float kHueK2High = 0x1.555556p-2f;   // float(2/6)
constexpr float kHueK2Low = -0x1.555556p-27f;  // float(2/6 - kHueK2High)
constexpr float kHueK4High = 0x1.555556p-1f;   // float(4/6)
constexpr float kHueK4Low = -0x1.555556p-26f;  // float(4/6 - kHueK4High)
constexpr float kHueBracket = 0x1p-44f;        // E above

inline __m256 Sel(__m256 mask, __m256 a, __m256 b) {  // mask ? a : b
  return _mm256_blendv_ps(b, a, mask);
}

// float(double(t) + (is_g ? 2/6 : 4/6)) per lane, in double.
inline __m256 HueSumDouble8(__m256 t, __m256 is_g) {
  const __m256i kmask = _mm256_castps_si256(is_g);
  const __m256d k2 = _mm256_set1_pd(2.0 / 6.0), k4 = _mm256_set1_pd(4.0 / 6.0);
  const __m256d klo = _mm256_blendv_pd(
      k4, k2, _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(kmask))));
  const __m256d khi = _mm256_blendv_pd(
      k4, k2, _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_extracti128_si256(kmask, 1))));
  const __m256d tlo = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(t)), klo);
  const __m256d thi = _mm256_add_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(t, 1)), khi);
  return _mm256_set_m128(_mm256_cvtpd_ps(thi), _mm256_cvtpd_ps(tlo));
}

// The same in float (see kHueBracket), falling back to HueSumDouble8.
// is_g: all-ones lanes where g is the maximum.
inline __m256 HueSum8(__m256 t, __m256 is_g) {
  const __m256 kh =
      Sel(is_g, _mm256_set1_ps(kHueK2High), _mm256_set1_ps(kHueK4High));
  const __m256 kl_lo = Sel(is_g, _mm256_set1_ps(kHueK2Low - kHueBracket),
                           _mm256_set1_ps(kHueK4Low - kHueBracket));
  const __m256 kl_hi = Sel(is_g, _mm256_set1_ps(kHueK2Low + kHueBracket),
                           _mm256_set1_ps(kHueK4Low + kHueBracket));
  const __m256 s = _mm256_add_ps(kh, t);
  const __m256 e = _mm256_sub_ps(t, _mm256_sub_ps(s, kh));
  const __m256 lo = _mm256_add_ps(s, _mm256_add_ps(e, kl_lo));
  const __m256 hi = _mm256_add_ps(s, _mm256_add_ps(e, kl_hi));
  if (_mm256_movemask_ps(_mm256_cmp_ps(lo, hi, _CMP_NEQ_OQ)) != 0) {
    return HueSumDouble8(t, is_g);
  }
  return lo;
}

// TensorFlow's adjust_saturation on 8 pixels; false if a lane needs the
// scalar path (non-finite hue).
__attribute__((always_inline)) inline bool Saturate8(__m256* pr, __m256* pg, __m256* pb, __m256 f) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 two = _mm256_set1_ps(2.0f);
  const __m256 six = _mm256_set1_ps(6.0f);
  const __m256 r = *pr, g = *pg, b = *pb;
  const __m256 v = _mm256_max_ps(_mm256_max_ps(b, g), r);
  const __m256 mn = _mm256_min_ps(_mm256_min_ps(b, g), r);
  const __m256 range = _mm256_sub_ps(v, mn);
  const __m256 s = _mm256_and_ps(_mm256_cmp_ps(v, zero, _CMP_GT_OQ),
                                 _mm256_div_ps(range, v));
  const __m256 norm = _mm256_div_ps(one, _mm256_mul_ps(six, range));
  const __m256 hr = _mm256_mul_ps(norm, _mm256_sub_ps(g, b));
  const __m256 is_r = _mm256_cmp_ps(r, v, _CMP_EQ_OQ);
  const __m256 is_g = _mm256_cmp_ps(g, v, _CMP_EQ_OQ);
  // Only one of the two hue sums is needed per lane: pick the float
  // product first, then add the matching constant.
  const __m256 t = Sel(is_g, _mm256_mul_ps(norm, _mm256_sub_ps(b, r)),
                       _mm256_mul_ps(norm, _mm256_sub_ps(r, g)));
  const __m256 hgb = HueSum8(t, is_g);
  __m256 h = Sel(is_r, hr, hgb);
  h = _mm256_andnot_ps(_mm256_cmp_ps(range, zero, _CMP_LE_OQ), h);
  h = Sel(_mm256_cmp_ps(h, zero, _CMP_LT_OQ), _mm256_add_ps(h, one), h);
  const __m256 s2 =
      _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(s, f), zero), one);
  const __m256 c = _mm256_mul_ps(s2, v);
  const __m256 m = _mm256_sub_ps(v, c);
  const __m256 dh = _mm256_mul_ps(h, six);
  // For finite input h is in [0, 1] (or -0), so dh is in [-0, 6]; other
  // lanes take the scalar path. There the wrap loop of HsvToRgb (add 2 while
  // <= 0, subtract 2 while >= 2) gives dh - 2*floor(dh/2): each subtraction
  // of 2 is exact (Sterbenz) and the result is the unique value in [0, 2)
  // (dh = +-0 gives +0 either way). dh * 0.5 is exact, so one floor does it.
  const __m256 ok = _mm256_and_ps(_mm256_cmp_ps(dh, zero, _CMP_GE_OQ),
                                  _mm256_cmp_ps(dh, _mm256_set1_ps(7.5f), _CMP_LT_OQ));
  if (_mm256_movemask_ps(ok) != 0xFF) return false;
  const __m256i k = _mm256_cvttps_epi32(dh);
  const __m256 half_floor = _mm256_round_ps(
      _mm256_mul_ps(dh, _mm256_set1_ps(0.5f)), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m256 fm = _mm256_sub_ps(dh, _mm256_mul_ps(half_floor, two));
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 x = _mm256_mul_ps(
      c, _mm256_sub_ps(one, _mm256_andnot_ps(sign, _mm256_sub_ps(fm, one))));
  // By sextant k (0..7; 6 and 7 give grey): which channels take c and x.
  auto pick = [&k](int k0, int k1) {
    int v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    v[k0] = v[k1] = -1;
    return _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(
        _mm256_setr_epi32(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]), k));
  };
  const __m256 rr = _mm256_or_ps(_mm256_and_ps(pick(0, 5), c),
                                 _mm256_and_ps(pick(1, 4), x));
  const __m256 gg = _mm256_or_ps(_mm256_and_ps(pick(1, 2), c),
                                 _mm256_and_ps(pick(0, 3), x));
  const __m256 bb = _mm256_or_ps(_mm256_and_ps(pick(3, 4), c),
                                 _mm256_and_ps(pick(2, 5), x));
  *pr = _mm256_add_ps(rr, m);
  *pg = _mm256_add_ps(gg, m);
  *pb = _mm256_add_ps(bb, m);
  return true;
}

// Three vectors of 8 per-channel 32-bit values -> 24 interleaved values
// a0 b0 c0 a1 b1 c1 ... in o[0..2].
inline void Interleave3(__m256i a, __m256i b, __m256i c, __m256i o[3]) {
  const __m256i i0 = _mm256_setr_epi32(0, 0, 0, 1, 1, 1, 2, 2);
  const __m256i i1 = _mm256_setr_epi32(2, 3, 3, 3, 4, 4, 4, 5);
  const __m256i i2 = _mm256_setr_epi32(5, 5, 6, 6, 6, 7, 7, 7);
  // Position p of o[0] takes a, b, c for p % 3 = 0, 1, 2; o[1] starts with c,
  // o[2] with b.
  __m256i pa = _mm256_permutevar8x32_epi32(a, i0);
  __m256i pb = _mm256_permutevar8x32_epi32(b, i0);
  __m256i pc = _mm256_permutevar8x32_epi32(c, i0);
  o[0] = _mm256_blend_epi32(_mm256_blend_epi32(pa, pb, 0x92), pc, 0x24);
  pa = _mm256_permutevar8x32_epi32(a, i1);
  pb = _mm256_permutevar8x32_epi32(b, i1);
  pc = _mm256_permutevar8x32_epi32(c, i1);
  o[1] = _mm256_blend_epi32(_mm256_blend_epi32(pa, pb, 0x24), pc, 0x49);
  pa = _mm256_permutevar8x32_epi32(a, i2);
  pb = _mm256_permutevar8x32_epi32(b, i2);
  pc = _mm256_permutevar8x32_epi32(c, i2);
  o[2] = _mm256_blend_epi32(_mm256_blend_epi32(pa, pb, 0x49), pc, 0x92);
}

// FloatToU8 per lane (result in the low byte of each 32-bit lane).
inline __m256i ToU8(__m256 v) {
  // min(1, v) keeps NaN (1 < NaN is false); max(c, 0) maps NaN to 0, as the
  // scalar code does.
  const __m256 c = _mm256_max_ps(_mm256_min_ps(_mm256_set1_ps(1.0f), v),
                                 _mm256_setzero_ps());
  const __m256 s = _mm256_mul_ps(c, _mm256_set1_ps(255.0f));
  const __m256i t = _mm256_cvttps_epi32(s);
  const __m256 frac = _mm256_sub_ps(s, _mm256_cvtepi32_ps(t));
  const __m256i up = _mm256_castps_si256(
      _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ));
  return _mm256_sub_epi32(t, up);  // up is -1 where rounding up.
}

// FloatToHalf per lane (result in the low 16 bits of each 32-bit lane).
inline __m256i ToHalf(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(x, 16),
                                        _mm256_set1_epi32(0x8000));
  const __m256i a = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  // Normal: rebias and round to nearest even.
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, 13), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(static_cast<int>(0xc8000fffu))),
                       odd),
      13);
  // Subnormal or zero: the float adder rounds at 2^-24.
  const __m256 shifted = _mm256_add_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(0.5f));
  const __m256i sub = _mm256_sub_epi32(_mm256_castps_si256(shifted),
                                       _mm256_set1_epi32(0x3f000000));
  const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x38800000), a);
  r = _mm256_blendv_epi8(r, sub, is_sub);
  // >= 65536 (and infinity): infinity; NaN: quiet NaN.
  const __m256i big = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x477fffff));
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7c00), big);
  const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7e00), nan);
  return _mm256_or_si256(r, sign);
}

// FloatToBFloat16 per lane (low 16 bits of each 32-bit lane).
inline __m256i ToBFloat16(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i hi = _mm256_srli_epi32(x, 16);
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)),
                       _mm256_and_si256(hi, _mm256_set1_epi32(1))),
      16);
  const __m256i nan = _mm256_cmpgt_epi32(
      _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
      _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)),
                           nan);
}

// Stores 8 32-bit lanes as 8 elements of `esize` bytes (values fit).
// kStream: non-temporal store (esize 4 only, p 32-byte aligned).
template <bool kStream = false>
inline void Store8(__m256i v, size_t esize, uint8_t* p) {
  if (esize == 4 && kStream) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v);
  } else if (esize == 4) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  } else if (esize == 2) {
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  } else {
    const __m256i w16 = _mm256_packus_epi32(v, v);
    const __m256i b8 = _mm256_packus_epi16(w16, w16);
    const __m256i both = _mm256_permutevar8x32_epi32(b8, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(both));
  }
}

template <DType kType>
inline __m256i Convert(__m256 v) {
  if (kType == DType::kFloat32) return _mm256_castps_si256(v);
  if (kType == DType::kUint8) return ToU8(v);
  if (kType == DType::kFloat16) return ToHalf(v);
  return ToBFloat16(v);
}

// Stores the 8 pixels ch[0..2] (source columns x..x+7) of the output row.
// kStream (float32 only): non-temporal stores; the caller has checked that
// every block's address is 32-byte aligned.
template <DType kType, bool kStream = false>
__attribute__((always_inline)) inline void StoreBlock(__m256 r, __m256 g, __m256 b, int x, int w,
                       const PackTarget& t) {
  const size_t esize = DTypeSize(kType);
  int xo = x;
  if (t.flip) {
    const __m256i reverse = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    r = _mm256_permutevar8x32_ps(r, reverse);
    g = _mm256_permutevar8x32_ps(g, reverse);
    b = _mm256_permutevar8x32_ps(b, reverse);
    xo = w - 8 - x;
  }
  const __m256i cr = Convert<kType>(r), cg = Convert<kType>(g),
                cb = Convert<kType>(b);
  if (kType == DType::kUint8 && t.layout == Layout::kNHWC) {
    // Bytes first, then one in-lane byte shuffle: per 128-bit lane
    // r0..r3 g0..g3 b0..b3 -> r0 g0 b0 r1 g1 b1 ... (12 bytes).
    const __m256i bytes = _mm256_packus_epi16(_mm256_packus_epi32(cr, cg),
                                              _mm256_packus_epi32(cb, cb));
    const __m256i order = _mm256_setr_epi8(
        0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, -128, -128, -128, -128,
        0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, -128, -128, -128, -128);
    const __m256i packed = _mm256_permutevar8x32_epi32(
        _mm256_shuffle_epi8(bytes, order), _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7));
    uint8_t* p = t.dst[0] + static_cast<size_t>(xo) * 3;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p + 16),
                     _mm256_extracti128_si256(packed, 1));
  } else if (t.layout == Layout::kNHWC) {
    __m256i o[3];
    Interleave3(cr, cg, cb, o);
    uint8_t* p = t.dst[0] + static_cast<size_t>(xo) * 3 * esize;
    Store8<kStream>(o[0], esize, p);
    Store8<kStream>(o[1], esize, p + 8 * esize);
    Store8<kStream>(o[2], esize, p + 16 * esize);
  } else {
    Store8<kStream>(cr, esize, t.dst[0] + static_cast<size_t>(xo) * esize);
    Store8<kStream>(cg, esize, t.dst[1] + static_cast<size_t>(xo) * esize);
    Store8<kStream>(cb, esize, t.dst[2] + static_cast<size_t>(xo) * esize);
  }
}

// SaturateFastPixel on 8 pixels.
__attribute__((always_inline)) inline void SaturateFast8(__m256* pr, __m256* pg,
                                                          __m256* pb, __m256 f) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 r = *pr, g = *pg, b = *pb;
  const __m256 v = _mm256_max_ps(r, _mm256_max_ps(g, b));
  const __m256 range = _mm256_sub_ps(v, _mm256_min_ps(r, _mm256_min_ps(g, b)));
  __m256 ratio = _mm256_max_ps(_mm256_min_ps(f, _mm256_div_ps(v, range)), zero);
  ratio = _mm256_and_ps(_mm256_cmp_ps(v, zero, _CMP_GT_OQ), ratio);
  *pr = _mm256_sub_ps(v, _mm256_mul_ps(_mm256_sub_ps(v, r), ratio));
  *pg = _mm256_sub_ps(v, _mm256_mul_ps(_mm256_sub_ps(v, g), ratio));
  *pb = _mm256_sub_ps(v, _mm256_mul_ps(_mm256_sub_ps(v, b), ratio));
}

// lerp, brightness, saturation, clip, normalize and the store for the
// 8-column blocks of [x0, w); returns the end of the last block. With
// kStream the caller issues the store fence.
template <DType kType, bool kStream = false>
int RowColorBlocks8(const float* lo, const float* hi, float wy, int w,
                    const RowOps& ops_in, const PackTarget& t_in, int x0) {
  // Local copies: the byte stores below may alias anything, which would
  // make the compiler reload every field after each store.
  const RowOps ops = ops_in;
  const PackTarget t = t_in;
  const __m256 wv = _mm256_set1_ps(wy);
  const __m256 dv = _mm256_set1_ps(ops.delta);
  const __m256 fv = _mm256_set1_ps(ops.factor);
  const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
  const __m256 mean_r = _mm256_set1_ps(ops.mean[0]), sd_r = _mm256_set1_ps(ops.std[0]);
  const __m256 mean_g = _mm256_set1_ps(ops.mean[1]), sd_g = _mm256_set1_ps(ops.std[1]);
  const __m256 mean_b = _mm256_set1_ps(ops.mean[2]), sd_b = _mm256_set1_ps(ops.std[2]);
  const float* lo_g = lo + w;
  const float* lo_b = lo + 2 * w;
  const float* hi_g = hi + w;
  const float* hi_b = hi + 2 * w;
  // Channels in separate variables (not an array) so that they stay in
  // registers.
  auto lerp = [wv](const float* a_row, const float* b_row) {
    const __m256 a = _mm256_loadu_ps(a_row);
    return _mm256_add_ps(a, _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(b_row), a), wv));
  };
  int x = x0;
  for (; x + 8 <= w; x += 8) {
    __m256 r = lerp(lo + x, hi + x);
    __m256 g = lerp(lo_g + x, hi_g + x);
    __m256 b = lerp(lo_b + x, hi_b + x);
    if (ops.brightness) {
      r = _mm256_add_ps(r, dv);
      g = _mm256_add_ps(g, dv);
      b = _mm256_add_ps(b, dv);
    }
    if (ops.saturation && ops.fast_saturation) {
      SaturateFast8(&r, &g, &b, fv);
    } else if (ops.saturation && !Saturate8(&r, &g, &b, fv)) {
      float px[3][8];
      _mm256_storeu_ps(px[0], r);
      _mm256_storeu_ps(px[1], g);
      _mm256_storeu_ps(px[2], b);
      for (int i = 0; i < 8; ++i) {
        float p[3] = {px[0][i], px[1][i], px[2][i]};
        SaturatePixel(p, ops.factor);
        for (int c = 0; c < 3; ++c) px[c][i] = p[c];
      }
      r = _mm256_loadu_ps(px[0]);
      g = _mm256_loadu_ps(px[1]);
      b = _mm256_loadu_ps(px[2]);
    }
    if (ops.clip) {
      r = _mm256_max_ps(_mm256_min_ps(r, one), zero);
      g = _mm256_max_ps(_mm256_min_ps(g, one), zero);
      b = _mm256_max_ps(_mm256_min_ps(b, one), zero);
    }
    if (ops.normalize) {
      r = _mm256_div_ps(_mm256_sub_ps(r, mean_r), sd_r);
      g = _mm256_div_ps(_mm256_sub_ps(g, mean_g), sd_g);
      b = _mm256_div_ps(_mm256_sub_ps(b, mean_b), sd_b);
    }
    StoreBlock<kType, kStream>(r, g, b, x, w, t);
  }
  return x;
}


// True when every 8-column block of the float32 row `t` would be stored at
// a 32-byte aligned address (blocks are 32 or 96 bytes apart).
inline bool StreamableRow(int w, const PackTarget& t) {
  if (w < 8) return false;
  const size_t xo = t.flip ? static_cast<size_t>(w - 8) : 0;
  if (t.layout == Layout::kNHWC) {
    return (reinterpret_cast<uintptr_t>(t.dst[0] + xo * 12) & 31) == 0;
  }
  for (int c = 0; c < 3; ++c) {
    if ((reinterpret_cast<uintptr_t>(t.dst[c] + xo * 4) & 31) != 0) return false;
  }
  return true;
}

}  // namespace
}  // namespace internal
}  // namespace nearprep

#endif  // __x86_64__ && __AVX2__
#endif  // NEARPREP_SERVER_IMAGE_PREPROCESS_AVX2_INL_H_
