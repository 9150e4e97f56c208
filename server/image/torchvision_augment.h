// torchvision 0.14's auto-augment op table (transforms/autoaugment.py) for
// FIDELITY_TORCHVISION: the ops, the magnitude tables of each policy's
// _augmentation_space (float32, equal to torch 1.13's own tensors), the
// AutoAugment IMAGENET sub-policies, and _apply_op on a PIL RGB image
// (through pil_ops.h, bit-exact with Pillow 9.4).
//
// Random choices (which op, which bin, the sign, the probabilities) are the
// caller's: this file only holds the tables and the deterministic op.
//
// Thread-safety: pure functions; the policy table is an immutable static.
#ifndef NEARPREP_SERVER_IMAGE_TORCHVISION_AUGMENT_H_
#define NEARPREP_SERVER_IMAGE_TORCHVISION_AUGMENT_H_

#include <array>
#include <cstdint>
#include <vector>

#include "server/image/pil_ops.h"

namespace nearprep {

enum class AugmentOp : uint8_t {
  kIdentity = 0,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kRotate,
  kBrightness,
  kColor,
  kContrast,
  kSharpness,
  kPosterize,
  kSolarize,
  kAutoContrast,
  kEqualize,
  kInvert
};

enum class AugmentPolicy : uint8_t {
  kNone = 0,
  kTrivialAugmentWide,
  kRandAugment,
  kAutoAugmentImagenet
};

// torchvision's op_name string ("ShearX", "Color", ...); "?" for a value
// outside the enum.
const char* AugmentOpName(AugmentOp op);

struct AugmentOpMeta {
  AugmentOp op;
  bool is_signed;
  // The magnitude tensor's values; empty where torchvision has a 0-d
  // tensor (no magnitude: _apply_op gets 0.0).
  std::vector<float> magnitudes;
};

// Which of torch 1.13's CPU linspace kernels to reproduce. ATen picks one
// at run time from the CPU (overridable with ATEN_CPU_CAPABILITY), and the
// float32 tables differ between them in the last bit of some entries, so a
// client's torchvision tables depend on its CPU:
//   kAvx2: step = (end - start) / (n - 1) in float; entry i < n / 2 is
//     fma(step, i, start), the others fma(-step, n - 1 - i, end) (that object
//     code fuses them); but while 16 or more entries remain, blocks of 8 start
//     at such a base and continue as base + k * step, unfused
//     (cpu_serial_kernel_vec and Vectorized<float>::arange).
//   kDefault: the same without fusing (base x86-64 code has no FMA).
//   kAvx512: fused, blocks of 16 while 32 remain: for num_bins 31 and 10 that
//     is the fused scalar formula throughout. Inferred from the source, NOT
//     checked against torch (no AVX-512 machine was at hand).
// pil_ops_oracle_test checks kAvx2 (this machine's torch) and kDefault
// (ATEN_CPU_CAPABILITY=default) against torch for num_bins 31 and 10.
enum class TorchCpuKernel : uint8_t { kAvx2 = 0, kDefault, kAvx512 };

// torchvision 0.14's _augmentation_space of each policy, in its dict order,
// for an image of height x width (torchvision passes num_bins=31 for
// TrivialAugmentWide and RandAugment, 10 for AutoAugment). TrivialAugmentWide
// ignores the size; kNone gives an empty list. Linspace tables as `kernel`
// computes them (the 4-argument form: kAvx2). Posterize:
// 8 - round_half_even(float(i) / float((n - 1) / 4)), / 6 for
// TrivialAugmentWide (a division: the same on every kernel).
std::vector<AugmentOpMeta> AugmentSpace(AugmentPolicy policy, int num_bins,
                                        int height, int width);
std::vector<AugmentOpMeta> AugmentSpace(AugmentPolicy policy, int num_bins,
                                        int height, int width,
                                        TorchCpuKernel kernel);

// AutoAugment IMAGENET's 25 sub-policies: two (op, probability,
// magnitude_id or -1 for None) each, in torchvision's order. The
// probabilities are torchvision's Python floats rounded to float.
struct AutoAugmentStep {
  AugmentOp op;
  float probability;
  int magnitude_id;
};
const std::array<std::array<AutoAugmentStep, 2>, 25>&
AutoAugmentImagenetPolicies();

// torchvision 0.14's autoaugment._apply_op(img, op_name, magnitude,
// InterpolationMode.NEAREST, fill) on a PIL RGB image. `magnitude` is the
// value _apply_op receives: a float32 table entry (sign already applied), or
// for Posterize / Solarize the value passed (Posterize takes int(magnitude)).
// `fill` is the per-channel fill of the geometric ops (torchvision's None is
// {0, 0, 0}). Brightness / Color / Contrast / Sharpness use the factor
// float(1.0 + magnitude) (Python double, then Pillow's float).
void ApplyAugmentOp(pil::RgbImage* img, AugmentOp op, float magnitude,
                    const uint8_t fill[3]);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_IMAGE_TORCHVISION_AUGMENT_H_
