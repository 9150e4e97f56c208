// The op tables of torchvision 0.14's automatic augmentation policies
// (torchvision/transforms/autoaugment.py): each policy's
// `_augmentation_space` (op order, signed flag, float32 magnitudes) and
// AutoAugment's IMAGENET sub-policies. The epoch plan draws indices into
// them (server/data/epoch_plan.cc); the torchvision path applies the ops
// (server/image/torchvision_augment.h). tests/unit/image/pil_ops_oracle_test.py
// compares every table with torchvision's own.
//
// The magnitudes are computed as torch 1.13 computes them on the CPU:
//   torch.linspace(start, end, n) in float32, as its AVX2 kernel (torch's
//     CPU capability on the machines we test; an AVX-512 dispatch may
//     differ in the last bit of a few entries): step = (end - start) /
//     (n - 1) in float32; entry i = fma(step, i, start) for i < n / 2, else
//     fma(-step, n - 1 - i, end); while 16 entries remain, two 8-lane
//     vectors whose lane k is (that formula at the vector's start) + k *
//     step;
//   Posterize: 8 - round(i / ((n - 1) / d)) with the division in float32
//     and round half to even (AutoAugment and RandAugment d = 4,
//     TrivialAugmentWide d = 6);
//   the Python doubles 150.0 / 331.0 * size are rounded to float32 once
//     (torch's Scalar to float).
//
// Thread-safety: pure functions.
#ifndef NEARPREP_SERVER_SPEC_AUGMENT_SPACE_H_
#define NEARPREP_SERVER_SPEC_AUGMENT_SPACE_H_

#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "server/spec/types.h"

