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
inline float MulAdd(float a, float b, float c) { return a * b + c; }

// {hi, lo} = x + y exactly, hi = fl(x + y), assuming |x| >= |y|.
inline void QuickTwoSum(float x, float y, float* hi, float* lo) {
  *hi = x + y;
  const float t = *hi - x;
  *lo = y - t;
}

// {hi, lo} = x * y exactly (Dekker's product with Veltkamp's split into
// 12-bit halves).
inline void ExactProduct(float x, float y, float* hi, float* lo) {
  auto split = [](float v, float* v_hi, float* v_lo) {
    const float g = 4097.0f * v;
    const float rho = v - g;
    *v_hi = rho + g;
    *v_lo = v - *v_hi;
  };
  float xh, xl, yh, yl;
  split(x, &xh, &xl);
  split(y, &yh, &yl);
  *hi = x * y;
  float e = MulAdd(xh, yh, -*hi);
  e = MulAdd(xh, yl, e);
  e = MulAdd(xl, yh, e);
  *lo = MulAdd(xl, yl, e);
}

// Double word {xh, xl} times float y (Muller's algorithm 7).
inline void WordTimesFloat(float xh, float xl, float y, float* hi, float* lo) {
  float ch, cl1;
  ExactProduct(xh, y, &ch, &cl1);
  const float cl2 = xl * y;
  float th, tl1;
  QuickTwoSum(ch, cl2, &th, &tl1);
  const float tl2 = tl1 + cl1;
  QuickTwoSum(th, tl2, hi, lo);
}

// Double word sum assuming |xh| >= |yh|.
inline void QuickWordSum(float xh, float xl, float yh, float yl, float* hi,
                         float* lo) {
  float rh, rl;
  QuickTwoSum(xh, yh, &rh, &rl);
  const float s = (yl + rl) + xl;
  QuickTwoSum(rh, s, hi, lo);
}

// floor(v) for |v| < 2^23, else std::floor.
inline float FloorSmall(float v) {
  if (!(std::fabs(v) < 8388608.0f)) return std::floor(v);
  const float t = static_cast<float>(static_cast<int32_t>(v));
  return t > v ? t - 1.0f : t;
}

// v * 2**n with 2**n made from its exponent bits, the biased exponent
// clamped to [0, 255] (Eigen's pldexp_fast).
inline float LdexpBits(float v, float n) {
  const float biased = std::min(std::max(n + 127.0f, 0.0f), 255.0f);
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(biased)) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return v * scale;
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
void Log2Word(float z, float* hi, float* lo) {
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
  const float x = z - 1.0f;
  float p = kP[0];
  for (int i = 1; i < 9; ++i) p = MulAdd(p, x, kP[i]);
  float ph, pl;
  ExactProduct(x, p, &ph, &pl);
  QuickWordSum(kC1.hi, kC1.lo, ph, pl, &ph, &pl);
  WordTimesFloat(ph, pl, x, &ph, &pl);
  QuickWordSum(kC0.hi, kC0.lo, ph, pl, &ph, &pl);
  WordTimesFloat(ph, pl, x, hi, lo);
}

// exp(x) for |x| < 87 (Eigen's pexp_float: Cephes' reduction by ln 2 in two
// parts, a degree-6 polynomial, the power of two from its bits).
float ExpFloat(float x) {
  const float m = FloorSmall(MulAdd(x, 1.44269504088896341f, 0.5f));
  float r = MulAdd(m, -0.693359375f, x);
  r = MulAdd(m, 2.12194440e-4f, r);
  const float r2 = r * r;
  float even = MulAdd(r2, 1.37449637986719608306884765625e-3f,
                      4.166965186595916748046875e-2f);
  const float odd = MulAdd(r2, 8.36894474923610687255859375e-3f,
                           0.16666518151760101318359375f);
  even = MulAdd(r2, even, 0.49999988079071044921875f);
  const float low = r + 1.0f;
  float y = MulAdd(r, odd, even);
  y = MulAdd(r2, y, low);
  return std::max(LdexpBits(y, m), x);
}

// 2**r for r in [-1/2, 1/2]: exp(hi) * (1 + lo) with hi + lo = ln2 * r
// exactly (Eigen's generic_exp2).
float Exp2Small(float r) {
  float hi, lo;
  ExactProduct(static_cast<float>(0.693147180559945309417232121458176568L), r,
               &hi, &lo);
  return ExpFloat(hi) * (1.0f + lo);
}

// Round half away from zero (Eigen's pround) for |v| < 2^23 (every value
// pow's split sees: |y * log2(x)| is far below), else std::round. Inline
// integer conversions: these run once or twice per pixel value.
inline float RoundAway(float v) {
  if (!(std::fabs(v) < 8388608.0f)) return std::round(v);
  const float t = static_cast<float>(static_cast<int32_t>(v));  // truncation
  const float d = v - t;  // exact
  if (d >= 0.5f) return t + 1.0f;
  if (d <= -0.5f) return t - 1.0f;
  return t;
}

// pow(x, y) for x > 0 finite: 2 ** (y * log2(x)) with the product in double
// words, split into an integer and a fraction in [-1/2, 1/2].
float PowPositive(float x, float y) {
  // frexp: m in [0.5, 1), x = m * 2^e; from the bits for normal x.
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  int e;
  float m;
  if ((bits & 0x7f800000u) != 0) {
    e = static_cast<int>((bits >> 23) & 0xffu) - 126;
    bits = (bits & 0x807fffffu) | 0x3f000000u;
    std::memcpy(&m, &bits, 4);
  } else {
    m = std::frexp(x, &e);
  }
  float ex = static_cast<float>(e);
  if (m < static_cast<float>(0.70710678118654752440)) {
    m = 2.0f * m;
    ex = ex - 1.0f;
  }
  float rh, rl, f1h, f1l, f2h, f2l, fh, fl;
  Log2Word(m, &rh, &rl);
  ExactProduct(ex, y, &f1h, &f1l);
  WordTimesFloat(rh, rl, y, &f2h, &f2l);
  QuickWordSum(f1h, f1l, f2h, f2l, &fh, &fl);
  float n = RoundAway(fh);
  float r = fh - n;
  r = r + fl;
  const float nr = RoundAway(r);
  r = r - nr;
  n = n + nr;
  const float e_r = Exp2Small(r);
  // Eigen falls back to an exact ldexp for |n| > 126 (not reached by
  // adjust_gamma's image values and exponents).
  if (std::fabs(n) > 126.0f) return std::ldexp(e_r, static_cast<int>(n));
  return LdexpBits(e_r, n);
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
  const size_t vector_end = n - n % kTfPowPacket;
  for (size_t i = 0; i < vector_end; ++i) {
    img[i] = gain * TfPowFloat(img[i], gamma);
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
