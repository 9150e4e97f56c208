// TensorFlow's float image ops, bit for bit (TF_COMPAT), on interleaved
// HWC float32 images with 3 channels.
//
// These files are compiled with -ffp-contract=off: TensorFlow's CPU kernels
// round after every multiply and add, so a fused multiply-add would change
// the last bit.
//
// Thread-safety: pure functions on caller-owned memory.
#ifndef NEARPREP_SERVER_IMAGE_TF_OPS_H_
#define NEARPREP_SERVER_IMAGE_TF_OPS_H_

#include <cstddef>
#include <cstdint>

#include "server/spec/types.h"

namespace nearprep {

// convert_image_dtype(uint8 -> float32): float(x) * float(1/255).
void ConvertU8ToFloat(const uint8_t* in, size_t n, float* out);

// resize(method=bilinear, antialias=False): half-pixel centers,
// scale = float(in)/float(out). Equal size copies. Reads the sub-rectangle
// `crop` of `in` (in_h x in_w) as the input image (crop.height x crop.width).
void ResizeBilinear(const float* in, int in_h, int in_w, const CropBox& crop,
                    float* out, int out_h, int out_w);
// Same, reading uint8 input and converting each tap with ConvertU8ToFloat's
// rule first (identical results to convert-then-resize, without the
// full-size float image).
void ResizeBilinearU8(const uint8_t* in, int in_h, int in_w,
                      const CropBox& crop, float* out, int out_h, int out_w);

// random_flip_left_right's effect: reverse the width axis.
void FlipLeftRight(float* img, int h, int w);
// adjust_brightness: x + delta, no clipping.
void AdjustBrightness(float* img, size_t n, float delta);
// adjust_saturation, TF's CPU kernel (HSV round trip), per pixel.
void AdjustSaturation(float* img, size_t num_pixels, float factor);
// clip_by_value(x, lo, hi) = max(min(x, hi), lo).
void ClipByValue(float* img, size_t n, float lo, float hi);
// (x - mean[c]) / std[c].
void Normalize(float* img, size_t num_pixels, const float mean[3],
               const float std[3]);

// Writes `num_pixels` HWC float pixels (h*w) into `out` in the requested dtype
// and layout. kUint8: round(clip(x,0,1)*255), half away from zero.
void PackOutput(const float* img, int h, int w, DType dtype, Layout layout,
                uint8_t* out);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_IMAGE_TF_OPS_H_
