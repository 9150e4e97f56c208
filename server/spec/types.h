// Plain C++ value types shared by the pipeline, the backends and the service
// adapter. They mirror proto/nearprep/v1/nearprep.proto, but nothing below
// server/service/ includes protobuf or gRPC headers: the adapter converts.
//
// Thread-safety: plain values; safe to copy and share read-only.
#ifndef NEARPREP_SERVER_SPEC_TYPES_H_
#define NEARPREP_SERVER_SPEC_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace nearprep {

enum class CropMode {
  kNone = 0,
  kCenter = 1,
  kRandomResized = 2,
  kResizeCenter = 3,  // Shorter side to resize_shorter, then centre crop.
};
enum class Fidelity { kTfCompat = 0, kFast = 1, kTorchvision = 2 };
enum class DType { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2, kUint8 = 3 };
enum class Layout { kNHWC = 0, kNCHW = 1 };
enum class ErrorPolicy { kSkip = 0, kFailStream = 1 };
// Transform.color_ops' values (kUnspecified is never in a valid list).
enum class ColorOp {
  kUnspecified = 0,
  kGamma = 1,
  kBrightness = 2,
  kContrast = 3,
  kSaturation = 4,
  kHue = 5,
};
// Transform.auto_augment: torchvision 0.14's automatic augmentation policies.
enum class AugmentPolicy : uint8_t {
  kNone = 0,
  kTrivialAugmentWide = 1,
  kRandAugment = 2,
  kAutoAugmentImagenet = 3,
};
// The ops of their tables (torchvision's op names; the proto's AugmentOp).
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
  kInvert,
};

inline size_t DTypeSize(DType d) {
  switch (d) {
    case DType::kFloat32: return 4;
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
    case DType::kUint8: return 1;
  }
  return 4;
}

// What to do to every image. Defaults are already resolved (no "0 means
// default" left): the adapter fills them from the proto.
struct TransformSpec {
  int height = 224;
  int width = 224;
  CropMode crop = CropMode::kNone;
  float center_fraction = 0.875f;
  int resize_shorter = 256;  // kResizeCenter: the shorter side's new size.
  float scale_min = 0.08f, scale_max = 1.0f;
  float ratio_min = 3.0f / 4.0f, ratio_max = 4.0f / 3.0f;
  float flip_probability = 0.0f;
  float brightness_max_delta = 0.0f;  // 0 disables.
  bool saturation_enabled = false;
  float saturation_lower = 0.0f, saturation_upper = 0.0f;
  // random_contrast: factor in [contrast_lower, contrast_upper).
  bool contrast_enabled = false;
  float contrast_lower = 0.0f, contrast_upper = 0.0f;
  float hue_max_delta = 0.0f;  // random_hue; 0 disables.
  // adjust_gamma: gain * x ** gamma; gamma 0 disables (gain is then 1).
  float gamma = 0.0f;
  float gain = 1.0f;
  // The enabled colour ops in the order to run them; empty: gamma,
  // brightness, contrast, saturation, hue.
  std::vector<ColorOp> color_ops;
  // FIDELITY_TORCHVISION's ColorJitter: each factor's range is [max(0,
  // 1 - v), 1 + v) (hue: [-v, v)); 0 disables it.
  float jitter_brightness = 0.0f, jitter_contrast = 0.0f;
  float jitter_saturation = 0.0f, jitter_hue = 0.0f;
  AugmentPolicy auto_augment = AugmentPolicy::kNone;
  int rand_augment_num_ops = 2;
  int rand_augment_magnitude = 9;
  // RandomErasing: probability 0 disables.
  float erase_probability = 0.0f;
  float erase_scale_min = 0.02f, erase_scale_max = 0.33f;
  float erase_ratio_min = 0.3f, erase_ratio_max = 3.3f;
  float erase_value[3] = {0, 0, 0};
  // Batch level: MixUp / CutMix Beta parameters; 0 disables.
  float mixup_alpha = 0.0f, cutmix_alpha = 0.0f;
  bool clip = true;
  bool normalize = false;  // (x - mean[c]) / std[c] after clip.
  float mean[3] = {0, 0, 0};
  float std[3] = {1, 1, 1};
  Fidelity fidelity = Fidelity::kTfCompat;
};

struct OutputSpec {
  DType dtype = DType::kFloat32;
  Layout layout = Layout::kNHWC;
  // Bytes of one sample's tensor slot: height * width * 3 * DTypeSize(dtype).
  size_t SampleBytes(const TransformSpec& t) const {
    return static_cast<size_t>(t.height) * t.width * 3 * DTypeSize(dtype);
  }
};

// Crop rectangle in decoded-image pixels.
struct CropBox {
  int y = 0, x = 0, height = 0, width = 0;
};

// The random draws of one sample: a function of (seed, epoch, sample_id)
// only (see server/data/epoch_plan.h and docs/protocol.md). The crop box also depends on the
// decoded size, so it is resolved after the header is read.
struct SampleParams {
  bool flip = false;
  float brightness_delta = 0.0f;
  float saturation_factor = 1.0f;
  float contrast_factor = 1.0f;
  float hue_delta = 0.0f;
  // ColorJitter: the factors (1 / hue 0 when disabled) and the order
  // (0 brightness, 1 contrast, 2 saturation, 3 hue); jitter_ops is 0 when
  // ColorJitter is off, else 4.
  float jitter_factor[4] = {1.0f, 1.0f, 1.0f, 0.0f};
  uint8_t jitter_order[4] = {0, 1, 2, 3};
  int jitter_ops = 0;
  // The auto-augment ops applied, in order, with the magnitude torchvision's
  // _apply_op receives.
  struct AugmentStep {
    AugmentOp op = AugmentOp::kIdentity;
    float magnitude = 0.0f;
  };
  static constexpr int kMaxAugmentSteps = 16;
  AugmentStep augment[kMaxAugmentSteps];
  int augment_steps = 0;
  // RandomErasing: whether a box was erased, and the box (output pixels).
  bool erased = false;
  CropBox erase_box;
  CropBox crop;  // Whole image when crop == kNone.
  int source_height = 0, source_width = 0;
};

// A batch's MixUp / CutMix draw (server/pipeline/batch_mix.h).
enum class BatchMixKind : uint8_t { kNone = 0, kMixUp = 1, kCutMix = 2 };
struct BatchMixSpec {
  float mixup_alpha = 0.0f;   // 0 disables each; both > 0: each batch
  float cutmix_alpha = 0.0f;  // picks one, p = 0.5.
};
struct BatchMixParams {
  BatchMixKind kind = BatchMixKind::kNone;
  // The weight of each sample's own image: MixUp's draw, CutMix's
  // area-corrected value.
  float lambda = 1.0f;
  int y1 = 0, x1 = 0, y2 = 0, x2 = 0;  // CutMix box, else 0.
};

// Limits a decode must respect.
struct DecodeLimits {
  // height * width * components of the decoded image must be < this.
  // TensorFlow refuses >= 2^29.
  uint64_t max_decoded_values = uint64_t{1} << 29;
};

// Per-sample worker time, microseconds.
struct StageTimes {
  uint64_t read_us = 0;
  uint64_t decode_us = 0;
  uint64_t transform_us = 0;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_SPEC_TYPES_H_
