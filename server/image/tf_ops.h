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
// adjust_contrast (TensorFlow's AdjustContrastv2 CPU kernel) of an h x w
// image: per channel, mean + factor * (x - mean), where mean is the channel's
// float32 sum, formed by the kernel's halving fold (pixel i of the upper
// half added to pixel i of the lower half, repeatedly; the middle pixel of
// an odd count carried over), times float(1 / (h * w)). The summation
// order is the kernel's, so the mean is bit-exact; it depends on pixel
// order (a flipped image has another mean in the last bits).
void AdjustContrast(float* img, int h, int w, float factor);
// adjust_hue (TensorFlow's AdjustHue CPU kernel), per pixel: RGB -> hue in
// [0, 6) with the min/max channel values, hue + delta * 6 wrapped into
// [0, 6), back to RGB, in float32.
void AdjustHue(float* img, size_t num_pixels, float delta);
// adjust_gamma: gain * x ** gamma per element of the n = h * w * 3 values,
// as TensorFlow 2.21's Pow kernel computes x ** gamma on x86: TfPowFloat
// for the first n - n % kTfPowPacket values (Eigen's AVX packet path), the
// C library's powf for the last n % kTfPowPacket (Eigen's scalar path).
void AdjustGamma(float* img, size_t n, float gamma, float gain);
// The float packet size of TensorFlow's x86 wheels (built for AVX).
inline constexpr size_t kTfPowPacket = 8;
// pow(x, y) in float32 as Eigen 3.5's vectorized generic_pow computes it
// (the version TensorFlow 2.21 ships): a double-word log2 of the mantissa,
// y * log2(x) in double words split into n + r, 2**r = exp(hi) * (1 + lo)
// with hi + lo = ln2 * r, times 2**n; IEEE pow's special cases. Evaluated
// lane by lane without fused multiply-adds (TensorFlow's x86 wheels have
// none). Within 1 ulp of the correctly rounded power, which it differs
// from in about a quarter of the values.
float TfPowFloat(float x, float y);

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
