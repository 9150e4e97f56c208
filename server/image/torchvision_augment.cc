// torchvision 0.14 auto-augment tables and _apply_op; see
// torchvision_augment.h. Sources: torchvision/transforms/autoaugment.py
// (_apply_op, the _augmentation_space methods, AutoAugment._get_policies)
// and torch 1.13's linspace CPU kernel (RangeFactoriesKernel.cpp).
#include "server/image/torchvision_augment.h"

#include <cmath>
#include <utility>

namespace nearprep {
namespace {

// CPython mathmodule.c: degrees(x) = x * (180 / pi).
constexpr double kRadToDeg = 180.0 / 3.141592653589793238462643383279502884;

// torch.linspace(start, end, n) in float32 as torch 1.13's CPU kernel
// (RangeFactoriesKernel.cpp linspace_kernel) computes it with `kernel`'s
// object code; see the header. start / end are the Python doubles torch
// converts to float.
std::vector<float> TorchLinspace(double start_d, double end_d, int n,
                                 TorchCpuKernel kernel) {
  std::vector<float> out(static_cast<size_t>(n > 0 ? n : 0));
  if (n <= 0) return out;
  const float start = static_cast<float>(start_d);
  const float end = static_cast<float>(end_d);
  if (n == 1) {  // steps == 1: fill_(start)
    out[0] = start;
    return out;
  }
  const bool fused = kernel != TorchCpuKernel::kDefault;
  const int lanes = kernel == TorchCpuKernel::kAvx512 ? 16 : 8;
  const float step = (end - start) / static_cast<float>(n - 1);
  const int halfway = n / 2;
  auto at = [&](int i) {
    const float k = static_cast<float>(i < halfway ? i : n - i - 1);
    if (fused) {
      return i < halfway ? std::fma(step, k, start) : std::fma(-step, k, end);
    }
    return i < halfway ? start + step * k : end - step * k;
  };
  int i = 0;
  // cpu_serial_kernel_vec: two vectors per iteration while 2 * lanes remain,
  // each Vectorized<float>::arange(base, step).
  for (; i <= n - 2 * lanes; i += 2 * lanes) {
    for (int block = i; block < i + 2 * lanes; block += lanes) {
      const float base = at(block);
      for (int k = 0; k < lanes; ++k) {
        out[static_cast<size_t>(block + k)] =
            base + static_cast<float>(k) * step;
      }
    }
  }
  for (; i < n; ++i) out[static_cast<size_t>(i)] = at(i);
  return out;
}

// 8 - (torch.arange(n) / ((n - 1) / divisor)).round().int(): int64 / Python
// float promotes to float32; round is half to even.
std::vector<float> PosterizeBits(int n, double divisor) {
  std::vector<float> out(static_cast<size_t>(n > 0 ? n : 0));
  const float d = static_cast<float>(static_cast<double>(n - 1) / divisor);
  for (int i = 0; i < n; ++i) {
    const float q = std::nearbyint(static_cast<float>(i) / d);
    out[static_cast<size_t>(i)] = static_cast<float>(8 - static_cast<int>(q));
  }
  return out;
}

AugmentOpMeta Signed(AugmentOp op, std::vector<float> m) {
  return AugmentOpMeta{op, true, std::move(m)};
}
AugmentOpMeta Unsigned(AugmentOp op, std::vector<float> m = {}) {
  return AugmentOpMeta{op, false, std::move(m)};
}

}  // namespace

const char* AugmentOpName(AugmentOp op) {
  switch (op) {
    case AugmentOp::kIdentity:
      return "Identity";
    case AugmentOp::kShearX:
      return "ShearX";
    case AugmentOp::kShearY:
      return "ShearY";
    case AugmentOp::kTranslateX:
      return "TranslateX";
    case AugmentOp::kTranslateY:
      return "TranslateY";
    case AugmentOp::kRotate:
      return "Rotate";
    case AugmentOp::kBrightness:
      return "Brightness";
    case AugmentOp::kColor:
      return "Color";
    case AugmentOp::kContrast:
      return "Contrast";
    case AugmentOp::kSharpness:
      return "Sharpness";
    case AugmentOp::kPosterize:
      return "Posterize";
    case AugmentOp::kSolarize:
      return "Solarize";
    case AugmentOp::kAutoContrast:
      return "AutoContrast";
    case AugmentOp::kEqualize:
      return "Equalize";
    case AugmentOp::kInvert:
      return "Invert";
  }
  return "?";
}

std::vector<AugmentOpMeta> AugmentSpace(AugmentPolicy policy, int num_bins,
                                        int height, int width) {
  return AugmentSpace(policy, num_bins, height, width, TorchCpuKernel::kAvx2);
}

std::vector<AugmentOpMeta> AugmentSpace(AugmentPolicy policy, int num_bins,
                                        int height, int width,
                                        TorchCpuKernel kernel) {
  using Op = AugmentOp;
  auto linspace = [kernel](double start, double end, int steps) {
    return TorchLinspace(start, end, steps, kernel);
  };
  const int n = num_bins;
  std::vector<AugmentOpMeta> s;
  switch (policy) {
    case AugmentPolicy::kNone:
      break;
    case AugmentPolicy::kTrivialAugmentWide:
      // TrivialAugmentWide._augmentation_space(num_bins).
      s.push_back(Unsigned(Op::kIdentity));
      s.push_back(Signed(Op::kShearX, linspace(0.0, 0.99, n)));
      s.push_back(Signed(Op::kShearY, linspace(0.0, 0.99, n)));
      s.push_back(Signed(Op::kTranslateX, linspace(0.0, 32.0, n)));
      s.push_back(Signed(Op::kTranslateY, linspace(0.0, 32.0, n)));
      s.push_back(Signed(Op::kRotate, linspace(0.0, 135.0, n)));
      s.push_back(Signed(Op::kBrightness, linspace(0.0, 0.99, n)));
      s.push_back(Signed(Op::kColor, linspace(0.0, 0.99, n)));
      s.push_back(Signed(Op::kContrast, linspace(0.0, 0.99, n)));
      s.push_back(Signed(Op::kSharpness, linspace(0.0, 0.99, n)));
      s.push_back(Unsigned(Op::kPosterize, PosterizeBits(n, 6.0)));
      s.push_back(Unsigned(Op::kSolarize, linspace(255.0, 0.0, n)));
      s.push_back(Unsigned(Op::kAutoContrast));
      s.push_back(Unsigned(Op::kEqualize));
      break;
    case AugmentPolicy::kRandAugment:
    case AugmentPolicy::kAutoAugmentImagenet: {
      // RandAugment / AutoAugment ._augmentation_space(num_bins,
      // (height, width)): the same entries, RandAugment with Identity first
      // and AutoAugment with Invert last.
      const bool rand = policy == AugmentPolicy::kRandAugment;
      if (rand) s.push_back(Unsigned(Op::kIdentity));
      s.push_back(Signed(Op::kShearX, linspace(0.0, 0.3, n)));
      s.push_back(Signed(Op::kShearY, linspace(0.0, 0.3, n)));
      s.push_back(
          Signed(Op::kTranslateX, linspace(0.0, 150.0 / 331.0 * width, n)));
      s.push_back(
          Signed(Op::kTranslateY, linspace(0.0, 150.0 / 331.0 * height, n)));
      s.push_back(Signed(Op::kRotate, linspace(0.0, 30.0, n)));
      s.push_back(Signed(Op::kBrightness, linspace(0.0, 0.9, n)));
      s.push_back(Signed(Op::kColor, linspace(0.0, 0.9, n)));
      s.push_back(Signed(Op::kContrast, linspace(0.0, 0.9, n)));
      s.push_back(Signed(Op::kSharpness, linspace(0.0, 0.9, n)));
      s.push_back(Unsigned(Op::kPosterize, PosterizeBits(n, 4.0)));
      s.push_back(Unsigned(Op::kSolarize, linspace(255.0, 0.0, n)));
      s.push_back(Unsigned(Op::kAutoContrast));
      s.push_back(Unsigned(Op::kEqualize));
      if (!rand) s.push_back(Unsigned(Op::kInvert));
      break;
    }
  }
  return s;
}

const std::array<std::array<AutoAugmentStep, 2>, 25>&
AutoAugmentImagenetPolicies() {
  // AutoAugment._get_policies(AutoAugmentPolicy.IMAGENET), in order.
  static const std::array<std::array<AutoAugmentStep, 2>, 25> kPolicies = {{
      {{{AugmentOp::kPosterize, 0.4f, 8}, {AugmentOp::kRotate, 0.6f, 9}}},
      {{{AugmentOp::kSolarize, 0.6f, 5}, {AugmentOp::kAutoContrast, 0.6f, -1}}},
      {{{AugmentOp::kEqualize, 0.8f, -1}, {AugmentOp::kEqualize, 0.6f, -1}}},
      {{{AugmentOp::kPosterize, 0.6f, 7}, {AugmentOp::kPosterize, 0.6f, 6}}},
      {{{AugmentOp::kEqualize, 0.4f, -1}, {AugmentOp::kSolarize, 0.2f, 4}}},
      {{{AugmentOp::kEqualize, 0.4f, -1}, {AugmentOp::kRotate, 0.8f, 8}}},
      {{{AugmentOp::kSolarize, 0.6f, 3}, {AugmentOp::kEqualize, 0.6f, -1}}},
      {{{AugmentOp::kPosterize, 0.8f, 5}, {AugmentOp::kEqualize, 1.0f, -1}}},
      {{{AugmentOp::kRotate, 0.2f, 3}, {AugmentOp::kSolarize, 0.6f, 8}}},
      {{{AugmentOp::kEqualize, 0.6f, -1}, {AugmentOp::kPosterize, 0.4f, 6}}},
      {{{AugmentOp::kRotate, 0.8f, 8}, {AugmentOp::kColor, 0.4f, 0}}},
      {{{AugmentOp::kRotate, 0.4f, 9}, {AugmentOp::kEqualize, 0.6f, -1}}},
      {{{AugmentOp::kEqualize, 0.0f, -1}, {AugmentOp::kEqualize, 0.8f, -1}}},
      {{{AugmentOp::kInvert, 0.6f, -1}, {AugmentOp::kEqualize, 1.0f, -1}}},
      {{{AugmentOp::kColor, 0.6f, 4}, {AugmentOp::kContrast, 1.0f, 8}}},
      {{{AugmentOp::kRotate, 0.8f, 8}, {AugmentOp::kColor, 1.0f, 2}}},
      {{{AugmentOp::kColor, 0.8f, 8}, {AugmentOp::kSolarize, 0.8f, 7}}},
      {{{AugmentOp::kSharpness, 0.4f, 7}, {AugmentOp::kInvert, 0.6f, -1}}},
      {{{AugmentOp::kShearX, 0.6f, 5}, {AugmentOp::kEqualize, 1.0f, -1}}},
      {{{AugmentOp::kColor, 0.4f, 0}, {AugmentOp::kEqualize, 0.6f, -1}}},
      {{{AugmentOp::kEqualize, 0.4f, -1}, {AugmentOp::kSolarize, 0.2f, 4}}},
      {{{AugmentOp::kSolarize, 0.6f, 5}, {AugmentOp::kAutoContrast, 0.6f, -1}}},
      {{{AugmentOp::kInvert, 0.6f, -1}, {AugmentOp::kEqualize, 1.0f, -1}}},
      {{{AugmentOp::kColor, 0.6f, 4}, {AugmentOp::kContrast, 1.0f, 8}}},
      {{{AugmentOp::kEqualize, 0.8f, -1}, {AugmentOp::kEqualize, 0.6f, -1}}},
  }};
  return kPolicies;
}

void ApplyAugmentOp(pil::RgbImage* img, AugmentOp op, float magnitude,
                    const uint8_t fill[3]) {
  const double m = magnitude;  // _apply_op's Python float
  static const int kNoTranslate[2] = {0, 0};
  static const double kOrigin[2] = {0.0, 0.0};
  switch (op) {
    case AugmentOp::kIdentity:
      break;
    case AugmentOp::kShearX: {
      // F.affine(angle=0.0, translate=[0, 0], scale=1.0,
      // shear=[math.degrees(math.atan(magnitude)), 0.0], center=[0, 0]).
      const double shear[2] = {std::atan(m) * kRadToDeg, 0.0};
      pil::Affine(img, 0.0, kNoTranslate, 1.0, shear, kOrigin, fill);
      break;
    }
    case AugmentOp::kShearY: {
      const double shear[2] = {0.0, std::atan(m) * kRadToDeg};
      pil::Affine(img, 0.0, kNoTranslate, 1.0, shear, kOrigin, fill);
      break;
    }
    case AugmentOp::kTranslateX:
    case AugmentOp::kTranslateY: {
      // F.affine(translate=[int(magnitude), 0] (or [0, int(...)]),
      // shear=[0.0, 0.0], default center). int() truncates toward zero.
      const int t = static_cast<int>(std::trunc(m));
      const int translate[2] = {op == AugmentOp::kTranslateX ? t : 0,
                                op == AugmentOp::kTranslateY ? t : 0};
      const double shear[2] = {0.0, 0.0};
      pil::Affine(img, 0.0, translate, 1.0, shear, nullptr, fill);
      break;
    }
    case AugmentOp::kRotate:
      pil::Rotate(img, m, fill);
      break;
    case AugmentOp::kBrightness:
      pil::AdjustBrightness(img, static_cast<float>(1.0 + m));
      break;
    case AugmentOp::kColor:
      pil::AdjustSaturation(img, static_cast<float>(1.0 + m));
      break;
    case AugmentOp::kContrast:
      pil::AdjustContrast(img, static_cast<float>(1.0 + m));
      break;
    case AugmentOp::kSharpness:
      pil::AdjustSharpness(img, static_cast<float>(1.0 + m));
      break;
    case AugmentOp::kPosterize:
      pil::Posterize(img, static_cast<int>(std::trunc(m)));
      break;
    case AugmentOp::kSolarize:
      pil::Solarize(img, m);
      break;
    case AugmentOp::kAutoContrast:
      pil::AutoContrast(img);
      break;
    case AugmentOp::kEqualize:
      pil::Equalize(img);
      break;
    case AugmentOp::kInvert:
      pil::Invert(img);
      break;
  }
}

}  // namespace nearprep
