// AVX-512 version of the fused row colour kernel of preprocess.cc (this
// file is compiled with -mavx512f -mavx512dq -mavx512bw -mavx512vl; callers
// check the CPU first). Sixteen independent pixels per vector with exactly
// the per-lane arithmetic of the AVX2 kernel (preprocess_avx2_inl.h) and so
// of the scalar reference ops: the same operations in the same order, no
// FMA. Masks replace the AVX2 blends; the converted stores are the AVX2 ones
// on each half. Worth it for TF_COMPAT's exact saturation, whose HSV round
// trip is most of the row's arithmetic.
#include "server/image/preprocess_kernels.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512DQ__) && \
    defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>

#include "server/image/preprocess_avx2_inl.h"

namespace nearprep {
namespace internal {
namespace {

// HueSumDouble8 on 16 lanes.
inline __m512 HueSumDouble16(__m512 t, __mmask16 is_g) {
  const __m512d k2 = _mm512_set1_pd(2.0 / 6.0), k4 = _mm512_set1_pd(4.0 / 6.0);
  const __m512d lo = _mm512_add_pd(
      _mm512_cvtps_pd(_mm512_castps512_ps256(t)),
      _mm512_mask_blend_pd(static_cast<__mmask8>(is_g), k4, k2));
  const __m512d hi = _mm512_add_pd(
      _mm512_cvtps_pd(_mm512_extractf32x8_ps(t, 1)),
      _mm512_mask_blend_pd(static_cast<__mmask8>(is_g >> 8), k4, k2));
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)),
                            _mm512_cvtpd_ps(hi), 1);
}

// HueSum8 on 16 lanes: float(double(t) + K) in float, bracketed (see
// kHueBracket in preprocess_avx2_inl.h), else in double.
inline __m512 HueSum16(__m512 t, __mmask16 is_g) {
  const __m512 kh = _mm512_mask_blend_ps(is_g, _mm512_set1_ps(kHueK4High),
                                         _mm512_set1_ps(kHueK2High));
  const __m512 kl_lo =
      _mm512_mask_blend_ps(is_g, _mm512_set1_ps(kHueK4Low - kHueBracket),
                           _mm512_set1_ps(kHueK2Low - kHueBracket));
  const __m512 kl_hi =
      _mm512_mask_blend_ps(is_g, _mm512_set1_ps(kHueK4Low + kHueBracket),
                           _mm512_set1_ps(kHueK2Low + kHueBracket));
  const __m512 s = _mm512_add_ps(kh, t);
  const __m512 e = _mm512_sub_ps(t, _mm512_sub_ps(s, kh));
  const __m512 lo = _mm512_add_ps(s, _mm512_add_ps(e, kl_lo));
  const __m512 hi = _mm512_add_ps(s, _mm512_add_ps(e, kl_hi));
  if (_mm512_cmp_ps_mask(lo, hi, _CMP_NEQ_OQ) != 0) {
    return HueSumDouble16(t, is_g);
  }
  return lo;
}

