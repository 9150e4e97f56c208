// One idea, kept in one file although it is over 500 lines: the fused
// single-pass CPU path (decode, then every float op per output row); its
// stages share the row cache and the per-lane kernels, and splitting them
// would put the TensorFlow-order arithmetic in several places.
//
// The CPU preprocessing path. Decode: TF_COMPAT whole-image and progressive
// decodes decode the full image; TF_COMPAT crops of baseline images decode
// only the crop's region (plus a 1-pixel margin) with the same pixels and
// errors as the full decode (see JpegSession::DecodeCrop), falling back to
// the full decode on damaged data; FAST decodes the region with DCT scaling
// and stops after its last row (full decode if that fails). After the decode, everything happens in one
// pass over the small output, row by row:
//   horizontal taps of the (at most two) source rows an output row needs,
//   straight from uint8 (cached, each source row is interpolated once)
//   -> vertical lerp -> brightness -> saturation -> clip -> normalize ->
//   convert and store (dtype, layout, flip folded into the store).
// Every float operation is the one TensorFlow performs, in the same order
// and precision, so the result equals the op-by-op sequence in tf_ops.h bit
// for bit (tests/unit/image/preprocess_test.cc). The AVX2 kernels
// (preprocess_avx2.cc, chosen at run time), the AVX-512 row colour kernel
// (preprocess_avx512.cc, likewise) and the SSE2 fallbacks vectorize
// across independent pixels; the arithmetic per lane is unchanged (float32
// rows at 32-byte aligned addresses are written with non-temporal stores:
// the tensor is large and read later by someone else, so reading its cache
// lines first and evicting the decoder's working set would only cost). FAST
// replaces the HSV round trip of saturation by its closed form
// (SaturateFastPixel), equal up to float rounding.
//
// Requests with contrast, hue or gamma (issue 36) take the staged path
// instead: the same horizontal taps (AVX2 where available) and vertical
// lerp, the rows stored flipped into the whole float image, then TensorFlow's
// ops one after the other with tf_ops.h's scalar functions (contrast needs
// the whole image's mean before any pixel can be finished), then clip,
// normalize and PackOutput. FAST uses the same path (its saturation the
// closed form).
#include "server/image/preprocess.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iterator>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "server/image/jpeg_session.h"
#include "server/image/preprocess_kernels.h"
#include "server/image/tf_ops.h"
#include "server/image/tf_ops_internal.h"
#include "server/image/torchvision_preprocess.h"

