// Turns a wire tensor (any dtype, NHWC or NCHW) back into 8-bit RGB images
// for viewing: float values are un-normalised with the request's mean/std
// when given, clipped to [0, 1] and scaled by 255 (rounded), uint8 is taken
// as is. Also the small RGB canvas type that the contact sheet draws on.
//
// Thread-safety: free functions and plain values.
#ifndef NEARPREP_CLIENT_CPP_SRC_TENSOR_IMAGE_H_
#define NEARPREP_CLIENT_CPP_SRC_TENSOR_IMAGE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "nearprep/v1/nearprep.pb.h"

namespace nearprep {

// Interleaved RGB, row-major, 3 bytes per pixel.
struct RgbImage {
  int height = 0;
  int width = 0;
  std::vector<uint8_t> pixels;

  RgbImage() = default;
  RgbImage(int h, int w, uint8_t fill = 0)
      : height(h), width(w), pixels(static_cast<size_t>(h) * w * 3, fill) {}
  uint8_t* at(int y, int x) {
    return &pixels[(static_cast<size_t>(y) * width + x) * 3];
  }
  const uint8_t* at(int y, int x) const {
    return &pixels[(static_cast<size_t>(y) * width + x) * 3];
  }
};

// IEEE binary16 / bfloat16 bit patterns to float32.
float HalfToFloat(uint16_t h);
float BFloat16ToFloat(uint16_t b);

// One image per tensor entry. `mean`/`std`: empty, or 3 values each (the
// Transform's normalisation, undone before clipping). INVALID_ARGUMENT when
// the shape, dtype or byte count is inconsistent.
absl::StatusOr<std::vector<RgbImage>> TensorToImages(
    const v1::Tensor& tensor, const std::vector<float>& mean = {},
    const std::vector<float>& std = {});

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_SRC_TENSOR_IMAGE_H_
