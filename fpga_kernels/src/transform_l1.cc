// L1 float stages; see transform_l1.h.
#include "transform_l1.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "nearprep_kernel_abi.h"

namespace nearprep_fpga {

// TF's compute_interpolation_weights with HalfPixelScaler.
Tap MakeTap(int i, float scale, int in_size) {
#pragma HLS INLINE
  const float in = (static_cast<float>(i) + 0.5f) * scale - 0.5f;
  const float in_f = std::floor(in);
  Tap t;
  t.lo = std::max(static_cast<int>(in_f), 0);
  t.hi = std::min(static_cast<int>(std::ceil(in)), in_size - 1);
  t.lerp = in - in_f;
  return t;
}

namespace {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

uint16_t FloatToHalf(float f) {
  uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) {
    return static_cast<uint16_t>(sign | (ax > 0x7F800000u ? 0x7E00u : 0x7C00u));
  }
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // overflow
  if (ax < 0x38800000u) {
    // Half subnormal: let the FPU round (RNE) by adding 0.5f.
    const float r = BitsFloat(ax) + 0.5f;
    return static_cast<uint16_t>(sign | (FloatBits(r) - 0x3F000000u));
  }
  const uint32_t odd = (ax >> 13) & 1u;
  ax += (static_cast<uint32_t>(15 - 127) << 23) + 0xFFFu;
  ax += odd;
  return static_cast<uint16_t>(sign | (ax >> 13));
}

uint16_t FloatToBFloat16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

void SaturatePixel(float* pr, float* pg, float* pb, float factor) {
#pragma HLS INLINE
  const float r = *pr, g = *pg, b = *pb;
  // rgb -> hsv
  const float vv = std::max(r, std::max(g, b));
  const float range = vv - std::min(r, std::min(g, b));
  float s = vv > 0 ? range / vv : 0.0f;
  const float norm = 1.0f / (6.0f * range);
  float hh;
  if (r == vv) {
    hh = norm * (g - b);
  } else if (g == vv) {
    hh = static_cast<float>(static_cast<double>(norm * (b - r)) + 2.0 / 6.0);
  } else {
    hh = static_cast<float>(static_cast<double>(norm * (r - g)) + 4.0 / 6.0);
  }
  if (range <= 0.0f) hh = 0;
  if (hh < 0.0f) hh = hh + 1;
  s = std::min(1.0f, std::max(0.0f, s * factor));
  // hsv -> rgb
  const float c = s * vv;
  const float m = vv - c;
  const float dh = hh * 6;
  // int(dh) is undefined for NaN / out-of-range values (possible with a
  // non-finite brightness delta); TF lands in its default (grey) branch
  // there on x86, so map them to it. Identical for every finite |dh| < 8.
  const int k = (dh > -8.0f && dh < 8.0f) ? static_cast<int>(dh) : -1;
  float fm = dh;
  // TF's unbounded wrap loops; hue is in [0, 1] here, so a few rounds
  // suffice (bounded for hardware; identical for |dh| < 16).
  // Fixed eight rounds, each predicated (no data-dependent exit inside the
  // pipelined caller): once a round does nothing, every later one does
  // nothing either, so this is the bounded loop with an early exit.
wrap_up:
  for (int i = 0; i < 8; ++i) {
#pragma HLS UNROLL
    if (fm <= 0) fm += 2.0f;
  }
wrap_down:
  for (int i = 0; i < 8; ++i) {
#pragma HLS UNROLL
    if (fm >= 2.0f) fm -= 2.0f;
  }
  const float x = c * (1 - std::fabs(fm - 1));
  float rr, gg, bb;
  switch (k) {
    case 0: rr = c; gg = x; bb = 0; break;
    case 1: rr = x; gg = c; bb = 0; break;
    case 2: rr = 0; gg = c; bb = x; break;
    case 3: rr = 0; gg = x; bb = c; break;
    case 4: rr = x; gg = 0; bb = c; break;
    case 5: rr = c; gg = 0; bb = x; break;
    default: rr = 0; gg = 0; bb = 0;
  }
  *pr = rr + m;
  *pg = gg + m;
  *pb = bb + m;
}

uint64_t OutputBytes(const TransformConfig& cfg) {
  const uint64_t el =
      cfg.dtype == kDTypeF32 ? 4 : (cfg.dtype == kDTypeU8 ? 1 : 2);
  return static_cast<uint64_t>(cfg.out_h) * cfg.out_w * 3 * el;
}

void AugmentPixel(float px[3], float delta, bool saturation, float factor, bool clip,
                  bool normalize, const float mean[3], const float std[3]) {
#pragma HLS INLINE
  for (int c = 0; c < 3; ++c) px[c] = px[c] + delta;
  if (saturation) SaturatePixel(&px[0], &px[1], &px[2], factor);
  if (clip) {
    for (int c = 0; c < 3; ++c) px[c] = std::max(std::min(px[c], 1.0f), 0.0f);
  }
  if (normalize) {
    for (int c = 0; c < 3; ++c) px[c] = (px[c] - mean[c]) / std[c];
  }
}

void PackElement(float v, int dtype, uint8_t* out) {
#pragma HLS INLINE
  switch (dtype) {
    case kDTypeF32: {
      const uint32_t u = FloatBits(v);
      for (int k = 0; k < 4; ++k) out[k] = static_cast<uint8_t>(u >> (8 * k));
      break;
    }
    case kDTypeF16: {
      const uint16_t u = FloatToHalf(v);
      out[0] = static_cast<uint8_t>(u);
      out[1] = static_cast<uint8_t>(u >> 8);
      break;
    }
    case kDTypeBF16: {
      const uint16_t u = FloatToBFloat16(v);
      out[0] = static_cast<uint8_t>(u);
      out[1] = static_cast<uint8_t>(u >> 8);
      break;
    }
    default: {  // kDTypeU8
      // NaN -> 0 (as the CPU path's FloatToU8); a NaN cast is undefined.
      const float f = std::isnan(v) ? 0.0f : std::min(std::max(v, 0.0f), 1.0f) * 255.0f;
      out[0] = static_cast<uint8_t>(std::round(f));
      break;
    }
  }
}

}  // namespace nearprep_fpga
