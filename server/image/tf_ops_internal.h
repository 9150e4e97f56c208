// Building blocks shared by the scalar reference ops (tf_ops.cc), the fused
// fast path (preprocess.cc) and the tests: interpolation taps, the per-pixel
// HSV round trip and the scalar dtype conversions (also used by the
// torchvision path). Not a public interface.
//
// Thread-safety: pure functions; U8ToFloatTable() is initialised once.
#ifndef NEARPREP_SERVER_IMAGE_TF_OPS_INTERNAL_H_
#define NEARPREP_SERVER_IMAGE_TF_OPS_INTERNAL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "server/spec/types.h"

namespace nearprep {
namespace internal {

// float(i) * float(1/255) for i in 0..255.
const float* U8ToFloatTable();

// One output coordinate of TensorFlow's half-pixel bilinear resize.
struct Tap {
  int64_t lower = 0;
  int64_t upper = 0;
  float lerp = 0;
};
// scale = float(in)/float(out); src = (i + 0.5f) * scale - 0.5f;
// lower = max(floor(src), 0); upper = min(ceil(src), in - 1);
// lerp = src - floor(src).
void ComputeInterpolation(int out_size, int in_size, std::vector<Tap>* taps);

// TensorFlow's adjust_saturation CPU kernel helpers (adjust_saturation_op.cc).
void RgbToHsv(float r, float g, float b, float* h, float* s, float* v);
void HsvToRgb(float h, float s, float v, float* r, float* g, float* b);
// p[0..2] = RGB of one pixel, adjusted in place.
void SaturatePixel(float* p, float factor);

// TensorFlow's adjust_hue CPU kernel (adjust_hue_op.cc), one pixel in place:
// p[0..2] = RGB.
void HuePixel(float* p, float delta);

// FloatToHalf: IEEE binary16, round to nearest even; NaN -> quiet NaN;
// overflow -> inf. FloatToBFloat16: round to nearest even; NaN -> quiet NaN.
// FloatToU8: round(clip(x, 0, 1) * 255), halves away from zero; NaN -> 0.
inline uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // Inf or NaN (NaN stays a quiet NaN).
    return static_cast<uint16_t>(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
  }
  if (a >= 0x47800000u) {  // >= 65536: infinity.
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (a < 0x38800000u) {  // Below 2^-14: half subnormal or zero.
    // Adding 0.5 aligns the value so that the float adder does the
    // round-to-nearest-even at the half subnormal's last bit (2^-24).
    float af;
    std::memcpy(&af, &a, 4);
    const float shifted = af + 0.5f;
    uint32_t bits;
    std::memcpy(&bits, &shifted, 4);
    return static_cast<uint16_t>(sign | (bits - 0x3f000000u));
  }
  // Normal: rebias the exponent and round the 13 dropped bits to nearest
  // even; a carry may run into the exponent (and up to infinity), which is
  // the correct result.
  const uint32_t odd = (a >> 13) & 1u;
  a += 0xc8000000u + 0xfffu + odd;  // (15 - 127) << 23, mod 2^32.
  return static_cast<uint16_t>(sign | (a >> 13));
}

inline uint16_t FloatToBFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // Quiet NaN.
  }
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

inline uint8_t FloatToU8(float f) {
  // clip(x, 0, 1) * 255, then round half away from zero. NaN gives 0.
  float c = std::min(f, 1.0f);
  c = std::max(c, 0.0f);
  if (!(c >= 0.0f)) c = 0.0f;
  const float s = c * 255.0f;
  const int t = static_cast<int>(s);  // s in [0, 255]: truncation.
  return static_cast<uint8_t>(t + (s - static_cast<float>(t) >= 0.5f ? 1 : 0));
}

// Stores `v` as one element of `dtype` at `o` (DTypeSize(dtype) bytes,
// unaligned), with the conversions above.
inline void StoreElement(float v, DType dtype, uint8_t* o) {
  switch (dtype) {
    case DType::kFloat32:
      std::memcpy(o, &v, 4);
      break;
    case DType::kFloat16: {
      const uint16_t b = FloatToHalf(v);
      std::memcpy(o, &b, 2);
      break;
    }
    case DType::kBFloat16: {
      const uint16_t b = FloatToBFloat16(v);
      std::memcpy(o, &b, 2);
      break;
    }
    case DType::kUint8:
      *o = FloatToU8(v);
      break;
  }
}


}  // namespace internal
}  // namespace nearprep

#endif  // NEARPREP_SERVER_IMAGE_TF_OPS_INTERNAL_H_
