// See pil_resample.h. The double-precision steps below are PIL's, in its
// order (this file is compiled with -ffp-contract=off like the rest of the
// library), so the integer weights come out identical.
#include "server/image/pil_resample.h"

#include <algorithm>
#include <cmath>

#include "server/image/preprocess_kernels.h"

namespace nearprep {
namespace {

// The triangle filter of PIL's BILINEAR, support 1.
inline double Triangle(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Geometry of one axis (PIL's precompute_coeffs for box (0, in_size)).
struct AxisGeometry {
  double scale, filterscale, support, inv_filterscale;
  int ksize;
  AxisGeometry(int in_size, int out_size) {
    scale = static_cast<double>(in_size) / out_size;
    filterscale = scale < 1.0 ? 1.0 : scale;
    support = 1.0 * filterscale;
    inv_filterscale = 1.0 / filterscale;
    ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  }
  double Center(int i) const { return 0.0 + (i + 0.5) * scale; }
  // First input pixel and number of taps of output `i`.
  void Bounds(int in_size, int i, int* lo, int* n) const {
    const double center = Center(i);
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    *lo = xmin;
    *n = xmax - xmin;
  }
};

inline uint8_t Clip8(int32_t v) {
  const int32_t s = v >> kPilPrecisionBits;  // Arithmetic shift, as PIL.
  return static_cast<uint8_t>(s < 0 ? 0 : (s > 255 ? 255 : s));
}

}  // namespace

void ComputePilBilinearTaps(int in_size, int out_size, int first_out,
                            int count, PilAxisTaps* taps) {
  const AxisGeometry g(in_size, out_size);
  taps->ksize = g.ksize;
  taps->start.resize(count);
  taps->size.resize(count);
  taps->weights.assign(static_cast<size_t>(count) * g.ksize, 0);
  std::vector<double> k(g.ksize);
  for (int j = 0; j < count; ++j) {
    const int i = first_out + j;
    const double center = g.Center(i);
    int lo = 0, n = 0;
    g.Bounds(in_size, i, &lo, &n);
    double ww = 0.0;
    for (int x = 0; x < n; ++x) {
      const double w = Triangle((x + lo - center + 0.5) * g.inv_filterscale);
      k[x] = w;
      ww += w;
    }
    int32_t* out = &taps->weights[static_cast<size_t>(j) * g.ksize];
    for (int x = 0; x < n; ++x) {
      double v = k[x];
      if (ww != 0.0) v /= ww;
      const double scaled = v * (1 << kPilPrecisionBits);
      out[x] = static_cast<int32_t>(v < 0 ? -0.5 + scaled : 0.5 + scaled);
    }
    taps->start[j] = lo;
    taps->size[j] = n;
  }
}

CropBox PilResizeSourceRegion(int in_h, int in_w, int out_h, int out_w,
                              const CropBox& win) {
  const AxisGeometry gy(in_h, out_h), gx(in_w, out_w);
  int y_lo, y_n, y_last, y_last_n, x_lo, x_n, x_last, x_last_n;
  gy.Bounds(in_h, win.y, &y_lo, &y_n);
  gy.Bounds(in_h, win.y + win.height - 1, &y_last, &y_last_n);
  gx.Bounds(in_w, win.x, &x_lo, &x_n);
  gx.Bounds(in_w, win.x + win.width - 1, &x_last, &x_last_n);
  CropBox r;
  r.y = y_lo;
  r.x = x_lo;
  r.height = y_last + y_last_n - y_lo;
  r.width = x_last + x_last_n - x_lo;
  return r;
}

void PilResizer::Prepare(const RgbRegion& src, int in_h, int in_w, int out_h,
                         int out_w, const CropBox& win) {
  ComputePilBilinearTaps(in_w, out_w, win.x, win.width, &xs_);
  ComputePilBilinearTaps(in_h, out_h, win.y, win.height, &ys_);
  src_ = src;
  width_ = win.width;
  ring_rows_ = ys_.ksize;
  next_row_ = ys_.start[0];
  const size_t row_bytes = static_cast<size_t>(width_) * 3;
  ring_.resize(static_cast<size_t>(ring_rows_) * row_bytes);
  taps_.resize(ring_rows_);
  row_.resize(row_bytes);
  use_avx2_ = internal::ActiveKernelLevel() != internal::KernelLevel::kScalar;
  // The AVX2 horizontal pass reads 2 bytes past an output's last tap: only
  // outputs with another pixel of the region after that tap (a prefix,
  // since tap ends never decrease) use it.
  avx2_columns_ = 0;
  if (use_avx2_) {
    while (avx2_columns_ < width_ &&
           xs_.start[avx2_columns_] + xs_.size[avx2_columns_] - src_.x0 <
               src_.width) {
      ++avx2_columns_;
    }
  }
}

void PilResizer::HorizontalRow(int r) {
  const size_t row_bytes = static_cast<size_t>(width_) * 3;
  const uint8_t* in =
      src_.data + static_cast<size_t>(r - src_.y0) * src_.stride;
  uint8_t* out = ring_.data() + static_cast<size_t>(r % ring_rows_) * row_bytes;
  const int ks = xs_.ksize;
  int x = 0;
  if (avx2_columns_ > 0) {
    internal::PilHorizontalAvx2(in, src_.x0, xs_.start.data(), xs_.size.data(),
                                xs_.weights.data(), ks, avx2_columns_, out);
    x = avx2_columns_;
  }
  for (; x < width_; ++x) {
    const uint8_t* p = in + static_cast<size_t>(xs_.start[x] - src_.x0) * 3;
    const int32_t* k = &xs_.weights[static_cast<size_t>(x) * ks];
    int32_t s0 = 1 << (kPilPrecisionBits - 1), s1 = s0, s2 = s0;
    for (int t = 0, n = xs_.size[x]; t < n; ++t, p += 3) {
      s0 += p[0] * k[t];
      s1 += p[1] * k[t];
      s2 += p[2] * k[t];
    }
    out[3 * x] = Clip8(s0);
    out[3 * x + 1] = Clip8(s1);
    out[3 * x + 2] = Clip8(s2);
  }
}

const uint8_t* PilResizer::VerticalRow(int y) {
  const int first = ys_.start[y];
  const int n = ys_.size[y];
  // Starts never decrease with y, so rows below `first` are done with.
  if (next_row_ < first) next_row_ = first;
  for (; next_row_ < first + n; ++next_row_) HorizontalRow(next_row_);
  const size_t row_bytes = static_cast<size_t>(width_) * 3;
  for (int t = 0; t < n; ++t) {
    taps_[t] = ring_.data() +
               static_cast<size_t>((first + t) % ring_rows_) * row_bytes;
  }
  const int32_t* k = &ys_.weights[static_cast<size_t>(y) * ys_.ksize];
  size_t i = 0;
  if (use_avx2_) {
    i = internal::PilVerticalAvx2(taps_.data(), k, n, row_bytes, row_.data());
  }
  for (; i < row_bytes; ++i) {
    int32_t s = 1 << (kPilPrecisionBits - 1);
    for (int t = 0; t < n; ++t) s += taps_[t][i] * k[t];
    row_[i] = Clip8(s);
  }
  return row_.data();
}

}  // namespace nearprep
