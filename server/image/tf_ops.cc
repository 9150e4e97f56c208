// Scalar reference implementations of TensorFlow's float image ops. They
// define TF_COMPAT semantics; the fused fast path in preprocess.cc must
// reproduce them bit for bit (tests/unit/image checks that it does).
#include "server/image/tf_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "server/image/tf_ops_internal.h"

namespace nearprep {
namespace internal {

const float* U8ToFloatTable() {
  static const struct Table {
    float v[256];
    Table() {
      for (int i = 0; i < 256; ++i) {
        v[i] = static_cast<float>(i) * (1.0f / 255.0f);
      }
    }
  } table;
  return table.v;
}

void ComputeInterpolation(int out_size, int in_size, std::vector<Tap>* taps) {
  taps->resize(out_size);
  const float scale =
      static_cast<float>(in_size) / static_cast<float>(out_size);
  for (int i = 0; i < out_size; ++i) {
    const float src = (static_cast<float>(i) + 0.5f) * scale - 0.5f;
    const float src_floor = std::floor(src);
    Tap& t = (*taps)[i];
    t.lower = std::max(static_cast<int64_t>(src_floor), int64_t{0});
    t.upper = std::min(static_cast<int64_t>(std::ceil(src)),
                       static_cast<int64_t>(in_size) - 1);
    t.lerp = src - src_floor;
  }
}

void RgbToHsv(float r, float g, float b, float* h, float* s, float* v) {
  const float vv = std::max(r, std::max(g, b));
  const float range = vv - std::min(r, std::min(g, b));
  *s = vv > 0 ? range / vv : 0.0f;
  const float norm = 1.0f / (6.0f * range);
  float hh;
  // The 2/6 and 4/6 constants are doubles in TensorFlow: the sum is formed
  // in double and rounded to float once.
  if (r == vv) {
    hh = norm * (g - b);
  } else if (g == vv) {
    hh = static_cast<float>(static_cast<double>(norm * (b - r)) + 2.0 / 6.0);
  } else {
    hh = static_cast<float>(static_cast<double>(norm * (r - g)) + 4.0 / 6.0);
  }
  if (range <= 0.0f) hh = 0;
  if (hh < 0.0f) hh = hh + 1;
  *v = vv;
  *h = hh;
}

void HsvToRgb(float h, float s, float v, float* r, float* g, float* b) {
  const float c = s * v;
  const float m = v - c;
  const float dh = h * 6;
  // int(dh) is undefined for NaN/huge values in C++; such hues fall in
  // TensorFlow's default (grey) branch on x86, so map them there.
  int sextant = 6;
  if (dh > -2147483648.0f && dh < 2147483648.0f) {
    sextant = static_cast<int>(dh);
  }
  float fmodu = dh;
  if (std::isfinite(fmodu)) {
    while (fmodu <= 0) fmodu += 2.0f;
    while (fmodu >= 2.0f) fmodu -= 2.0f;
  }
  const float x = c * (1 - std::abs(fmodu - 1));
  float rr, gg, bb;
  switch (sextant) {
    case 0: rr = c; gg = x; bb = 0; break;
    case 1: rr = x; gg = c; bb = 0; break;
    case 2: rr = 0; gg = c; bb = x; break;
    case 3: rr = 0; gg = x; bb = c; break;
    case 4: rr = x; gg = 0; bb = c; break;
    case 5: rr = c; gg = 0; bb = x; break;
    default: rr = 0; gg = 0; bb = 0; break;
  }
  *r = rr + m;
  *g = gg + m;
  *b = bb + m;
}

void SaturatePixel(float* p, float factor) {
  float h, s, v;
  RgbToHsv(p[0], p[1], p[2], &h, &s, &v);
  s = std::min(1.0f, std::max(0.0f, s * factor));
  HsvToRgb(h, s, v, p, p + 1, p + 2);
}

void HuePixel(float* p, float delta) {
  const float r = p[0], g = p[1], b = p[2];
  // The sextant (0..5) of the colour wheel, from the channel order; ties go
  // the way the kernel's comparisons send them.
  int sextant;
  float hi, mid, lo;
  if (r < g) {
    if (b < r) {
      sextant = 1; hi = g; mid = r; lo = b;
    } else if (b > g) {
      sextant = 3; hi = b; mid = g; lo = r;
    } else {
      sextant = 2; hi = g; mid = b; lo = r;
    }
  } else if (b < g) {
    sextant = 0; hi = r; mid = g; lo = b;
  } else if (b > r) {
    sextant = 4; hi = b; mid = r; lo = g;
  } else {
    sextant = 5; hi = r; mid = b; lo = g;
  }
  float hue = 0.0f;
  if (hi != lo) {
    const float t = (mid - lo) / (hi - lo);
    hue = static_cast<float>(sextant) + ((sextant & 1) == 0 ? t : 1 - t);
  }
  hue = hue + delta * 6.0f;
  // Wrap into [0, 6) by repeated steps, as the kernel does (exact here: the
  // hue is within a step or two of the range). Non-finite hues skip it (the
  // kernel would loop forever on an infinity).
  if (std::isfinite(hue)) {
    while (hue < 0.0f) hue = hue + 6.0f;
    while (hue >= 6.0f) hue = hue - 6.0f;
  }
  // int(NaN) is INT_MIN on x86 (the kernel's value): even, default case.
  const int k = std::isfinite(hue) ? static_cast<int>(hue) : INT32_MIN;
  float t = hue - static_cast<float>(k);
  if ((k & 1) != 0) t = 1 - t;
  const float m = lo + t * (hi - lo);
  switch (k) {
    case 0: p[0] = hi; p[1] = m; p[2] = lo; break;
    case 1: p[0] = m; p[1] = hi; p[2] = lo; break;
    case 2: p[0] = lo; p[1] = hi; p[2] = m; break;
    case 3: p[0] = lo; p[1] = m; p[2] = hi; break;
    case 4: p[0] = m; p[1] = lo; p[2] = hi; break;
    default: p[0] = hi; p[1] = lo; p[2] = m; break;
  }
}

}  // namespace internal

namespace {

// Eigen's float pow, written out per lane. Every operation below is one
// IEEE float32 operation (this file is built with -ffp-contract=off);
// MulAdd is Eigen's pmadd on a CPU without FMA (TensorFlow's x86 wheels are
// built for AVX without FMA): a rounded product, then a rounded sum.
//
// The functions are templates on the value type V: float, or F4 (GCC/Clang
// vector extensions: 4 float lanes, SSE2, each operation lane-wise with the
// same IEEE rounding), so the scalar and the vector path are one text.
typedef float F4 __attribute__((vector_size(16)));
typedef int32_t I4 __attribute__((vector_size(16)));

inline float Sel(bool c, float a, float b) { return c ? a : b; }
inline F4 Sel(I4 c, F4 a, F4 b) { return c ? a : b; }
// float(int32(v)): truncation toward zero, |v| < 2^31.
inline float Trunc(float v) {
  return static_cast<float>(static_cast<int32_t>(v));
}
inline F4 Trunc(F4 v) {
  return __builtin_convertvector(__builtin_convertvector(v, I4), F4);
}
// The float whose bits are b.
inline float FromBits(int32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline F4 FromBits(I4 b) { return (F4)b; }
inline int32_t ToInt(float v) { return static_cast<int32_t>(v); }
inline I4 ToInt(F4 v) { return __builtin_convertvector(v, I4); }

template <typename V>
inline V MulAdd(V a, V b, V c) {
  return a * b + c;
}

// {hi, lo} = x + y exactly, hi = fl(x + y), assuming |x| >= |y|.
template <typename V>
inline void QuickTwoSum(V x, V y, V* hi, V* lo) {
  *hi = x + y;
  const V t = *hi - x;
  *lo = y - t;
}

// {hi, lo} = x * y exactly (Dekker's product with Veltkamp's split into
// 12-bit halves).
template <typename V>
inline void ExactProduct(V x, V y, V* hi, V* lo) {
  auto split = [](V v, V* v_hi, V* v_lo) {
    const V g = 4097.0f * v;
    const V rho = v - g;
    *v_hi = rho + g;
    *v_lo = v - *v_hi;
  };
  V xh, xl, yh, yl;
  split(x, &xh, &xl);
  split(y, &yh, &yl);
  *hi = x * y;
  V e = MulAdd<V>(xh, yh, -*hi);
  e = MulAdd<V>(xh, yl, e);
  e = MulAdd<V>(xl, yh, e);
  *lo = MulAdd<V>(xl, yl, e);
}

// Double word {xh, xl} times float y (Muller's algorithm 7).
template <typename V>
inline void WordTimesFloat(V xh, V xl, V y, V* hi, V* lo) {
  V ch, cl1;
  ExactProduct<V>(xh, y, &ch, &cl1);
  const V cl2 = xl * y;
  V th, tl1;
  QuickTwoSum<V>(ch, cl2, &th, &tl1);
  const V tl2 = tl1 + cl1;
  QuickTwoSum<V>(th, tl2, hi, lo);
}

// Double word sum assuming |xh| >= |yh|.
template <typename V>
inline void QuickWordSum(V xh, V xl, V yh, V yl, V* hi, V* lo) {
  V rh, rl;
  QuickTwoSum<V>(xh, yh, &rh, &rl);
  const V s = (yl + rl) + xl;
  QuickTwoSum<V>(rh, s, hi, lo);
}

// floor(v) and round-half-away-from-zero(v) (Eigen's pround) for
// |v| < 2^23; callers keep larger values away.
template <typename V>
inline V FloorSmall(V v) {
  const V t = Trunc(v);
  return Sel(t > v, t - 1.0f, t);
}
template <typename V>
inline V RoundAway(V v) {
  const V t = Trunc(v);
  const V d = v - t;  // exact
  return Sel(d >= 0.5f, t + 1.0f, Sel(d <= -0.5f, t - 1.0f, t));
}

// v * 2**n with 2**n made from its exponent bits, the biased exponent
// clamped to [0, 255] (Eigen's pldexp_fast; std::max / std::min order).
template <typename V>
inline V LdexpBits(V v, V n) {
  V b = n + 127.0f;
  b = Sel(b < 0.0f, b * 0.0f, b);
  b = Sel(255.0f < b, b * 0.0f + 255.0f, b);
  return v * FromBits(ToInt(b) << 23);
}

// A double constant as a float pair: hi = float(c), lo = float(c - hi).
struct FloatPair {
  float hi, lo;
};
constexpr FloatPair SplitConstant(double c) {
  return {static_cast<float>(c),
          static_cast<float>(c - static_cast<double>(static_cast<float>(c)))};
}

// log2(z) for z in [sqrt(1/2), sqrt(2)] as a double word: with x = z - 1, a
// degree-8 Horner polynomial in float32, then its last two steps and the
// product by x in double words (Eigen 3.5's accurate_log2<float>).
template <typename V>
void Log2Word(V z, V* hi, V* lo) {
  static constexpr float kP[9] = {
      9.7010828554630279541015625e-02f,  -1.6896486282348632812500000e-01f,
      1.7200836539268493652343750e-01f,  -1.7892272770404815673828125e-01f,
      2.0505344867706298828125000e-01f,  -2.4046677350997924804687500e-01f,
      2.8857553005218505859375000e-01f,  -3.6067414283752441406250000e-01f,
      4.8089790344238281250000000e-01f};
  static constexpr FloatPair kC1 =
      SplitConstant(-7.2134751588268664068692714863573201000690460205078125e-01);
  static constexpr FloatPair kC0 =
      SplitConstant(1.442695041742110273474963832995854318141937255859375e+00);
  const V x = z - 1.0f;
  const V zero = x * 0.0f;
  V p = zero + kP[0];
  for (int i = 1; i < 9; ++i) p = MulAdd<V>(p, x, zero + kP[i]);
  V ph, pl;
  ExactProduct<V>(x, p, &ph, &pl);
  QuickWordSum<V>(zero + kC1.hi, zero + kC1.lo, ph, pl, &ph, &pl);
  WordTimesFloat<V>(ph, pl, x, &ph, &pl);
  QuickWordSum<V>(zero + kC0.hi, zero + kC0.lo, ph, pl, &ph, &pl);
  WordTimesFloat<V>(ph, pl, x, hi, lo);
}

// exp(x) for |x| < 87 (Eigen's pexp_float: Cephes' reduction by ln 2 in two
// parts, a degree-6 polynomial, the power of two from its bits).
template <typename V>
V ExpFloat(V x) {
  const V zero = x * 0.0f;
  const V m = FloorSmall<V>(MulAdd<V>(x, zero + 1.44269504088896341f,
                                      zero + 0.5f));
  V r = MulAdd<V>(m, zero - 0.693359375f, x);
  r = MulAdd<V>(m, zero + 2.12194440e-4f, r);
  const V r2 = r * r;
  V even = MulAdd<V>(r2, zero + 1.37449637986719608306884765625e-3f,
                     zero + 4.166965186595916748046875e-2f);
  const V odd = MulAdd<V>(r2, zero + 8.36894474923610687255859375e-3f,
                          zero + 0.16666518151760101318359375f);
  even = MulAdd<V>(r2, even, zero + 0.49999988079071044921875f);
  const V low = r + 1.0f;
  V y = MulAdd<V>(r, odd, even);
  y = MulAdd<V>(r2, y, low);
  const V a = LdexpBits<V>(y, m);
  return Sel(a < x, x, a);  // std::max(a, x)
}

// 2**r for r in [-1/2, 1/2]: exp(hi) * (1 + lo) with hi + lo = ln2 * r
// exactly (Eigen's generic_exp2).
template <typename V>
V Exp2Small(V r) {
  V hi, lo;
  ExactProduct<V>(
      r * 0.0f + static_cast<float>(0.693147180559945309417232121458176568L),
      r, &hi, &lo);
  return ExpFloat<V>(hi) * (1.0f + lo);
}

// pow(m * 2^ex, y) for a mantissa m in [1/2, 1) and its exponent: 2 **
// (y * log2(x)) with the product in double words, split into n and r in
// [-1/2, 1/2]; returns 2**r and n (the caller scales).
template <typename V>
void PowCore(V m, V ex, V y, V* e_r, V* n_out) {
  const auto small = m < static_cast<float>(0.70710678118654752440);
  m = Sel(small, 2.0f * m, m);
  ex = Sel(small, ex - 1.0f, ex);
  V rh, rl, f1h, f1l, f2h, f2l, fh, fl;
  Log2Word<V>(m, &rh, &rl);
  ExactProduct<V>(ex, y, &f1h, &f1l);
  WordTimesFloat<V>(rh, rl, y, &f2h, &f2l);
  QuickWordSum<V>(f1h, f1l, f2h, f2l, &fh, &fl);
  V n = RoundAway<V>(fh);
  V r = fh - n;
  r = r + fl;
  const V nr = RoundAway<V>(r);
  r = r - nr;
  *n_out = n + nr;
  *e_r = Exp2Small<V>(r);
}

// pow(x, y) for x > 0 finite.
float PowPositive(float x, float y) {
  int e;
  const float m = std::frexp(x, &e);
  const float ex = static_cast<float>(e);
  // |y * log2(x)| must stay below 2^22 for the inline rounding.
  float e_r, n;
  if (!(std::fabs(y) * (std::fabs(ex) + 1.0f) < 4194304.0f)) {
    return static_cast<float>(std::pow(double(x), double(y)));  // unreachable for images
  }
  PowCore<float>(m, ex, y, &e_r, &n);
  // Eigen falls back to an exact ldexp for |n| > 126 (not reached by
  // adjust_gamma's image values and exponents).
  if (std::fabs(n) > 126.0f) return std::ldexp(e_r, static_cast<int>(n));
  return LdexpBits<float>(e_r, n);
}

// TfPowFloat on 4 values x[0..3] with one exponent y, 0 < y < 2^16 finite,
// y != 1: the lanes with normal x > 0, x != 1, finite, and |n| <= 126 are
// the vector result; the others are recomputed one by one.
void TfPow4(const float* x, float y, float* out) {
  F4 v;
  std::memcpy(&v, x, sizeof(v));
  const I4 bits = (I4)v;
  const I4 biased = (bits >> 23) & 0xff;
  const I4 normal = (bits > 0) & (biased > 0) & (biased < 255) & (v != 1.0f);
  const F4 ex = __builtin_convertvector(biased - 126, F4);
  const F4 m = FromBits((bits & 0x807fffff) | 0x3f000000);
  F4 e_r, n;
  PowCore<F4>(m, ex, v * 0.0f + y, &e_r, &n);
  const F4 r = LdexpBits<F4>(e_r, n);
  const I4 ok = normal & (n <= 126.0f) & (n >= -126.0f);
  std::memcpy(out, &r, sizeof(r));
  for (int i = 0; i < 4; ++i) {
    if (!ok[i]) out[i] = TfPowFloat(x[i], y);
  }
}

}  // namespace

float TfPowFloat(float x, float y) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (y == 1.0f) return x;
  const float ax = std::fabs(x);
  const bool x_neg = std::signbit(x) && ax != 0.0f;
  const bool y_int = std::floor(y) == y;
  const bool y_even = std::round(y * 0.5f) == y * 0.5f;
  const float ay = std::fabs(y);
  if ((x == 1.0f) || ay == 0.0f ||
      (x == -1.0f && (ay == inf || (y_even && y_int)))) {
    return 1.0f;
  }
  if (std::isnan(x) || std::isnan(y) ||
      (x_neg && ax != inf && !y_int && ay != inf)) {
    return nan;
  }
  // Huge exponents: |y| >= 128 * ln 2 / eps (Eigen's threshold).
  const float huge =
      (128.0f * static_cast<float>(0.693147180559945309417)) /
      std::numeric_limits<float>::epsilon();
  const bool y_huge = ay >= huge;
  const bool y_pos = y > 0.0f;
  const bool y_odd_int = y_int && !y_even;
  if ((ax == 0.0f && !y_pos) || (ax == inf && y_pos) ||
      (ax < 1.0f && y_huge && !y_pos) || (ax > 1.0f && y_huge && y_pos)) {
    const bool neg = y_odd_int && ((ax == inf && x_neg) ||
                                   (ax == 0.0f && std::signbit(x) && !y_pos));
    return neg ? -inf : inf;
  }
  if (y_odd_int && std::signbit(x) &&
      ((!y_pos && ax == inf) || (y_pos && ax == 0.0f))) {
    return -0.0f;
  }
  if ((ax == 0.0f && y_pos) || (ax == inf && !y_pos) ||
      (ax < 1.0f && y_huge && y_pos) || (ax > 1.0f && y_huge && !y_pos)) {
    return 0.0f;
  }
  const float v = PowPositive(ax, y);
  return x_neg && !(y_int && y_even) ? -v : v;
}

void AdjustContrast(float* img, int h, int w, float factor) {
  const int64_t pixels = static_cast<int64_t>(h) * w;
  if (pixels <= 0) return;
  // The kernel's fold: sum[i] = x[i + left] + x[i] over the first `right`
  // pixels, the odd middle pixel copied, then the same fold in place until
  // one pixel is left.
  std::vector<float> sum(static_cast<size_t>((pixels + 1) / 2) * 3);
  int64_t n = pixels;
  bool first = true;
  do {
    const int64_t right = n / 2, left = n - right;
    if (first) {
      for (int64_t i = 0; i < right * 3; ++i) {
        sum[i] = img[left * 3 + i] + img[i];
      }
      if (left > right) {
        for (int c = 0; c < 3; ++c) sum[right * 3 + c] = img[right * 3 + c];
      }
      first = false;
    } else {
      for (int64_t i = 0; i < right * 3; ++i) {
        sum[i] = sum[i] + sum[left * 3 + i];
      }
    }
    n = left;
  } while (n > 1);
  const float scale = 1.0f / static_cast<float>(pixels);
  const float mean[3] = {sum[0] * scale, sum[1] * scale, sum[2] * scale};
  for (int64_t i = 0; i < pixels; ++i) {
    for (int c = 0; c < 3; ++c) {
      float& v = img[i * 3 + c];
      v = mean[c] + factor * (v - mean[c]);
    }
  }
}

void AdjustHue(float* img, size_t num_pixels, float delta) {
  for (size_t i = 0; i < num_pixels; ++i) internal::HuePixel(img + 3 * i, delta);
}

void AdjustGamma(float* img, size_t n, float gamma, float gain) {
  // TensorFlow's Pow runs Eigen's 8-lane (AVX) packet path over the tensor
  // and its scalar path, std::pow (glibc's powf), over the last n % 8
  // elements (the thread pool's blocks are multiples of the packet size).
  static_assert(kTfPowPacket % 4 == 0, "TfPow4 does 4 lanes");
  const size_t vector_end = n - n % kTfPowPacket;
  const bool lanes = gamma > 0.0f && gamma < 65536.0f && gamma != 1.0f;
  for (size_t i = 0; i < vector_end; i += 8) {
    float p[8];
    if (lanes) {
      TfPow4(img + i, gamma, p);
      TfPow4(img + i + 4, gamma, p + 4);
    } else {
      for (int k = 0; k < 8; ++k) p[k] = TfPowFloat(img[i + k], gamma);
    }
    for (int k = 0; k < 8; ++k) img[i + k] = gain * p[k];
  }
  for (size_t i = vector_end; i < n; ++i) {
    img[i] = gain * std::pow(img[i], gamma);
  }
}

void ConvertU8ToFloat(const uint8_t* in, size_t n, float* out) {
  const float k = 1.0f / 255.0f;
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]) * k;
}