// Saturate8 on 16 pixels, lane for lane the same operations; false if a
// lane needs the scalar path (non-finite hue).
__attribute__((always_inline)) inline bool Saturate16(__m512* pr, __m512* pg,
                                                      __m512* pb, __m512 f) {
  const __m512 zero = _mm512_setzero_ps();
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 two = _mm512_set1_ps(2.0f);
  const __m512 six = _mm512_set1_ps(6.0f);
  const __m512 r = *pr, g = *pg, b = *pb;
  const __m512 v = _mm512_max_ps(_mm512_max_ps(b, g), r);
  const __m512 mn = _mm512_min_ps(_mm512_min_ps(b, g), r);
  const __m512 range = _mm512_sub_ps(v, mn);
  // Masked-off lanes are +0, as the AVX2 `and` leaves them.
  const __m512 s = _mm512_maskz_div_ps(
      _mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ), range, v);
  const __m512 norm = _mm512_div_ps(one, _mm512_mul_ps(six, range));
  const __m512 hr = _mm512_mul_ps(norm, _mm512_sub_ps(g, b));
  const __mmask16 is_r = _mm512_cmp_ps_mask(r, v, _CMP_EQ_OQ);
  const __mmask16 is_g = _mm512_cmp_ps_mask(g, v, _CMP_EQ_OQ);
  const __m512 t =
      _mm512_mask_blend_ps(is_g, _mm512_mul_ps(norm, _mm512_sub_ps(r, g)),
                           _mm512_mul_ps(norm, _mm512_sub_ps(b, r)));
  __m512 h = _mm512_mask_blend_ps(is_r, HueSum16(t, is_g), hr);
  // range <= 0 -> +0 (a NaN range keeps h, as the AVX2 andnot does).
  h = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(range, zero, _CMP_NLE_UQ), h);
  h = _mm512_mask_add_ps(h, _mm512_cmp_ps_mask(h, zero, _CMP_LT_OQ), h, one);
  const __m512 s2 =
      _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(s, f), zero), one);
  const __m512 c = _mm512_mul_ps(s2, v);
  const __m512 m = _mm512_sub_ps(v, c);
  const __m512 dh = _mm512_mul_ps(h, six);
  const __mmask16 ok =
      _mm512_cmp_ps_mask(dh, zero, _CMP_GE_OQ) &
      _mm512_cmp_ps_mask(dh, _mm512_set1_ps(7.5f), _CMP_LT_OQ);
  if (ok != 0xFFFF) return false;
  const __m512i k = _mm512_cvttps_epi32(dh);
  const __m512 half_floor = _mm512_roundscale_ps(
      _mm512_mul_ps(dh, _mm512_set1_ps(0.5f)),
      _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 fm = _mm512_sub_ps(dh, _mm512_mul_ps(half_floor, two));
  const __m512 x = _mm512_mul_ps(
      c, _mm512_sub_ps(one, _mm512_abs_ps(_mm512_sub_ps(fm, one))));
  // By sextant k (0..7; 6 and 7 give grey), one bit per (channel, value):
  // bit 0 r=c, 1 r=x, 2 g=c, 3 g=x, 4 b=c, 5 b=x.
  const __m512i code = _mm512_permutexvar_epi32(
      k, _mm512_setr_epi32(0x09, 0x06, 0x24, 0x18, 0x12, 0x21, 0, 0, 0, 0, 0,
                           0, 0, 0, 0, 0));
  const __m512i bits = _mm512_set1_epi32(1);
  auto channel = [&](int shift) {
    const __mmask16 take_c =
        _mm512_test_epi32_mask(code, _mm512_slli_epi32(bits, shift));
    const __mmask16 take_x =
        _mm512_test_epi32_mask(code, _mm512_slli_epi32(bits, shift + 1));
    const __m512 sel = _mm512_mask_mov_ps(_mm512_maskz_mov_ps(take_x, x),
                                          take_c, c);
    return _mm512_add_ps(sel, m);
  };
  *pr = channel(0);
  *pg = channel(2);
  *pb = channel(4);
  return true;
}

// SaturateFast8 on 16 pixels (the same operations per lane).
__attribute__((always_inline)) inline void SaturateFast16(__m512* pr,
                                                          __m512* pg,
                                                          __m512* pb,
                                                          __m512 f) {
  const __m512 zero = _mm512_setzero_ps();
  const __m512 r = *pr, g = *pg, b = *pb;
  const __m512 v = _mm512_max_ps(r, _mm512_max_ps(g, b));
  const __m512 range =
      _mm512_sub_ps(v, _mm512_min_ps(r, _mm512_min_ps(g, b)));
  __m512 ratio =
      _mm512_max_ps(_mm512_min_ps(f, _mm512_div_ps(v, range)), zero);
  ratio = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ), ratio);
  *pr = _mm512_sub_ps(v, _mm512_mul_ps(_mm512_sub_ps(v, r), ratio));
  *pg = _mm512_sub_ps(v, _mm512_mul_ps(_mm512_sub_ps(v, g), ratio));
  *pb = _mm512_sub_ps(v, _mm512_mul_ps(_mm512_sub_ps(v, b), ratio));
}

