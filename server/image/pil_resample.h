// PIL's Image.resize(size, Image.BILINEAR) on 8-bit RGB, bit for bit
// (Pillow 9.4, libImaging/Resample.c), computed for a window of the output
// only.
//
// PIL's resampler, as FIDELITY_TORCHVISION must reproduce it:
//  - per axis, scale = in / out (double); the filter is stretched by
//    max(scale, 1), so downscaling averages over 2*scale input pixels
//    (antialiasing) and upscaling is plain linear interpolation;
//  - output pixel i is centred at (i + 0.5) * scale; its taps are the input
//    pixels [int(center - support + 0.5), int(center + support + 0.5)),
//    clipped to the image; the weights (triangle filter, normalised to sum 1
//    in double) become integers with 22 fraction bits, rounded half away
//    from zero;
//  - the horizontal pass runs first, over the rows the vertical pass needs,
//    into an 8-bit image: each value is (sum + 2^21) >> 22, clamped to
//    [0, 255]; the vertical pass does the same on that intermediate image.
// Every output pixel depends only on its own taps, so computing a window of
// the output (the centre crop after a resize) gives exactly the bytes PIL's
// full-size resize has there.
//
// With AVX2 (chosen at run time, internal::SetKernelLevelForTesting) both
// passes run 4-16 lanes at a time with the same integer arithmetic per
// lane (pil_resample_avx2.cc); tests compare the two paths byte for byte.
//
// Thread-safety: pure functions on caller-owned memory; PilResizer holds
// per-use scratch and is not shareable between threads.
#ifndef NEARPREP_SERVER_IMAGE_PIL_RESAMPLE_H_
#define NEARPREP_SERVER_IMAGE_PIL_RESAMPLE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "server/spec/types.h"

namespace nearprep {

// Fixed-point fraction bits of PIL's 8-bit resampling coefficients.
inline constexpr int kPilPrecisionBits = 22;

// The taps of outputs [first_out, first_out + count) of one axis resized
// from in_size to out_size pixels.
struct PilAxisTaps {
  int ksize = 0;               // Stride of `weights` per output.
  std::vector<int32_t> start;  // First input pixel of each output.
  std::vector<int32_t> size;   // Number of taps of each output.
  std::vector<int32_t> weights;
};
void ComputePilBilinearTaps(int in_size, int out_size, int first_out,
                            int count, PilAxisTaps* taps);

// A region of an RGB image in memory: pixel (y, x) of the image, for y in
// [y0, y0 + height) and x in [x0, x0 + width), is at
// data + (y - y0) * stride + (x - x0) * 3.
struct RgbRegion {
  const uint8_t* data = nullptr;
  size_t stride = 0;
  int y0 = 0, x0 = 0, height = 0, width = 0;
};

// The input pixels the window `win` of a resize from in_h x in_w to
// out_h x out_w reads: the region to decode.
CropBox PilResizeSourceRegion(int in_h, int in_w, int out_h, int out_w,
                              const CropBox& win);

class PilResizer {
 public:
  // Rows [win.y, win.y + win.height) and columns [win.x, win.x + win.width)
  // of resizing the in_h x in_w image to out_h x out_w (Image.resize with
  // BILINEAR). `src` must cover PilResizeSourceRegion(...). Calls
  // `row_done(y, rgb)` for each output row of the window in order, with
  // win.width interleaved RGB pixels (valid during the call only).
  // Horizontally resized rows are kept in a ring of as many rows as the
  // vertical filter has taps, so memory is bounded by the window width.
  template <typename RowFn>
  void Resize(const RgbRegion& src, int in_h, int in_w, int out_h, int out_w,
              const CropBox& win, RowFn&& row_done) {
    Prepare(src, in_h, in_w, out_h, out_w, win);
    for (int y = 0; y < win.height; ++y) row_done(y, VerticalRow(y));
  }

 private:
  void Prepare(const RgbRegion& src, int in_h, int in_w, int out_h, int out_w,
               const CropBox& win);
  // The horizontal pass of input row `r` into its ring slot.
  void HorizontalRow(int r);
  const uint8_t* VerticalRow(int y);

  PilAxisTaps xs_, ys_;
  RgbRegion src_;
  int width_ = 0;      // Window width.
  int ring_rows_ = 0;  // Slots in `ring_`.
  int next_row_ = 0;   // Next input row the horizontal pass produces.
  std::vector<uint8_t> ring_;
  std::vector<const uint8_t*> taps_;
  std::vector<uint8_t> row_;
  bool use_avx2_ = false;  // internal::ActiveKernelLevel() at Prepare.
  int avx2_columns_ = 0;   // Leading outputs the AVX2 horizontal pass does.
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_IMAGE_PIL_RESAMPLE_H_