namespace {

template <typename T, typename Load>
void ResizeImpl(const T* in, int in_h, int in_w, const CropBox& crop,
                float* out, int out_h, int out_w, Load load) {
  (void)in_h;
  const size_t row_stride = static_cast<size_t>(in_w) * 3;
  const T* base = in + static_cast<size_t>(crop.y) * row_stride +
                  static_cast<size_t>(crop.x) * 3;
  if (crop.height == out_h && crop.width == out_w) {
    for (int y = 0; y < out_h; ++y) {
      const T* src = base + y * row_stride;
      float* dst = out + static_cast<size_t>(y) * out_w * 3;
      for (int i = 0; i < out_w * 3; ++i) dst[i] = load(src[i]);
    }
    return;
  }
  std::vector<internal::Tap> ys, xs;
  internal::ComputeInterpolation(out_h, crop.height, &ys);
  internal::ComputeInterpolation(out_w, crop.width, &xs);
  for (int y = 0; y < out_h; ++y) {
    const T* lo = base + ys[y].lower * row_stride;
    const T* hi = base + ys[y].upper * row_stride;
    const float wy = ys[y].lerp;
    float* dst = out + static_cast<size_t>(y) * out_w * 3;
    for (int x = 0; x < out_w; ++x) {
      const int64_t xl = xs[x].lower * 3, xu = xs[x].upper * 3;
      const float wx = xs[x].lerp;
      for (int c = 0; c < 3; ++c) {
        const float tl = load(lo[xl + c]), tr = load(lo[xu + c]);
        const float bl = load(hi[xl + c]), br = load(hi[xu + c]);
        const float top = tl + (tr - tl) * wx;
        const float bottom = bl + (br - bl) * wx;
        dst[x * 3 + c] = top + (bottom - top) * wy;
      }
    }
  }
}

}  // namespace

