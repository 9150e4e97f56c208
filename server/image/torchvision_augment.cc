// torchvision 0.14's _apply_op; see torchvision_augment.h. Source:
// torchvision/transforms/autoaugment.py (the tables are
// server/spec/augment_space.h).
#include "server/image/torchvision_augment.h"

#include <cmath>

namespace nearprep {
namespace {

// CPython mathmodule.c: degrees(x) = x * (180 / pi).
constexpr double kRadToDeg = 180.0 / 3.141592653589793238462643383279502884;

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