namespace nearprep {

struct AugmentOpMeta {
  AugmentOp op = AugmentOp::kIdentity;
  bool is_signed = false;
  std::vector<float> magnitudes;  // Empty: the op takes magnitude 0.0.
};

namespace augment_internal {

inline std::vector<float> Linspace(float start, float end, int n) {
  std::vector<float> v(static_cast<size_t>(n));
  if (n == 1) {
    v[0] = start;
    return v;
  }
  const float step = (end - start) / static_cast<float>(n - 1);
  const int half = n / 2;
  // The kernel's scalar formula (compiled with FMA contraction).
  const auto scalar = [&](int i) {
    return i < half ? std::fma(step, static_cast<float>(i), start)
                    : std::fma(-step, static_cast<float>(n - 1 - i), end);
  };
  int i = 0;
  // Pairs of 8-lane vectors while 16 entries remain: lane k of a vector
  // starting at c is scalar(c) + k * step (not fused).
  for (; i + 16 <= n; i += 16) {
    for (int c = i; c < i + 16; c += 8) {
      const float base = scalar(c);
      for (int k = 0; k < 8; ++k) {
        v[static_cast<size_t>(c + k)] = base + static_cast<float>(k) * step;
      }
    }
  }
  for (; i < n; ++i) v[static_cast<size_t>(i)] = scalar(i);
  return v;
}

// k - round_half_even(i / divisor) for i in [0, n), divisor = (n - 1) / d
// as a Python double rounded to float32 by torch's true division.
inline std::vector<float> Posterize(int k, int n, double d) {
  std::vector<float> v(static_cast<size_t>(n));
  const float divisor = static_cast<float>(static_cast<double>(n - 1) / d);
  for (int i = 0; i < n; ++i) {
    const float q = static_cast<float>(i) / divisor;
    v[static_cast<size_t>(i)] =
        static_cast<float>(k - static_cast<int>(std::nearbyint(q)));
  }
  return v;
}

}  // namespace augment_internal

// Bins of TrivialAugmentWide and RandAugment (num_magnitude_bins); AutoAugment
// uses 10.
inline constexpr int kAugmentBins = 31;
inline constexpr int kAutoAugmentBins = 10;

// The op space of `policy` in torchvision's order, for an output of
// height x width.
inline std::vector<AugmentOpMeta> AugmentSpace(AugmentPolicy policy,
                                               int height, int width) {
  using augment_internal::Linspace;
  using augment_internal::Posterize;
  std::vector<AugmentOpMeta> s;
  const auto add = [&s](AugmentOp op, bool is_signed, std::vector<float> m) {
    s.push_back(AugmentOpMeta{op, is_signed, std::move(m)});
  };
  switch (policy) {
    case AugmentPolicy::kNone:
      break;
    case AugmentPolicy::kTrivialAugmentWide: {
      const int n = kAugmentBins;
      add(AugmentOp::kIdentity, false, {});
      add(AugmentOp::kShearX, true, Linspace(0.0f, 0.99f, n));
      add(AugmentOp::kShearY, true, Linspace(0.0f, 0.99f, n));
      add(AugmentOp::kTranslateX, true, Linspace(0.0f, 32.0f, n));
      add(AugmentOp::kTranslateY, true, Linspace(0.0f, 32.0f, n));
      add(AugmentOp::kRotate, true, Linspace(0.0f, 135.0f, n));
      add(AugmentOp::kBrightness, true, Linspace(0.0f, 0.99f, n));
      add(AugmentOp::kColor, true, Linspace(0.0f, 0.99f, n));
      add(AugmentOp::kContrast, true, Linspace(0.0f, 0.99f, n));
      add(AugmentOp::kSharpness, true, Linspace(0.0f, 0.99f, n));
      add(AugmentOp::kPosterize, false, Posterize(8, n, 6.0));
      add(AugmentOp::kSolarize, false, Linspace(255.0f, 0.0f, n));
      add(AugmentOp::kAutoContrast, false, {});
      add(AugmentOp::kEqualize, false, {});
      break;
    }
    case AugmentPolicy::kRandAugment:
    case AugmentPolicy::kAutoAugmentImagenet: {
      const bool rand = policy == AugmentPolicy::kRandAugment;
      const int n = rand ? kAugmentBins : kAutoAugmentBins;
      const float tx = static_cast<float>(150.0 / 331.0 * width);
      const float ty = static_cast<float>(150.0 / 331.0 * height);
      if (rand) add(AugmentOp::kIdentity, false, {});
      add(AugmentOp::kShearX, true, Linspace(0.0f, 0.3f, n));
      add(AugmentOp::kShearY, true, Linspace(0.0f, 0.3f, n));
      add(AugmentOp::kTranslateX, true, Linspace(0.0f, tx, n));
      add(AugmentOp::kTranslateY, true, Linspace(0.0f, ty, n));
      add(AugmentOp::kRotate, true, Linspace(0.0f, 30.0f, n));
      add(AugmentOp::kBrightness, true, Linspace(0.0f, 0.9f, n));
      add(AugmentOp::kColor, true, Linspace(0.0f, 0.9f, n));
      add(AugmentOp::kContrast, true, Linspace(0.0f, 0.9f, n));
      add(AugmentOp::kSharpness, true, Linspace(0.0f, 0.9f, n));
      add(AugmentOp::kPosterize, false, Posterize(8, n, 4.0));
      add(AugmentOp::kSolarize, false, Linspace(255.0f, 0.0f, n));
      add(AugmentOp::kAutoContrast, false, {});
      add(AugmentOp::kEqualize, false, {});
      if (!rand) add(AugmentOp::kInvert, false, {});
      break;
    }
  }
  return s;
}

// AutoAugment(IMAGENET)'s sub-policies: two (op, probability, magnitude bin
// or -1 for none) each, in torchvision's order.
struct AutoAugmentStep {
  AugmentOp op;
  float probability;
  int magnitude_bin;
};
inline const std::array<std::array<AutoAugmentStep, 2>, 25>&
AutoAugmentImagenetPolicies() {
  using O = AugmentOp;
  static const std::array<std::array<AutoAugmentStep, 2>, 25> kPolicies = {{
      {{{O::kPosterize, 0.4f, 8}, {O::kRotate, 0.6f, 9}}},
      {{{O::kSolarize, 0.6f, 5}, {O::kAutoContrast, 0.6f, -1}}},
      {{{O::kEqualize, 0.8f, -1}, {O::kEqualize, 0.6f, -1}}},
      {{{O::kPosterize, 0.6f, 7}, {O::kPosterize, 0.6f, 6}}},
      {{{O::kEqualize, 0.4f, -1}, {O::kSolarize, 0.2f, 4}}},
      {{{O::kEqualize, 0.4f, -1}, {O::kRotate, 0.8f, 8}}},
      {{{O::kSolarize, 0.6f, 3}, {O::kEqualize, 0.6f, -1}}},
      {{{O::kPosterize, 0.8f, 5}, {O::kEqualize, 1.0f, -1}}},
      {{{O::kRotate, 0.2f, 3}, {O::kSolarize, 0.6f, 8}}},
      {{{O::kEqualize, 0.6f, -1}, {O::kPosterize, 0.4f, 6}}},
      {{{O::kRotate, 0.8f, 8}, {O::kColor, 0.4f, 0}}},
      {{{O::kRotate, 0.4f, 9}, {O::kEqualize, 0.6f, -1}}},
      {{{O::kEqualize, 0.0f, -1}, {O::kEqualize, 0.8f, -1}}},
      {{{O::kInvert, 0.6f, -1}, {O::kEqualize, 1.0f, -1}}},
      {{{O::kColor, 0.6f, 4}, {O::kContrast, 1.0f, 8}}},
      {{{O::kRotate, 0.8f, 8}, {O::kColor, 1.0f, 2}}},
      {{{O::kColor, 0.8f, 8}, {O::kSolarize, 0.8f, 7}}},
      {{{O::kSharpness, 0.4f, 7}, {O::kInvert, 0.6f, -1}}},
      {{{O::kShearX, 0.6f, 5}, {O::kEqualize, 1.0f, -1}}},
      {{{O::kColor, 0.4f, 0}, {O::kEqualize, 0.6f, -1}}},
      {{{O::kEqualize, 0.4f, -1}, {O::kSolarize, 0.2f, 4}}},
      {{{O::kSolarize, 0.6f, 5}, {O::kAutoContrast, 0.6f, -1}}},
      {{{O::kInvert, 0.6f, -1}, {O::kEqualize, 1.0f, -1}}},
      {{{O::kColor, 0.6f, 4}, {O::kContrast, 1.0f, 8}}},
      {{{O::kEqualize, 0.8f, -1}, {O::kEqualize, 0.6f, -1}}},
  }};
  return kPolicies;
}

}  // namespace nearprep

#endif  // NEARPREP_SERVER_SPEC_AUGMENT_SPACE_H_
