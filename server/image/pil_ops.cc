// Pillow 9.4 / torchvision 0.14 PIL ops; see pil_ops.h. Each function names
// the Pillow or torchvision source it follows. The float and double types
// below are deliberate: they are the types of the C or Python expression
// being reproduced.
#include "server/image/pil_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace nearprep {
namespace pil {
namespace {

using Lut = std::array<uint8_t, 256>;

size_t PixelCount(const RgbImage& img) {
  return static_cast<size_t>(img.height) * static_cast<size_t>(img.width);
}

// Pillow's CLIP8 of an int (Convert.c, _imaging.c _point).
inline uint8_t Clip8(int v) {
  return static_cast<uint8_t>(v <= 0 ? 0 : (v < 256 ? v : 255));
}

// Blend.c ImagingBlend for one sample: in1 is the degenerate image's value,
// in2 the image's. Float arithmetic: (float)in1 + alpha * (float)(in2 - in1).
// Inside [0, 1] the result is truncated to UINT8 unclipped (it cannot leave
// [0, 256) there); outside, it is clipped at <= 0 and >= 255 first.
inline uint8_t BlendSample(int in1, int in2, float alpha, bool extrapolate) {
  const float t =
      static_cast<float>(in1) + alpha * static_cast<float>(in2 - in1);
  if (extrapolate) {
    if (t <= 0.0f) return 0;
    if (t >= 255.0f) return 255;
  }
  return static_cast<uint8_t>(static_cast<int>(t));
}

bool IsExtrapolation(float alpha) { return !(alpha >= 0 && alpha <= 1.0f); }

// Blend against a constant degenerate value: one LUT for all samples.
void BlendWithConstant(RgbImage* img, int degenerate, float alpha) {
  if (alpha == 1.0f) return;  // Blend.c shortcut: copy of image 2
  if (alpha == 0.0f) {        // Blend.c shortcut: copy of image 1
    std::fill(img->data.begin(), img->data.end(),
              static_cast<uint8_t>(degenerate));
    return;
  }
  const bool extrapolate = IsExtrapolation(alpha);
  Lut lut;
  for (int v = 0; v < 256; ++v) {
    lut[static_cast<size_t>(v)] =
        BlendSample(degenerate, v, alpha, extrapolate);
  }
  for (uint8_t& v : img->data) v = lut[v];
}

// Blend against a per-sample degenerate image of the same layout.
void BlendWithImage(RgbImage* img, const std::vector<uint8_t>& degenerate,
                    float alpha) {
  if (alpha == 1.0f) return;
  if (alpha == 0.0f) {
    img->data = degenerate;
    return;
  }
  const bool extrapolate = IsExtrapolation(alpha);
  uint8_t* out = img->data.data();
  const uint8_t* deg = degenerate.data();
  const size_t n = img->data.size();
  for (size_t i = 0; i < n; ++i) {
    out[i] = BlendSample(deg[i], out[i], alpha, extrapolate);
  }
}

// Convert.c rgb2l: ITU-R 601-2 luma in 16-bit fixed point, rounded.
inline uint8_t Luma(const uint8_t* rgb) {
  return static_cast<uint8_t>(
      (rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >> 16);
}

void ApplyLut(RgbImage* img, const Lut& lut) {
  for (uint8_t& v : img->data) v = lut[v];
}

void ApplyLuts(RgbImage* img, const std::array<Lut, 3>& luts) {
  uint8_t* p = img->data.data();
  const size_t n = PixelCount(*img);
  for (size_t i = 0; i < n; ++i, p += 3) {
    p[0] = luts[0][p[0]];
    p[1] = luts[1][p[1]];
    p[2] = luts[2][p[2]];
  }
}

using Histograms = std::array<std::array<int64_t, 256>, 3>;

// Image.histogram() of an RGB image: 256 counts per band.
Histograms ChannelHistograms(const RgbImage& img) {
  Histograms h{};
  const uint8_t* p = img.data.data();
  const size_t n = PixelCount(img);
  for (size_t i = 0; i < n; ++i, p += 3) {
    ++h[0][p[0]];
    ++h[1][p[1]];
    ++h[2][p[2]];
  }
  return h;
}

// Python's float % float (CPython float_rem): the result has the divisor's
// sign.
double PyFloatMod(double x, double y) {
  double mod = std::fmod(x, y);
  if (mod != 0.0) {
    if ((y < 0) != (mod < 0)) mod += y;
  } else {
    mod = std::copysign(0.0, y);
  }
  return mod;
}

// Python's round(x, 15) on a float: correctly rounded to 15 decimals (dtoa
// mode 3), then parsed back. glibc's printf rounds the exact binary value
// to nearest-even as dtoa does, and strtod is correctly rounded.
double PyRound15(double x) {
  if (!std::isfinite(x)) return x;
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%.15f", x);
  return std::strtod(buf, nullptr);
}

// CPython mathmodule.c: radians(x) = x * (pi / 180), degrees(x) = x * (180 /
// pi).
constexpr double kDegToRad = 3.141592653589793238462643383279502884 / 180.0;
constexpr double kRadToDeg = 180.0 / 3.141592653589793238462643383279502884;

// Geometry.c COORD(v): (v < 0.0 ? -1 : (int)v). Values beyond int range
// (undefined in C; x86 gives INT_MIN) map to an index that is out of range
// either way.
inline int Coord(double v) {
  if (!(v >= 0.0)) return -1;  // also NaN, as (int)NaN is INT_MIN on x86
  if (v >= 2147483647.0) return std::numeric_limits<int>::max();
  return static_cast<int>(v);
}

// Geometry.c FLOOR(v) of the 16.16 FIX macro.
inline int32_t FixedFloor(double v) {
  v = v * 65536.0 + 0.5;
  return v < 0.0 ? static_cast<int32_t>(std::floor(v))
                 : static_cast<int32_t>(v);
}

inline void CopyPixel(uint8_t* dst, const uint8_t* src) {
  dst[0] = src[0];
  dst[1] = src[1];
  dst[2] = src[2];
}

// Geometry.c ImagingRotate180 / ImagingRotate90 / ImagingRotate270 (the
// latter two only for square images here).
void Rotate180(RgbImage* img) {
  const int h = img->height, w = img->width;
  std::vector<uint8_t> out(img->data.size());
  for (int y = 0; y < h; ++y) {
    const uint8_t* in =
        &img->data[static_cast<size_t>(y) * static_cast<size_t>(w) * 3];
    uint8_t* o =
        &out[(static_cast<size_t>(h - 1 - y) * static_cast<size_t>(w)) * 3];
    for (int x = 0; x < w; ++x)
      CopyPixel(o + static_cast<size_t>(w - 1 - x) * 3,
                in + static_cast<size_t>(x) * 3);
  }
  img->data.swap(out);
}

// ROTATE_90 (counter-clockwise): out[w-1-x][y] = in[y][x];
// ROTATE_270: out[x][h-1-y] = in[y][x]. Square images only (n x n).
void RotateSquare(RgbImage* img, bool ccw90) {
  const int n = img->width;
  const size_t sn = static_cast<size_t>(n);
  std::vector<uint8_t> out(img->data.size());
  for (int y = 0; y < n; ++y) {
    const uint8_t* in = &img->data[static_cast<size_t>(y) * sn * 3];
    for (int x = 0; x < n; ++x) {
      const size_t orow = static_cast<size_t>(ccw90 ? n - 1 - x : x);
      const size_t ocol = static_cast<size_t>(ccw90 ? y : n - 1 - y);
      CopyPixel(&out[(orow * sn + ocol) * 3], in + static_cast<size_t>(x) * 3);
    }
  }
  img->data.swap(out);
}

}  // namespace

void AdjustBrightness(RgbImage* img, float factor) {
  // ImageEnhance.Brightness: degenerate = Image.new(mode, size, 0).
  BlendWithConstant(img, 0, factor);
}

void AdjustContrast(RgbImage* img, float factor) {
  // ImageEnhance.Contrast: mean = int(ImageStat.Stat(im.convert("L")).mean[0]
  // + 0.5). ImageStat sums j * h[j] into a Python float (exact below 2^53)
  // and divides by the pixel count.
  const size_t n = PixelCount(*img);
  uint64_t sum = 0;
  const uint8_t* p = img->data.data();
  for (size_t i = 0; i < n; ++i, p += 3) sum += Luma(p);
  int mean = 0;
  if (n > 0) {
    const double m = static_cast<double>(sum) / static_cast<double>(n);
    mean = static_cast<int>(m + 0.5);
  }
  BlendWithConstant(img, mean, factor);
}

void AdjustSaturation(RgbImage* img, float factor) {
  // ImageEnhance.Color: degenerate = im.convert("L").convert("RGB").
  if (factor == 1.0f) return;
  const size_t n = PixelCount(*img);
  const bool extrapolate = IsExtrapolation(factor);
  uint8_t* p = img->data.data();
  for (size_t i = 0; i < n; ++i, p += 3) {
    const int l = Luma(p);
    if (factor == 0.0f) {
      p[0] = p[1] = p[2] = static_cast<uint8_t>(l);
    } else {
      p[0] = BlendSample(l, p[0], factor, extrapolate);
      p[1] = BlendSample(l, p[1], factor, extrapolate);
      p[2] = BlendSample(l, p[2], factor, extrapolate);
    }
  }
}

void AdjustSharpness(RgbImage* img, float factor) {
  // ImageEnhance.Sharpness: degenerate = im.filter(ImageFilter.SMOOTH).
  // Filter.c ImagingFilter: an image smaller than the kernel is copied
  // unfiltered, so the blend gives the image back.
  const int h = img->height, w = img->width;
  if (h < 3 || w < 3 || factor == 1.0f) return;
  // _imaging.c _filter: kernel entries are floats divided by the float
  // divisor 13; Filter.c adds 0.5 to the offset (0) for rounding.
  const float k1 = 1.0f / 13.0f;
  const float k5 = 5.0f / 13.0f;
  const float offset = 0.5f;
  std::vector<uint8_t> smooth(img->data);  // border rows/columns stay as is
  const size_t stride = static_cast<size_t>(w) * 3;
  const uint8_t* src = img->data.data();
  for (int y = 1; y < h - 1; ++y) {
    const uint8_t* up = src + static_cast<size_t>(y - 1) * stride;
    const uint8_t* mid = up + stride;
    const uint8_t* down = mid + stride;
    uint8_t* out = smooth.data() + static_cast<size_t>(y) * stride;
    for (size_t i = 3; i < stride - 3; ++i) {
      // Filter.c ImagingFilter3x3: ss = offset; ss += row y+1 (kernel[0..2]);
      // ss += row y (kernel[3..5]); ss += row y-1 (kernel[6..8]); each row
      // is ((a * k0 + b * k1) + c * k2) in float.
      float ss = offset;
      ss += static_cast<float>(down[i - 3]) * k1 +
            static_cast<float>(down[i]) * k1 +
            static_cast<float>(down[i + 3]) * k1;
      ss += static_cast<float>(mid[i - 3]) * k1 +
            static_cast<float>(mid[i]) * k5 +
            static_cast<float>(mid[i + 3]) * k1;
      ss += static_cast<float>(up[i - 3]) * k1 +
            static_cast<float>(up[i]) * k1 + static_cast<float>(up[i + 3]) * k1;
      // Filter.c clip8(float).
      out[i] = ss <= 0.0f ? 0
                          : (ss >= 255.0f
                                 ? 255
                                 : static_cast<uint8_t>(static_cast<int>(ss)));
    }
  }
  BlendWithImage(img, smooth, factor);
}

void AdjustHue(RgbImage* img, double hue_factor) {
  // torchvision F_pil.adjust_hue: np_h += np.uint8(hue_factor * 255). numpy
  // 1.24 casts the double through a C cast: truncation toward zero, and
  // negative values wrap modulo 256 (np.uint8(-127.5) == 129).
  const double shifted = hue_factor * 255.0;
  const int64_t whole = static_cast<int64_t>(std::trunc(shifted));
  const uint8_t shift =
      static_cast<uint8_t>(static_cast<uint64_t>(whole) & 0xFF);
  const size_t n = PixelCount(*img);
  uint8_t* p = img->data.data();
  for (size_t i = 0; i < n; ++i, p += 3) {
    const uint8_t r = p[0], g = p[1], b = p[2];
    // Convert.c rgb2hsv_row (float variables, double literals).
    const uint8_t maxc = std::max(r, std::max(g, b));
    const uint8_t minc = std::min(r, std::min(g, b));
    uint8_t uh = 0, us = 0;
    const uint8_t uv = maxc;
    if (minc != maxc) {
      const float cr = static_cast<float>(maxc - minc);
      const float s = cr / static_cast<float>(maxc);
      const float rc = static_cast<float>(maxc - r) / cr;
      const float gc = static_cast<float>(maxc - g) / cr;
      const float bc = static_cast<float>(maxc - b) / cr;
      float hh;
      if (r == maxc) {
        hh = bc - gc;
      } else if (g == maxc) {
        hh = static_cast<float>(2.0 + static_cast<double>(rc) -
                                static_cast<double>(bc));
      } else {
        hh = static_cast<float>(4.0 + static_cast<double>(gc) -
                                static_cast<double>(rc));
      }
      hh = static_cast<float>(
          std::fmod(static_cast<double>(hh) / 6.0 + 1.0, 1.0));
      uh = Clip8(static_cast<int>(static_cast<double>(hh) * 255.0));
      us = Clip8(static_cast<int>(static_cast<double>(s) * 255.0));
    }
    // The uint8 addition wraps (numpy, errstate over="ignore").
    const uint8_t hue = static_cast<uint8_t>(uh + shift);
    // Convert.c hsv2rgb.
    if (us == 0) {
      p[0] = p[1] = p[2] = uv;
      continue;
    }
    const double h6 =
        static_cast<double>(static_cast<float>(hue)) * 6.0 / 255.0;
    const int sector = static_cast<int>(std::floor(h6));
    const float f = static_cast<float>(
        h6 - static_cast<double>(static_cast<float>(sector)));
    const float fs =
        static_cast<float>(static_cast<double>(static_cast<float>(us)) / 255.0);
    const double v = static_cast<double>(static_cast<float>(uv));
    const uint8_t up = Clip8(
        static_cast<int>(std::round(v * (1.0 - static_cast<double>(fs)))));
    const uint8_t uq = Clip8(
        static_cast<int>(std::round(v * (1.0 - static_cast<double>(fs * f)))));
    const uint8_t ut = Clip8(static_cast<int>(std::round(
        v * (1.0 - static_cast<double>(fs) * (1.0 - static_cast<double>(f))))));
    switch (sector % 6) {
      case 0:
        p[0] = uv;
        p[1] = ut;
        p[2] = up;
        break;
      case 1:
        p[0] = uq;
        p[1] = uv;
        p[2] = up;
        break;
      case 2:
        p[0] = up;
        p[1] = uv;
        p[2] = ut;
        break;
      case 3:
        p[0] = up;
        p[1] = uq;
        p[2] = uv;
        break;
      case 4:
        p[0] = ut;
        p[1] = up;
        p[2] = uv;
        break;
      default:
        p[0] = uv;
        p[1] = up;
        p[2] = uq;
        break;
    }
  }
}

void Posterize(RgbImage* img, int bits) {
  // ImageOps.posterize: lut[i] = i & ~(2 ** (8 - bits) - 1).
  bits = std::clamp(bits, 0, 8);
  const int mask = ~((1 << (8 - bits)) - 1);
  Lut lut;
  for (int i = 0; i < 256; ++i)
    lut[static_cast<size_t>(i)] = static_cast<uint8_t>(i & mask);
  ApplyLut(img, lut);
}

void Solarize(RgbImage* img, double threshold) {
  // ImageOps.solarize: lut[i] = i if i < threshold else 255 - i.
  Lut lut;
  for (int i = 0; i < 256; ++i) {
    lut[static_cast<size_t>(i)] =
        static_cast<uint8_t>(static_cast<double>(i) < threshold ? i : 255 - i);
  }
  ApplyLut(img, lut);
}

void AutoContrast(RgbImage* img) {
  // ImageOps.autocontrast(cutoff=0, ignore=None): per band, lo/hi = first
  // and last non-empty bins; hi <= lo keeps the band; else scale = 255.0 /
  // (hi - lo), offset = -lo * scale, lut[ix] = clip(int(ix * scale + offset)).
  const Histograms hist = ChannelHistograms(*img);
  std::array<Lut, 3> luts;
  for (size_t c = 0; c < 3; ++c) {
    const auto& h = hist[c];
    int lo = 0, hi = 255;
    while (lo < 255 && h[static_cast<size_t>(lo)] == 0) ++lo;
    while (hi > 0 && h[static_cast<size_t>(hi)] == 0) --hi;
    for (int ix = 0; ix < 256; ++ix) {
      int v = ix;
      if (hi > lo) {
        const double scale = 255.0 / static_cast<double>(hi - lo);
        const double offset = static_cast<double>(-lo) * scale;
        v = static_cast<int>(static_cast<double>(ix) * scale + offset);
        v = std::clamp(v, 0, 255);
      }
      luts[c][static_cast<size_t>(ix)] = static_cast<uint8_t>(v);
    }
  }
  ApplyLuts(img, luts);
}

void Equalize(RgbImage* img) {
  // ImageOps.equalize: per band, with histo the non-zero counts: fewer than
  // two keeps the band; step = (sum(histo) - histo[-1]) // 255, zero keeps
  // the band; else n = step // 2 and lut[i] = n // step before n += h[i].
  // _imaging.c _point clips the table with CLIP8.
  const Histograms hist = ChannelHistograms(*img);
  std::array<Lut, 3> luts;
  for (size_t c = 0; c < 3; ++c) {
    const auto& h = hist[c];
    int64_t total = 0, last = 0;
    int nonzero = 0;
    for (int64_t count : h) {
      if (count != 0) {
        total += count;
        last = count;
        ++nonzero;
      }
    }
    const int64_t step = nonzero <= 1 ? 0 : (total - last) / 255;
    int64_t n = step / 2;
    for (size_t i = 0; i < 256; ++i) {
      if (step == 0) {
        luts[c][i] = static_cast<uint8_t>(i);
      } else {
        const int64_t v = n / step;
        luts[c][i] = static_cast<uint8_t>(v > 255 ? 255 : v);
        n += h[i];
      }
    }
  }
  ApplyLuts(img, luts);
}

void Invert(RgbImage* img) {
  // ImageOps.invert: lut[i] = 255 - i.
  for (uint8_t& v : img->data) v = static_cast<uint8_t>(255 - v);
}

void FlipLeftRight(RgbImage* img) {
  // Geometry.c ImagingFlipLeftRight: out[y][w-1-x] = in[y][x].
  if (img->width < 2) return;
  const size_t w = static_cast<size_t>(img->width);
  for (int y = 0; y < img->height; ++y) {
    uint8_t* row = img->data.data() + static_cast<size_t>(y) * w * 3;
    for (size_t a = 0, b = w - 1; a < b; ++a, --b) {
      for (size_t c = 0; c < 3; ++c) std::swap(row[a * 3 + c], row[b * 3 + c]);
    }
  }
}

void TransformAffine(RgbImage* img, const double a[6], const uint8_t fill[3]) {
  // Image.transform: the output starts as Image.new(mode, size, fillcolor);
  // _transform2 passes fill=0 (a fillcolor was given), so Geometry.c only
  // writes the pixels that map inside the input.
  const int w = img->width, h = img->height;
  const size_t sw = static_cast<size_t>(w);
  std::vector<uint8_t> out(img->data.size());
  for (size_t i = 0; i < out.size(); i += 3) CopyPixel(&out[i], fill);
  const uint8_t* in = img->data.data();
  auto src = [&](int y, int x) {
    return in + (static_cast<size_t>(y) * sw + static_cast<size_t>(x)) * 3;
  };
  auto dst = [&](int y, int x) {
    return out.data() +
           (static_cast<size_t>(y) * sw + static_cast<size_t>(x)) * 3;
  };
  if (a[1] == 0 && a[3] == 0) {
    // Geometry.c ImagingScaleAffine: x positions tabulated once (xintab is
    // calloc'ed: columns inside [xmin, xmax) never set read column 0).
    std::vector<int> xintab(sw, 0);
    int xmin = w, xmax = 0;
    double xo = a[2] + a[0] * 0.5;
    for (int x = 0; x < w; ++x) {
      const int xin = Coord(xo);
      if (xin >= 0 && xin < w) {
        xmax = x + 1;
        if (x < xmin) xmin = x;
        xintab[static_cast<size_t>(x)] = xin;
      }
      xo += a[0];
    }
    double yo = a[5] + a[4] * 0.5;
    for (int y = 0; y < h; ++y) {
      const int yi = Coord(yo);
      if (yi >= 0 && yi < h) {
        for (int x = xmin; x < xmax; ++x)
          CopyPixel(dst(y, x), src(yi, xintab[static_cast<size_t>(x)]));
      }
      yo += a[4];
    }
  } else {
    auto check_fixed = [&](int x, int y) {
      return std::fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 &&
             std::fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
    };
    if (check_fixed(0, 0) && check_fixed(w, h) && check_fixed(0, h) &&
        check_fixed(w, 0)) {
      // Geometry.c affine_fixed: 16.16 fixed point, arithmetic >> 16.
      const int32_t a0 = FixedFloor(a[0]), a1 = FixedFloor(a[1]);
      const int32_t a3 = FixedFloor(a[3]), a4 = FixedFloor(a[4]);
      int32_t a2 = FixedFloor(a[2] + a[0] * 0.5 + a[1] * 0.5);
      int32_t a5 = FixedFloor(a[5] + a[3] * 0.5 + a[4] * 0.5);
      for (int y = 0; y < h; ++y) {
        // Sums wrap as Pillow's int arithmetic does on x86 (unsigned here,
        // to stay defined in C++).
        uint32_t xx = static_cast<uint32_t>(a2), yy = static_cast<uint32_t>(a5);
        for (int x = 0; x < w; ++x) {
          const int32_t xin = static_cast<int32_t>(xx) >> 16;
          if (xin >= 0 && xin < w) {
            const int32_t yin = static_cast<int32_t>(yy) >> 16;
            if (yin >= 0 && yin < h) CopyPixel(dst(y, x), src(yin, xin));
          }
          xx += static_cast<uint32_t>(a0);
          yy += static_cast<uint32_t>(a3);
        }
        a2 = static_cast<int32_t>(static_cast<uint32_t>(a2) +
                                  static_cast<uint32_t>(a1));
        a5 = static_cast<int32_t>(static_cast<uint32_t>(a5) +
                                  static_cast<uint32_t>(a4));
      }
    } else {
      // Geometry.c ImagingTransformAffine's double-precision loop.
      double xo = a[2] + a[1] * 0.5 + a[0] * 0.5;
      double yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
      for (int y = 0; y < h; ++y) {
        double xx = xo, yy = yo;
        for (int x = 0; x < w; ++x) {
          const int xin = Coord(xx);
          if (xin >= 0 && xin < w) {
            const int yin = Coord(yy);
            if (yin >= 0 && yin < h) CopyPixel(dst(y, x), src(yin, xin));
          }
          xx += a[0];
          yy += a[3];
        }
        xo += a[1];
        yo += a[4];
      }
    }
  }
  img->data.swap(out);
}

void Affine(RgbImage* img, double angle, const int translate[2], double scale,
            const double shear[2], const double* center,
            const uint8_t fill[3]) {
  // torchvision 0.14 functional.affine (PIL branch): center defaults to
  // [width * 0.5, height * 0.5]; _get_inverse_affine_matrix(center, angle,
  // translate, scale, shear) in Python doubles, term by term as written.
  const double cx = center ? center[0] : img->width * 0.5;
  const double cy = center ? center[1] : img->height * 0.5;
  const double tx = translate[0], ty = translate[1];
  const double rot = angle * kDegToRad;
  const double sx = shear[0] * kDegToRad;
  const double sy = shear[1] * kDegToRad;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b =
      -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d =
      -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  double m[6] = {d, -b, 0.0, -c, a, 0.0};
  for (double& v : m) v = v / scale;
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  TransformAffine(img, m, fill);
}

void Rotate(RgbImage* img, double angle_degrees, const uint8_t fill[3]) {
  // Pillow 9.4 Image.rotate(angle, NEAREST, expand=False, center=None,
  // translate=None, fillcolor): angle %= 360.0, then exact transposes.
  const double angle = PyFloatMod(angle_degrees, 360.0);
  if (angle == 0) return;  // self.copy()
  if (angle == 180) {
    Rotate180(img);
    return;
  }
  if ((angle == 90 || angle == 270) && img->width == img->height) {
    RotateSquare(img, angle == 90);
    return;
  }
  const double w = img->width, h = img->height;
  const double rcx = w / 2.0, rcy = h / 2.0;
  const double rad = -(angle * kDegToRad);
  double m[6] = {PyRound15(std::cos(rad)),  PyRound15(std::sin(rad)), 0.0,
                 PyRound15(-std::sin(rad)), PyRound15(std::cos(rad)), 0.0};
  // matrix[2], matrix[5] = transform(-cx - 0, -cy - 0, matrix), then += c.
  const double x = -rcx - 0.0, y = -rcy - 0.0;
  const double m2 = m[0] * x + m[1] * y + m[2];
  const double m5 = m[3] * x + m[4] * y + m[5];
  m[2] = m2 + rcx;
  m[5] = m5 + rcy;
  TransformAffine(img, m, fill);
}

}  // namespace pil
}  // namespace nearprep