namespace nearprep {
namespace internal {

bool HaveAvx2Kernels() {
#if defined(NEARPREP_HAVE_AVX2_KERNELS)
  static const bool have = __builtin_cpu_supports("avx2");
  return have;
#else
  return false;
#endif
}

bool HaveAvx512Kernels() {
#if defined(NEARPREP_HAVE_AVX512_KERNELS)
  static const bool have = HaveAvx2Kernels() &&
                           __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("avx512dq") &&
                           __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl");
  return have;
#else
  return false;
#endif
}

#if !defined(NEARPREP_HAVE_AVX512_KERNELS)
int RowColorAvx512(const float*, const float*, float, int, const RowOps&,
                   const PackTarget&) {
  return 0;
}
#endif

#if !defined(NEARPREP_HAVE_AVX2_KERNELS)
int RowColorAvx2(const float*, const float*, float, int, const RowOps&,
                 const PackTarget&) {
  return 0;
}
int HorizontalRowAvx2(const uint8_t*, const int32_t*, const int32_t*,
                      const float*, int, float*, int) {
  return 0;
}
int PackRowAvx2(const float*, int, const PackTarget&) { return 0; }
void PilHorizontalAvx2(const uint8_t*, int, const int32_t*, const int32_t*,
                       const int32_t*, int, int, uint8_t*) {}
size_t PilVerticalAvx2(const uint8_t* const*, const int32_t*, int, size_t,
                       uint8_t*) {
  return 0;
}
#endif

namespace {
std::atomic<int> forced_level{static_cast<int>(KernelLevel::kAuto)};
}  // namespace

void SetKernelLevelForTesting(KernelLevel level) {
  forced_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

// The effective level: the forced one capped by what the CPU has.
KernelLevel ActiveKernelLevel() {
  const auto forced =
      static_cast<KernelLevel>(forced_level.load(std::memory_order_relaxed));
  if (forced == KernelLevel::kScalar || !HaveAvx2Kernels()) {
    return KernelLevel::kScalar;
  }
  if (forced == KernelLevel::kAvx2 || !HaveAvx512Kernels()) {
    return KernelLevel::kAvx2;
  }
  return KernelLevel::kAvx512;
}

}  // namespace internal

namespace {

using internal::Clock;

// Per-thread buffers, grown on demand and reused across images.
struct Scratch {
  std::vector<uint8_t> rgb;         // Decoded image.
  std::vector<float> slots;         // Two cached horizontally resized rows.
  std::vector<float> row;           // Current output row, planar R|G|B.
  std::vector<internal::Tap> xs, ys;
  std::vector<int32_t> x_lo, x_hi;  // Byte offsets of the taps.
  std::vector<float> x_lerp;
  std::vector<float> image;         // Staged path: the whole float image.
};

Scratch& ThreadScratch() {
  thread_local Scratch s;
  return s;
}

// ---------------------------------------------------------------------------
// Saturation on planar rows.

void SaturateScalar(float* r, float* g, float* b, int n, float factor) {
  for (int i = 0; i < n; ++i) {
    float p[3] = {r[i], g[i], b[i]};
    internal::SaturatePixel(p, factor);
    r[i] = p[0];
    g[i] = p[1];
    b[i] = p[2];
  }
}

#if defined(__SSE2__)
inline __m128 Select(__m128 mask, __m128 a, __m128 b) {  // mask ? a : b
  return _mm_or_ps(_mm_and_ps(mask, a), _mm_andnot_ps(mask, b));
}

// float(double(t) + k) per lane, as TensorFlow's `float + double` rounds.
inline __m128 AddDoubleRound(__m128 t, __m128d k) {
  const __m128d lo = _mm_add_pd(_mm_cvtps_pd(t), k);
  const __m128d hi = _mm_add_pd(_mm_cvtps_pd(_mm_movehl_ps(t, t)), k);
  return _mm_movelh_ps(_mm_cvtpd_ps(lo), _mm_cvtpd_ps(hi));
}

void SaturateRow(float* rp, float* gp, float* bp, int n, float factor) {
  const __m128 zero = _mm_setzero_ps();
  const __m128 one = _mm_set1_ps(1.0f);
  const __m128 two = _mm_set1_ps(2.0f);
  const __m128 six = _mm_set1_ps(6.0f);
  const __m128 f = _mm_set1_ps(factor);
  const __m128 sign = _mm_set1_ps(-0.0f);
  const __m128 dh_min = _mm_set1_ps(-1.5f);
  const __m128 dh_max = _mm_set1_ps(7.5f);
  const __m128d k2 = _mm_set1_pd(2.0 / 6.0);
  const __m128d k4 = _mm_set1_pd(4.0 / 6.0);
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m128 r = _mm_loadu_ps(rp + i);
    const __m128 g = _mm_loadu_ps(gp + i);
    const __m128 b = _mm_loadu_ps(bp + i);
    // std::max(a, b) == (a < b) ? b : a == maxps(b, a); likewise for min.
    const __m128 v = _mm_max_ps(_mm_max_ps(b, g), r);
    const __m128 mn = _mm_min_ps(_mm_min_ps(b, g), r);
    const __m128 range = _mm_sub_ps(v, mn);
    const __m128 s = _mm_and_ps(_mm_cmpgt_ps(v, zero), _mm_div_ps(range, v));
    const __m128 norm = _mm_div_ps(one, _mm_mul_ps(six, range));
    const __m128 hr = _mm_mul_ps(norm, _mm_sub_ps(g, b));
    const __m128 hg = AddDoubleRound(_mm_mul_ps(norm, _mm_sub_ps(b, r)), k2);
    const __m128 hb = AddDoubleRound(_mm_mul_ps(norm, _mm_sub_ps(r, g)), k4);
    const __m128 is_r = _mm_cmpeq_ps(r, v);
    const __m128 is_g = _mm_cmpeq_ps(g, v);
    __m128 h = Select(is_r, hr, Select(is_g, hg, hb));
    h = _mm_andnot_ps(_mm_cmple_ps(range, zero), h);
    h = Select(_mm_cmplt_ps(h, zero), _mm_add_ps(h, one), h);
    const __m128 s2 = _mm_min_ps(_mm_max_ps(_mm_mul_ps(s, f), zero), one);
    const __m128 c = _mm_mul_ps(s2, v);
    const __m128 m = _mm_sub_ps(v, c);
    const __m128 dh = _mm_mul_ps(h, six);
    // The wrap loop below is exact for dh in (-2, 8); anything else (only
    // possible with non-finite input) takes the scalar path.
    const __m128 in_range =
        _mm_and_ps(_mm_cmpgt_ps(dh, dh_min), _mm_cmplt_ps(dh, dh_max));
    if (_mm_movemask_ps(in_range) != 0xF) {
      SaturateScalar(rp + i, gp + i, bp + i, 4, factor);
      continue;
    }
    const __m128i k = _mm_cvttps_epi32(dh);
    __m128 fm = Select(_mm_cmple_ps(dh, zero), _mm_add_ps(dh, two), dh);
    for (int rep = 0; rep < 3; ++rep) {
      fm = Select(_mm_cmpge_ps(fm, two), _mm_sub_ps(fm, two), fm);
    }
    const __m128 x =
        _mm_mul_ps(c, _mm_sub_ps(one, _mm_andnot_ps(sign, _mm_sub_ps(fm, one))));
    auto is = [&k](int v) {
      return _mm_castsi128_ps(_mm_cmpeq_epi32(k, _mm_set1_epi32(v)));
    };
    const __m128 k0 = is(0), k1 = is(1), k2m = is(2), k3 = is(3), k4m = is(4),
                 k5 = is(5);
    const __m128 rr = _mm_or_ps(_mm_and_ps(_mm_or_ps(k0, k5), c),
                                _mm_and_ps(_mm_or_ps(k1, k4m), x));
    const __m128 gg = _mm_or_ps(_mm_and_ps(_mm_or_ps(k1, k2m), c),
                                _mm_and_ps(_mm_or_ps(k0, k3), x));
    const __m128 bb = _mm_or_ps(_mm_and_ps(_mm_or_ps(k3, k4m), c),
                                _mm_and_ps(_mm_or_ps(k2m, k5), x));
    _mm_storeu_ps(rp + i, _mm_add_ps(rr, m));
    _mm_storeu_ps(gp + i, _mm_add_ps(gg, m));
    _mm_storeu_ps(bp + i, _mm_add_ps(bb, m));
  }
  SaturateScalar(rp + i, gp + i, bp + i, n - i, factor);
}
#else
void SaturateRow(float* r, float* g, float* b, int n, float factor) {
  SaturateScalar(r, g, b, n, factor);
}
#endif

// out = lo + (hi - lo) * w, elementwise.
void LerpRows(const float* lo, const float* hi, float w, int n, float* out) {
  int i = 0;
#if defined(__SSE2__)
  const __m128 wv = _mm_set1_ps(w);
  for (; i + 4 <= n; i += 4) {
    const __m128 a = _mm_loadu_ps(lo + i);
    const __m128 b = _mm_loadu_ps(hi + i);
    _mm_storeu_ps(out + i, _mm_add_ps(a, _mm_mul_ps(_mm_sub_ps(b, a), wv)));
  }
#endif
  for (; i < n; ++i) out[i] = lo[i] + (hi[i] - lo[i]) * w;
}

void AddRow(float* p, int n, float delta) {
  int i = 0;
#if defined(__SSE2__)
  const __m128 d = _mm_set1_ps(delta);
  for (; i + 4 <= n; i += 4) {
    _mm_storeu_ps(p + i, _mm_add_ps(_mm_loadu_ps(p + i), d));
  }
#endif
  for (; i < n; ++i) p[i] = p[i] + delta;
}

// max(min(x, 1), 0) with std::min/std::max's operand order.
void ClipRow(float* p, int n) {
  int i = 0;
#if defined(__SSE2__)
  const __m128 zero = _mm_setzero_ps(), one = _mm_set1_ps(1.0f);
  for (; i + 4 <= n; i += 4) {
    // std::min(x, 1) = (1 < x) ? 1 : x = minps(x, 1) for non-NaN x;
    // std::max(y, 0) = (y < 0) ? 0 : y = maxps(y, 0).
    const __m128 x = _mm_loadu_ps(p + i);
    _mm_storeu_ps(p + i, _mm_max_ps(_mm_min_ps(x, one), zero));
  }
#endif
  for (; i < n; ++i) p[i] = std::max(std::min(p[i], 1.0f), 0.0f);
}

void NormalizeRow(float* p, int n, float mean, float std) {
  int i = 0;
#if defined(__SSE2__)
  const __m128 mv = _mm_set1_ps(mean), sv = _mm_set1_ps(std);
  for (; i + 4 <= n; i += 4) {
    _mm_storeu_ps(p + i, _mm_div_ps(_mm_sub_ps(_mm_loadu_ps(p + i), mv), sv));
  }
#endif
  for (; i < n; ++i) p[i] = (p[i] - mean) / std;
}

// Where output row `y` goes in the tensor.
internal::PackTarget RowTarget(int y, int h, int w, bool flip,
                               const OutputSpec& output, uint8_t* out) {
  internal::PackTarget t;
  t.flip = flip;
  t.dtype = output.dtype;
  t.layout = output.layout;
  const size_t plane = static_cast<size_t>(h) * w;
  const size_t esize = DTypeSize(output.dtype);
  for (int c = 0; c < 3; ++c) {
    t.dst[c] = output.layout == Layout::kNHWC
                   ? out + (static_cast<size_t>(y) * w * 3) * esize
                   : out + (c * plane + static_cast<size_t>(y) * w) * esize;
  }
  return t;
}

// Stores source columns [x0, w) of the planar row (R|G|B, each w floats).
void PackColumns(const float* planes, int x0, int w,
                 const internal::PackTarget& t) {
  const size_t esize = DTypeSize(t.dtype);
  const size_t step = t.layout == Layout::kNHWC ? 3 : 1;
  for (int c = 0; c < 3; ++c) {
    const float* src = planes + static_cast<size_t>(c) * w;
    uint8_t* base = t.layout == Layout::kNHWC ? t.dst[0] + c * esize : t.dst[c];
    for (int x = x0; x < w; ++x) {
      const float v = src[x];
      const int xo = t.flip ? w - 1 - x : x;
      uint8_t* o = base + static_cast<size_t>(xo) * step * esize;
      internal::StoreElement(v, t.dtype, o);
    }
  }
}

using HorizontalKernel = int (*)(const uint8_t*, const int32_t*,
                                 const int32_t*, const float*, int, float*,
                                 int);
using RowColorKernel = int (*)(const float*, const float*, float, int,
                               const internal::RowOps&,
                               const internal::PackTarget&);

// Horizontal taps of one source row, planar output (R|G|B, each out_w).
void HorizontalRow(const uint8_t* row, const Scratch& sc, int out_w,
                   int vector_cols, HorizontalKernel vector_kernel,
                   float* dst) {
  const float* lut = internal::U8ToFloatTable();
  float* dr = dst;
  float* dg = dst + out_w;
  float* db = dst + 2 * out_w;
  const int32_t* xl = sc.x_lo.data();
  const int32_t* xh = sc.x_hi.data();
  const float* wx = sc.x_lerp.data();
  int x = 0;
  if (vector_kernel != nullptr) {
    x = vector_kernel(row, xl, xh, wx, vector_cols, dst, out_w);
  }
  for (; x < out_w; ++x) {
    const uint8_t* a = row + xl[x];
    const uint8_t* b = row + xh[x];
    const float w = wx[x];
    const float ar = lut[a[0]], ag = lut[a[1]], ab = lut[a[2]];
    dr[x] = ar + (lut[b[0]] - ar) * w;
    dg[x] = ag + (lut[b[1]] - ag) * w;
    db[x] = ab + (lut[b[2]] - ab) * w;
  }
}

// True when the request has an op that is not row-local or has no row
// kernel (contrast needs the whole image's mean; hue and gamma are scalar):
// such requests take the staged path below.
bool NeedsStagedPath(const TransformSpec& spec) {
  return spec.contrast_enabled || spec.hue_max_delta > 0.0f ||
         spec.gamma != 0.0f || !spec.color_ops.empty();
}

// The staged path's second half: `img` holds the resized, flipped float
// image (HWC); TensorFlow's ops run on it one after the other, in the
// documented order, then clip, normalize and the store.
void StagedColorOps(float* img, int h, int w, const TransformSpec& spec,
                    const OutputSpec& output, const SampleParams& params,
                    uint8_t* out) {
  const size_t pixels = static_cast<size_t>(h) * w;
  const size_t n = pixels * 3;
  static const ColorOp kDefaultOrder[] = {ColorOp::kGamma, ColorOp::kBrightness,
                                          ColorOp::kContrast, ColorOp::kSaturation,
                                          ColorOp::kHue};
  const std::vector<ColorOp> order =
      spec.color_ops.empty()
          ? std::vector<ColorOp>(std::begin(kDefaultOrder), std::end(kDefaultOrder))
          : spec.color_ops;
  for (ColorOp op : order) {
    switch (op) {
      case ColorOp::kGamma:
        if (spec.gamma != 0.0f) AdjustGamma(img, n, spec.gamma, spec.gain);
        break;
      case ColorOp::kBrightness:
        if (params.brightness_delta != 0.0f) {
          AdjustBrightness(img, n, params.brightness_delta);
        }
        break;
      case ColorOp::kContrast:
        if (spec.contrast_enabled) {
          AdjustContrast(img, h, w, params.contrast_factor);
        }
        break;
      case ColorOp::kSaturation:
        if (!spec.saturation_enabled) break;
        if (spec.fidelity == Fidelity::kFast) {
          for (size_t i = 0; i < pixels; ++i) {
            internal::SaturateFastPixel(img + 3 * i, params.saturation_factor);
          }
        } else {
          AdjustSaturation(img, pixels, params.saturation_factor);
        }
        break;
      case ColorOp::kHue:
        if (spec.hue_max_delta > 0.0f) AdjustHue(img, pixels, params.hue_delta);
        break;
      case ColorOp::kUnspecified:
        break;
    }
  }
  if (spec.clip) ClipByValue(img, n, 0.0f, 1.0f);
  if (spec.normalize) Normalize(img, pixels, spec.mean, spec.std);
  PackOutput(img, h, w, output.dtype, output.layout, out);
}

// The whole float part from an RGB buffer (stride in_w*3) and a valid crop.
void FusedTransform(const uint8_t* rgb, int in_w, const CropBox& crop,
                    const TransformSpec& spec, const OutputSpec& output,
                    const SampleParams& params, uint8_t* out) {
  Scratch& sc = ThreadScratch();
  const int out_h = spec.height, out_w = spec.width;
  internal::ComputeInterpolation(out_h, crop.height, &sc.ys);
  internal::ComputeInterpolation(out_w, crop.width, &sc.xs);
  sc.x_lo.resize(out_w);
  sc.x_hi.resize(out_w);
  sc.x_lerp.resize(out_w);
  for (int x = 0; x < out_w; ++x) {
    sc.x_lo[x] = static_cast<int32_t>((crop.x + sc.xs[x].lower) * 3);
    sc.x_hi[x] = static_cast<int32_t>((crop.x + sc.xs[x].upper) * 3);
    sc.x_lerp[x] = sc.xs[x].lerp;
  }
  HorizontalKernel horizontal = nullptr;
  RowColorKernel row_color = nullptr;
  switch (internal::ActiveKernelLevel()) {
    case internal::KernelLevel::kAvx512:
      horizontal = &internal::HorizontalRowAvx2;
      row_color = &internal::RowColorAvx512;
      break;
    case internal::KernelLevel::kAvx2:
      horizontal = &internal::HorizontalRowAvx2;
      row_color = &internal::RowColorAvx2;
      break;
    default:
      break;
  }
  // Columns whose 4-byte gathers stay inside the row.
  int vector_cols = 0;
  while (vector_cols < out_w &&
         static_cast<int64_t>(sc.x_hi[vector_cols]) + 4 <= int64_t{in_w} * 3) {
    ++vector_cols;
  }
  internal::RowOps ops;
  ops.brightness = params.brightness_delta != 0.0f;
  ops.delta = params.brightness_delta;
  ops.saturation = spec.saturation_enabled;
  ops.factor = params.saturation_factor;
  ops.fast_saturation = spec.fidelity == Fidelity::kFast;
  ops.clip = spec.clip;
  const size_t row_floats = static_cast<size_t>(out_w) * 3;
  sc.slots.resize(2 * row_floats);
  sc.row.resize(row_floats);
  float* slot[2] = {sc.slots.data(), sc.slots.data() + row_floats};
  int64_t key[2] = {-1, -1};
  const size_t stride = static_cast<size_t>(in_w) * 3;
  auto get_row = [&](int64_t r, int64_t keep) -> const float* {
    if (key[0] == r) return slot[0];
    if (key[1] == r) return slot[1];
    const int victim = key[0] == keep ? 1 : 0;
    HorizontalRow(rgb + static_cast<size_t>(crop.y + r) * stride, sc, out_w,
                  vector_cols, horizontal, slot[victim]);
    key[victim] = r;
    return slot[victim];
  };
  ops.normalize = spec.normalize;
  for (int c = 0; c < 3; ++c) {
    ops.mean[c] = spec.mean[c];
    ops.std[c] = spec.std[c];
  }
  float* row = sc.row.data();
  if (NeedsStagedPath(spec)) {
    // Resize rows as below (same taps, same lerp), stored flipped into the
    // whole image; then the ops one after the other.
    const internal::ScratchTrim<std::vector<float>> trim(&sc.image);
    sc.image.resize(static_cast<size_t>(out_h) * out_w * 3);
    for (int y = 0; y < out_h; ++y) {
      const internal::Tap& t = sc.ys[y];
      const float* lo = get_row(t.lower, -1);
      const float* hi = get_row(t.upper, t.lower);
      LerpRows(lo, hi, t.lerp, out_w * 3, row);
      float* dst = sc.image.data() + static_cast<size_t>(y) * out_w * 3;
      for (int x = 0; x < out_w; ++x) {
        const int xo = params.flip ? out_w - 1 - x : x;
        for (int c = 0; c < 3; ++c) dst[xo * 3 + c] = row[c * out_w + x];
      }
    }
    StagedColorOps(sc.image.data(), out_h, out_w, spec, output, params, out);
    return;
  }
  for (int y = 0; y < out_h; ++y) {
    const internal::Tap& t = sc.ys[y];
    const float* lo = get_row(t.lower, -1);
    const float* hi = get_row(t.upper, t.lower);
    const internal::PackTarget target =
        RowTarget(y, out_h, out_w, params.flip, output, out);
    // The vector kernel does whole blocks of 8 columns, packed; the rest
    // goes through the row buffer.
    const int done =
        row_color != nullptr ? row_color(lo, hi, t.lerp, out_w, ops, target)
                             : 0;
    if (done == out_w) continue;
    const int rest = out_w - done;
    for (int c = 0; c < 3; ++c) {
      const size_t o = static_cast<size_t>(c) * out_w + done;
      LerpRows(lo + o, hi + o, t.lerp, rest, row + o);
      if (ops.brightness) AddRow(row + o, rest, ops.delta);
    }
    if (ops.saturation && ops.fast_saturation) {
      for (int x = done; x < out_w; ++x) {
        float px[3] = {row[x], row[out_w + x], row[2 * out_w + x]};
        internal::SaturateFastPixel(px, ops.factor);
        for (int c = 0; c < 3; ++c) row[c * out_w + x] = px[c];
      }
    } else if (ops.saturation) {
      SaturateRow(row + done, row + out_w + done, row + 2 * out_w + done, rest,
                  ops.factor);
    }
    for (int c = 0; c < 3; ++c) {
      float* p = row + c * out_w + done;
      if (ops.clip) ClipRow(p, rest);
      if (spec.normalize) NormalizeRow(p, rest, spec.mean[c], spec.std[c]);
    }
    PackColumns(row, done, out_w, target);
  }
}

}  // namespace

bool CropBoxInside(const CropBox& c, int h, int w) {
  return c.x >= 0 && c.y >= 0 && c.width > 0 && c.height > 0 &&
         c.x <= w - c.width && c.y <= h - c.height;
}

absl::Status PreprocessJpeg(const uint8_t* data, size_t size,
                            const TransformSpec& spec, const OutputSpec& output,
                            const DecodeLimits& limits,
                            const ParamsFn& draw_params, SampleParams* params,
                            uint8_t* out, StageTimes* times) {
  if (spec.height <= 0 || spec.width <= 0) {
    return absl::InvalidArgumentError("transform: output size must be > 0");
  }
  if (spec.fidelity == Fidelity::kTorchvision) {
    return PreprocessJpegTorchvision(data, size, spec, output, limits,
                                     draw_params, params, out, times);
  }
  const Clock::time_point t0 = Clock::now();
  internal::JpegSession& session = internal::JpegSession::ThreadLocal();
  JpegHeader header;
  absl::Status st = session.ReadHeader(data, size, limits, &header);
  if (!st.ok()) return st;
  SampleParams p = draw_params ? draw_params(header.height, header.width)
                               : SampleParams();
  p.source_height = header.height;
  p.source_width = header.width;
  if (spec.crop == CropMode::kNone) {
    p.crop = CropBox{0, 0, header.height, header.width};
  } else if (!CropBoxInside(p.crop, header.height, header.width)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "crop box (", p.crop.y, ",", p.crop.x, ",", p.crop.height, "x",
        p.crop.width, ") outside the ", header.height, "x", header.width,
        " image"));
  }
  Scratch& sc = ThreadScratch();
  const internal::ScratchTrim<std::vector<uint8_t>> trim(&sc.rgb);
  Clock::time_point t1;
  const bool whole = p.crop.y == 0 && p.crop.x == 0 &&
                     p.crop.height == header.height &&
                     p.crop.width == header.width;
  // The region decodes below fall back to this full decode (TensorFlow's
  // semantics: its pixels and its errors) when they cannot be trusted.
  // `fresh` is false once the session has been used for a decode attempt.
  auto decode_full = [&](bool fresh) -> absl::Status {
    if (!fresh) {
      absl::Status again = session.ReadHeader(data, size, limits, &header);
      if (!again.ok()) return again;
    }
    absl::Status full = session.DecodeFull(&sc.rgb);
    if (!full.ok()) return full;
    t1 = Clock::now();
    FusedTransform(sc.rgb.data(), header.width, p.crop, spec, output, p, out);
    return absl::OkStatus();
  };
  if (spec.fidelity == Fidelity::kTfCompat &&
      (whole || header.progressive)) {
    // Progressive: libjpeg's block smoothing (used while coefficient bits
    // are missing, e.g. damaged or absent scans) reads neighbouring blocks,
    // which scanline cropping/skipping changes (tests/unit/image/
    // jpeg_damage_test.cc); so always decode in full.
    st = decode_full(true);
    if (!st.ok()) return st;
  } else if (spec.fidelity == Fidelity::kTfCompat) {
    // Baseline sequential: the region decode equals the full decode's crop
    // on intact data. Damage it has to recover from (libjpeg warnings during
    // the scan) or an error (possibly one the skipping path alone raises)
    // sends it to the full decode, so the result and any error are exactly
    // TensorFlow's. Only damaged inputs pay for the second decode.
    const int header_warnings = session.warnings();
    int h = 0, w = 0;
    CropBox in_buf;
    st = session.DecodeCrop(p.crop, &sc.rgb, &h, &w, &in_buf);
    if (st.ok() && session.warnings() == header_warnings) {
      t1 = Clock::now();
      FusedTransform(sc.rgb.data(), w, in_buf, spec, output, p, out);
    } else {
      st = decode_full(false);
      if (!st.ok()) return st;
    }
  } else {
    int h = 0, w = 0;
    CropBox scaled;
    st = session.DecodeRegion(p.crop, spec.height, spec.width, &sc.rgb, &h, &w,
                              &scaled);
    if (st.ok()) {
      t1 = Clock::now();
      FusedTransform(sc.rgb.data(), w, scaled, spec, output, p, out);
    } else {
      // FAST may differ from TF_COMPAT but must not fail on an image the
      // full decode accepts: retry in full on the error path.
      st = decode_full(false);
      if (!st.ok()) return st;
    }
  }
  internal::ReportSample(p, t0, t1, params, times);
  return absl::OkStatus();
}

