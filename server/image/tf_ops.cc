// Scalar reference implementations of TensorFlow's float image ops. They
// define TF_COMPAT semantics; the fused fast path in preprocess.cc must
// reproduce them bit for bit (tests/unit/image checks that it does).
#include "server/image/tf_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
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

}  // namespace internal

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