template <DType kType, bool kStream = false>
int RowColorImpl(const float* lo, const float* hi, float wy, int w,
                 const RowOps& ops_in, const PackTarget& t_in) {
  // Local copies: the byte stores below may alias anything.
  const RowOps ops = ops_in;
  const PackTarget t = t_in;
  const __m512 wv = _mm512_set1_ps(wy);
  const __m512 dv = _mm512_set1_ps(ops.delta);
  const __m512 fv = _mm512_set1_ps(ops.factor);
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  const __m512 mean_r = _mm512_set1_ps(ops.mean[0]);
  const __m512 sd_r = _mm512_set1_ps(ops.std[0]);
  const __m512 mean_g = _mm512_set1_ps(ops.mean[1]);
  const __m512 sd_g = _mm512_set1_ps(ops.std[1]);
  const __m512 mean_b = _mm512_set1_ps(ops.mean[2]);
  const __m512 sd_b = _mm512_set1_ps(ops.std[2]);
  const float* lo_g = lo + w;
  const float* lo_b = lo + 2 * w;
  const float* hi_g = hi + w;
  const float* hi_b = hi + 2 * w;
  auto lerp = [wv](const float* a_row, const float* b_row) {
    const __m512 a = _mm512_loadu_ps(a_row);
    return _mm512_add_ps(
        a, _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(b_row), a), wv));
  };
  int x = 0;
  for (; x + 16 <= w; x += 16) {
    __m512 r = lerp(lo + x, hi + x);
    __m512 g = lerp(lo_g + x, hi_g + x);
    __m512 b = lerp(lo_b + x, hi_b + x);
    if (ops.brightness) {
      r = _mm512_add_ps(r, dv);
      g = _mm512_add_ps(g, dv);
      b = _mm512_add_ps(b, dv);
    }
    if (ops.saturation && ops.fast_saturation) {
      SaturateFast16(&r, &g, &b, fv);
    } else if (ops.saturation && !Saturate16(&r, &g, &b, fv)) {
      alignas(64) float px[3][16];
      _mm512_store_ps(px[0], r);
      _mm512_store_ps(px[1], g);
      _mm512_store_ps(px[2], b);
      for (int i = 0; i < 16; ++i) {
        float p[3] = {px[0][i], px[1][i], px[2][i]};
        SaturatePixel(p, ops.factor);
        for (int c = 0; c < 3; ++c) px[c][i] = p[c];
      }
      r = _mm512_load_ps(px[0]);
      g = _mm512_load_ps(px[1]);
      b = _mm512_load_ps(px[2]);
    }
    if (ops.clip) {
      r = _mm512_max_ps(_mm512_min_ps(r, one), zero);
      g = _mm512_max_ps(_mm512_min_ps(g, one), zero);
      b = _mm512_max_ps(_mm512_min_ps(b, one), zero);
    }
    if (ops.normalize) {
      r = _mm512_div_ps(_mm512_sub_ps(r, mean_r), sd_r);
      g = _mm512_div_ps(_mm512_sub_ps(g, mean_g), sd_g);
      b = _mm512_div_ps(_mm512_sub_ps(b, mean_b), sd_b);
    }
    StoreBlock<kType, kStream>(_mm512_castps512_ps256(r),
                               _mm512_castps512_ps256(g),
                               _mm512_castps512_ps256(b), x, w, t);
    StoreBlock<kType, kStream>(_mm512_extractf32x8_ps(r, 1),
                               _mm512_extractf32x8_ps(g, 1),
                               _mm512_extractf32x8_ps(b, 1), x + 8, w, t);
  }
  // A last block of 8 with the AVX2 code (same arithmetic).
  x = RowColorBlocks8<kType, kStream>(lo, hi, wy, w, ops, t, x);
  if (kStream) _mm_sfence();
  return x;
}

}  // namespace

int RowColorAvx512(const float* lo, const float* hi, float wy, int w,
                   const RowOps& ops, const PackTarget& pack) {
  switch (pack.dtype) {
    case DType::kFloat32:
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

}  // namespace internal
}  // namespace nearprep

#endif  // AVX-512 F, DQ, BW, VL
