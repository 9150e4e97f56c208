// transform_l1.h: L1 float stages of the nearprep kernel: bilinear resize
// (TF half-pixel centres, no antialias), flip, brightness, saturation (TF's
// CPU HSV round trip), clip, normalise and output packing. Float32 in the
// same operation order as TensorFlow's CPU kernels, compiled without
// fused multiply-add (-ffp-contract=off; HLS: no fma binding).
//
// Thread-safety: pure functions on caller-owned memory.
#ifndef NEARPREP_FPGA_KERNELS_TRANSFORM_L1_H_
#define NEARPREP_FPGA_KERNELS_TRANSFORM_L1_H_

#include <cstdint>

namespace nearprep_fpga {

struct TransformConfig {
  int out_h = 0, out_w = 0;
  int dtype = 0;   // 0 f32, 1 f16, 2 bf16, 3 u8
  int layout = 0;  // 0 NHWC, 1 NCHW
  bool clip = true;
  bool normalize = false;
  float mean[3] = {0, 0, 0};
  float std[3] = {1, 1, 1};
};

// uint8 sample -> [0, 1] float, as the CPU path converts.
constexpr float kInv255 = static_cast<float>(1.0 / 255.0);

// Bytes of one output tensor.
uint64_t OutputBytes(const TransformConfig& cfg);

// One bilinear tap: source indices and the weight of hi.
struct Tap {
  int lo, hi;
  float lerp;
};

// TF's compute_interpolation_weights with HalfPixelScaler: output index i of
// a resize with scale in_size / out_size.
Tap MakeTap(int i, float scale, int in_size);

// The augment / clip / normalise chain of one bilinear-resized pixel (px in
// [0,1] units), in the CPU path's operation order.
void AugmentPixel(float px[3], float delta, bool saturation, float factor, bool clip,
                  bool normalize, const float mean[3], const float std[3]);

// One output element of dtype 0 f32, 1 f16, 2 bf16, 3 u8, little endian into
// out[0..ElementBytes).
void PackElement(float v, int dtype, uint8_t* out);

// TF's adjust_saturation on one pixel.
void SaturatePixel(float* r, float* g, float* b, float factor);

uint16_t FloatToHalf(float f);
uint16_t FloatToBFloat16(float f);

}  // namespace nearprep_fpga

#endif  // NEARPREP_FPGA_KERNELS_TRANSFORM_L1_H_
