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
//     CPU capability on the machines we test; TorchCpuKernel below):
//     step = (end - start) / (n - 1) in float32; entry i = fma(step, i,
//     start) for i < n / 2, else fma(-step, n - 1 - i, end); while 16
//     entries remain, two 8-lane vectors whose lane k is (that formula at
//     the vector's start) + k * step;
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

// Which of torch 1.13's CPU linspace kernels to reproduce. ATen picks one at
// run time from the CPU (overridable with ATEN_CPU_CAPABILITY), and the
// float32 tables differ between them in the last bit of some entries:
//   kAvx2 (what the daemon serves): the scalar formula fused (fma), blocks
//     of 8 lanes while 16 entries remain;
//   kDefault: the same without fusing (base x86-64 code has no FMA);
//   kAvx512: fused, blocks of 16 while 32 remain (for 31 and 10 bins: the
//     fused scalar formula throughout). Inferred from torch's source, not
//     checked against torch (no AVX-512 machine was at hand).
// pil_ops_oracle_test checks kAvx2 and kDefault against torch itself.
enum class TorchCpuKernel : uint8_t { kAvx2 = 0, kDefault, kAvx512 };

struct AugmentOpMeta {
  AugmentOp op = AugmentOp::kIdentity;
  bool is_signed = false;
  std::vector<float> magnitudes;  // Empty: the op takes magnitude 0.0.
};

namespace augment_internal {

// torch.linspace(start, end, n) in float32 as torch 1.13's CPU kernel
// computes it with `kernel`'s object code (see TorchCpuKernel).
inline std::vector<float> Linspace(float start, float end, int n,
                                   TorchCpuKernel kernel) {
  std::vector<float> v(static_cast<size_t>(n));
  if (n == 1) {  // steps == 1: fill_(start)
    v[0] = start;
    return v;
  }
  const bool fused = kernel != TorchCpuKernel::kDefault;
  const int lanes = kernel == TorchCpuKernel::kAvx512 ? 16 : 8;
  const float step = (end - start) / static_cast<float>(n - 1);
  const int half = n / 2;
  const auto scalar = [&](int i) {
    const float k = static_cast<float>(i < half ? i : n - 1 - i);
    if (fused) return i < half ? std::fma(step, k, start) : std::fma(-step, k, end);
    return i < half ? start + step * k : end - step * k;
  };
  int i = 0;
  // cpu_serial_kernel_vec: two vectors per iteration while 2 * lanes
  // entries remain, each Vectorized<float>::arange(base, step): lane k is
  // base + k * step, unfused.
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    for (int c = i; c < i + 2 * lanes; c += lanes) {
      const float base = scalar(c);
      for (int k = 0; k < lanes; ++k) {
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
inline std::vector<AugmentOpMeta> AugmentSpace(
    AugmentPolicy policy, int height, int width,
    TorchCpuKernel kernel = TorchCpuKernel::kAvx2) {
  using augment_internal::Posterize;
  const auto Linspace = [kernel](float start, float end, int n) {
    return augment_internal::Linspace(start, end, n, kernel);
  };
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
  int magnitude_id;  // -1: none (torchvision's None)
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