void ResizeBilinear(const float* in, int in_h, int in_w, const CropBox& crop,
                    float* out, int out_h, int out_w) {
  ResizeImpl(in, in_h, in_w, crop, out, out_h, out_w,
             [](float v) { return v; });
}

void ResizeBilinearU8(const uint8_t* in, int in_h, int in_w,
                      const CropBox& crop, float* out, int out_h, int out_w) {
  const float* lut = internal::U8ToFloatTable();
  ResizeImpl(in, in_h, in_w, crop, out, out_h, out_w,
             [lut](uint8_t v) { return lut[v]; });
}

void FlipLeftRight(float* img, int h, int w) {
  for (int y = 0; y < h; ++y) {
    float* row = img + static_cast<size_t>(y) * w * 3;
    for (int a = 0, b = w - 1; a < b; ++a, --b) {
      for (int c = 0; c < 3; ++c) std::swap(row[a * 3 + c], row[b * 3 + c]);
    }
  }
}

void AdjustBrightness(float* img, size_t n, float delta) {
  for (size_t i = 0; i < n; ++i) img[i] = img[i] + delta;
}

void AdjustSaturation(float* img, size_t num_pixels, float factor) {
  for (size_t i = 0; i < num_pixels; ++i) {
    internal::SaturatePixel(img + 3 * i, factor);
  }
}

void ClipByValue(float* img, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; ++i) img[i] = std::max(std::min(img[i], hi), lo);
}

void Normalize(float* img, size_t num_pixels, const float mean[3],
               const float std[3]) {
  for (size_t i = 0; i < num_pixels; ++i) {
    for (int c = 0; c < 3; ++c) {
      img[3 * i + c] = (img[3 * i + c] - mean[c]) / std[c];
    }
  }
}

void PackOutput(const float* img, int h, int w, DType dtype, Layout layout,
                uint8_t* out) {
  const size_t plane = static_cast<size_t>(h) * w;
  for (size_t p = 0; p < plane; ++p) {
    for (size_t c = 0; c < 3; ++c) {
      const float v = img[3 * p + c];
      const size_t idx = layout == Layout::kNHWC ? 3 * p + c : c * plane + p;
      internal::StoreElement(v, dtype, out + DTypeSize(dtype) * idx);
    }
  }
}

}  // namespace nearprep