bool ReusableDecode(Fidelity fidelity, JpegStyle* style) {
  if (fidelity == Fidelity::kTfCompat) {
    *style = JpegStyle::kTensorFlow;
    return true;
  }
  if (fidelity == Fidelity::kTorchvision) {
    *style = JpegStyle::kPil;
    return true;
  }
  return false;  // kFast
}

absl::StatusOr<RgbImage> DecodeForReuse(const uint8_t* data, size_t size,
                                        Fidelity fidelity,
                                        const DecodeLimits& limits) {
  RgbImage img;
  const absl::Status st = DecodeForReuseInto(
      data, size, fidelity, limits,
      [&img](int height, int width) {
        img.pixels.resize(static_cast<size_t>(height) * width * 3);
        return img.pixels.data();
      },
      &img.height, &img.width);
  if (!st.ok()) return st;
  return img;
}

absl::Status DecodeForReuseInto(
    const uint8_t* data, size_t size, Fidelity fidelity,
    const DecodeLimits& limits,
    const std::function<uint8_t*(int height, int width)>& allocate,
    int* height, int* width) {
  JpegStyle style = JpegStyle::kTensorFlow;
  if (!ReusableDecode(fidelity, &style)) {
    return absl::FailedPreconditionError("this fidelity's decode is not reusable");
  }
  internal::JpegSession& session = internal::JpegSession::ThreadLocal();
  JpegHeader header;
  absl::Status st = session.ReadHeader(data, size, limits, &header, style);
  if (!st.ok()) return st;
  uint8_t* out = allocate(header.height, header.width);
  if (out == nullptr) return absl::FailedPreconditionError("no memory given");
  st = session.DecodeFull(out);
  if (!st.ok()) return st;
  if (session.warnings() != 0) {
    return absl::FailedPreconditionError("damaged data: not reused");
  }
  *height = header.height;
  *width = header.width;
  return absl::OkStatus();
}

