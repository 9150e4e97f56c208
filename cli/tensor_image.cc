#include "cli/tensor_image.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cli/npy.h"

namespace nearprep {

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t man = h & 0x3FF;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -24);  // Subnormal or zero.
  } else if (exp == 31) {
    v = man == 0 ? INFINITY : NAN;
  } else {
    v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits |= sign;
  std::memcpy(&v, &bits, 4);
  return v;
}

float BFloat16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

absl::StatusOr<std::vector<RgbImage>> TensorToImages(
    const v1::Tensor& tensor, const std::vector<float>& mean,
    const std::vector<float>& std) {
  if (tensor.shape_size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor.shape: expected 4 dimensions, got ", tensor.shape_size()));
  }
  const bool nchw = tensor.layout() == v1::LAYOUT_NCHW;
  const uint64_t n = tensor.shape(0);
  const uint64_t h = nchw ? tensor.shape(2) : tensor.shape(1);
  const uint64_t w = nchw ? tensor.shape(3) : tensor.shape(2);
  const uint64_t c = nchw ? tensor.shape(1) : tensor.shape(3);
  const size_t elem = WireDTypeSize(tensor.dtype());
  if (elem == 0) return absl::InvalidArgumentError("tensor.dtype: unknown");
  if (c != 3 || h == 0 || w == 0 || h > 65536 || w > 65536 || n > 65536) {
    return absl::InvalidArgumentError("tensor.shape: not [n, h, w, 3] images");
  }
  if (n * h * w * c * elem != tensor.data().size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor.data: ", tensor.data().size(),
                     " bytes do not match the shape"));
  }
  const bool denorm = mean.size() == 3 && std.size() == 3;
  const uint8_t* data = reinterpret_cast<const uint8_t*>(tensor.data().data());
  auto value = [&](size_t idx) -> float {
    const uint8_t* p = data + idx * elem;
    switch (tensor.dtype()) {
      case v1::DTYPE_FLOAT32: {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
      case v1::DTYPE_FLOAT16:
        return HalfToFloat(static_cast<uint16_t>(p[0] | (p[1] << 8)));
      case v1::DTYPE_BFLOAT16:
        return BFloat16ToFloat(static_cast<uint16_t>(p[0] | (p[1] << 8)));
      default:
        return p[0] / 255.0f;
    }
  };
  std::vector<RgbImage> out;
  out.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    RgbImage img(static_cast<int>(h), static_cast<int>(w));
    for (uint64_t y = 0; y < h; ++y) {
      for (uint64_t x = 0; x < w; ++x) {
        uint8_t* px = img.at(static_cast<int>(y), static_cast<int>(x));
        for (uint64_t ch = 0; ch < 3; ++ch) {
          const size_t idx = nchw ? ((i * 3 + ch) * h + y) * w + x
                                  : ((i * h + y) * w + x) * 3 + ch;
          if (tensor.dtype() == v1::DTYPE_UINT8) {
            px[ch] = data[idx];
            continue;
          }
          float v = value(idx);
          if (denorm) v = v * std[ch] + mean[ch];
          if (!(v > 0.0f)) v = 0.0f;  // Also maps NaN to 0.
          if (v > 1.0f) v = 1.0f;
          px[ch] = static_cast<uint8_t>(std::lround(v * 255.0f));
        }
      }
    }
    out.push_back(std::move(img));
  }
  return out;
}

}  // namespace nearprep