absl::Status PreprocessDecoded(const uint8_t* rgb, int height, int width,
                               const TransformSpec& spec,
                               const OutputSpec& output,
                               const ParamsFn& draw_params,
                               SampleParams* params, uint8_t* out,
                               StageTimes* times) {
  if (spec.height <= 0 || spec.width <= 0) {
    return absl::InvalidArgumentError("transform: output size must be > 0");
  }
  if (spec.fidelity == Fidelity::kTorchvision) {
    return PreprocessDecodedTorchvision(rgb, height, width, spec, output,
                                        draw_params, params, out, times);
  }
  if (spec.fidelity != Fidelity::kTfCompat) {
    return absl::FailedPreconditionError("this fidelity's decode is not reusable");
  }
  const Clock::time_point t0 = Clock::now();
  SampleParams p = draw_params ? draw_params(height, width) : SampleParams();
  p.source_height = height;
  p.source_width = width;
  if (spec.crop == CropMode::kNone) {
    p.crop = CropBox{0, 0, height, width};
  } else if (!CropBoxInside(p.crop, height, width)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "crop box (", p.crop.y, ",", p.crop.x, ",", p.crop.height, "x",
        p.crop.width, ") outside the ", height, "x", width, " image"));
  }
  FusedTransform(rgb, width, p.crop, spec, output, p, out);
  internal::ReportSample(p, t0, t0, params, times);
  return absl::OkStatus();
}

void TransformDecoded(const uint8_t* rgb, int height, int width,
                      const TransformSpec& spec, const OutputSpec& output,
                      const SampleParams& params, uint8_t* out) {
  if (rgb == nullptr || height <= 0 || width <= 0 || spec.height <= 0 ||
      spec.width <= 0) {
    return;
  }
  CropBox crop = params.crop;
  if (spec.crop == CropMode::kNone || !CropBoxInside(crop, height, width)) {
    crop = CropBox{0, 0, height, width};
  }
  FusedTransform(rgb, width, crop, spec, output, params, out);
}

}  // namespace nearprep
