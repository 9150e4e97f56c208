#include "server/service/request_validation.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/tensor_codec.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "proto/options/field_range.h"
#include "server/data/block_shuffle.h"
#include "server/data/epoch_order_cache.h"
#include "server/data/sample_source.h"
#include "server/pipeline/resume_token.h"
#include "server/service/fleet_request.h"

namespace nearprep {

// The adapter casts each proto enum to its server/spec/types.h (and
// common/tensor_codec.h) twin: the numbers must be the same, and a value the
// proto gains must be added to the twin (the _MAX assert fails to compile
// until it is; docs/architecture.md, "Add a transform field"). The kernel
// ABI's numbering is tied to the twins in server/fpga/fpga_run.cc.
#define NEARPREP_SAME_VALUE(proto, twin)                           \
  static_assert(static_cast<int>(proto) == static_cast<int>(twin), \
                #proto " and " #twin " must have the same number")
#define NEARPREP_LAST_VALUE(proto_enum, twin)                              \
  static_assert(                                                           \
      proto_enum##_MAX == static_cast<int>(twin) && proto_enum##_MIN == 0, \
      #proto_enum " gained a value: add its twin after " #twin             \
                  " and to these asserts")
NEARPREP_SAME_VALUE(v1::CROP_MODE_NONE, CropMode::kNone);
NEARPREP_SAME_VALUE(v1::CROP_MODE_CENTER, CropMode::kCenter);
NEARPREP_SAME_VALUE(v1::CROP_MODE_RANDOM_RESIZED, CropMode::kRandomResized);
NEARPREP_SAME_VALUE(v1::CROP_MODE_RESIZE_CENTER, CropMode::kResizeCenter);
NEARPREP_LAST_VALUE(v1::CropMode, CropMode::kResizeCenter);
NEARPREP_SAME_VALUE(v1::FIDELITY_TF_COMPAT, Fidelity::kTfCompat);
NEARPREP_SAME_VALUE(v1::FIDELITY_FAST, Fidelity::kFast);
NEARPREP_SAME_VALUE(v1::FIDELITY_TORCHVISION, Fidelity::kTorchvision);
NEARPREP_LAST_VALUE(v1::Fidelity, Fidelity::kTorchvision);
NEARPREP_SAME_VALUE(v1::DTYPE_FLOAT32, DType::kFloat32);
NEARPREP_SAME_VALUE(v1::DTYPE_FLOAT16, DType::kFloat16);
NEARPREP_SAME_VALUE(v1::DTYPE_BFLOAT16, DType::kBFloat16);
NEARPREP_SAME_VALUE(v1::DTYPE_UINT8, DType::kUint8);
NEARPREP_LAST_VALUE(v1::DType, DType::kUint8);
NEARPREP_SAME_VALUE(v1::LAYOUT_NHWC, Layout::kNHWC);
NEARPREP_SAME_VALUE(v1::LAYOUT_NCHW, Layout::kNCHW);
NEARPREP_LAST_VALUE(v1::Layout, Layout::kNCHW);
NEARPREP_SAME_VALUE(v1::ERROR_POLICY_SKIP, ErrorPolicy::kSkip);
NEARPREP_SAME_VALUE(v1::ERROR_POLICY_FAIL_STREAM, ErrorPolicy::kFailStream);
NEARPREP_LAST_VALUE(v1::ErrorPolicy, ErrorPolicy::kFailStream);
NEARPREP_SAME_VALUE(v1::COMPRESSION_NONE, TensorCompression::kNone);
NEARPREP_SAME_VALUE(v1::COMPRESSION_DELTA_ZSTD, TensorCompression::kDeltaZstd);
NEARPREP_SAME_VALUE(v1::COMPRESSION_GRADIENT_ZSTD,
                    TensorCompression::kGradientZstd);
NEARPREP_LAST_VALUE(v1::Compression, TensorCompression::kGradientZstd);
NEARPREP_SAME_VALUE(v1::COLOR_OP_UNSPECIFIED, ColorOp::kUnspecified);
NEARPREP_SAME_VALUE(v1::COLOR_OP_GAMMA, ColorOp::kGamma);
NEARPREP_SAME_VALUE(v1::COLOR_OP_BRIGHTNESS, ColorOp::kBrightness);
NEARPREP_SAME_VALUE(v1::COLOR_OP_CONTRAST, ColorOp::kContrast);
NEARPREP_SAME_VALUE(v1::COLOR_OP_SATURATION, ColorOp::kSaturation);
NEARPREP_SAME_VALUE(v1::COLOR_OP_HUE, ColorOp::kHue);
NEARPREP_LAST_VALUE(v1::ColorOp, ColorOp::kHue);
NEARPREP_SAME_VALUE(v1::AUTO_AUGMENT_NONE, AugmentPolicy::kNone);
NEARPREP_SAME_VALUE(v1::AUTO_AUGMENT_TRIVIAL_AUGMENT_WIDE,
                    AugmentPolicy::kTrivialAugmentWide);
NEARPREP_SAME_VALUE(v1::AUTO_AUGMENT_RAND_AUGMENT,
                    AugmentPolicy::kRandAugment);
NEARPREP_SAME_VALUE(v1::AUTO_AUGMENT_IMAGENET,
                    AugmentPolicy::kAutoAugmentImagenet);
NEARPREP_LAST_VALUE(v1::AutoAugment, AugmentPolicy::kAutoAugmentImagenet);
NEARPREP_SAME_VALUE(v1::AUGMENT_OP_IDENTITY, AugmentOp::kIdentity);
NEARPREP_SAME_VALUE(v1::AUGMENT_OP_SHEAR_X, AugmentOp::kShearX);
NEARPREP_SAME_VALUE(v1::AUGMENT_OP_SHEAR_Y, AugmentOp::kShearY);
NEARPREP_SAME_VALUE(v1::AUGMENT_OP_TRANSLATE_X, AugmentOp::kTranslateX);
NEARPREP_SAME_VALUE(v1::AUGMENT_OP_TRANSLATE_Y, AugmentOp::kTranslateY);
NEARPREP_SAME_VALUE(v1::AUGMENT_OP_ROTATE, AugmentOp::kRotate);
NEARPREP_SAME_VALUE(v1::AUGMENT_OP_BRIGHTNESS, AugmentOp::kBrightness);
NEARPREP_SAME_VALUE(v1::AUGMENT_OP_COLOR, AugmentOp::kColor);
NEARPREP_SAME_VALUE(v1::AUGMENT_OP_CONTRAST, AugmentOp::kContrast);
NEARPREP_SAME_VALUE(v1::AUGMENT_OP_SHARPNESS, AugmentOp::kSharpness);
NEARPREP_SAME_VALUE(v1::AUGMENT_OP_POSTERIZE, AugmentOp::kPosterize);
NEARPREP_SAME_VALUE(v1::AUGMENT_OP_SOLARIZE, AugmentOp::kSolarize);
NEARPREP_SAME_VALUE(v1::AUGMENT_OP_AUTO_CONTRAST, AugmentOp::kAutoContrast);
NEARPREP_SAME_VALUE(v1::AUGMENT_OP_EQUALIZE, AugmentOp::kEqualize);
NEARPREP_SAME_VALUE(v1::AUGMENT_OP_INVERT, AugmentOp::kInvert);
NEARPREP_LAST_VALUE(v1::AugmentOp, AugmentOp::kInvert);
// ShuffleMode has no twin: StreamRequest::block_shuffle is its one non-0 value.
static_assert(v1::ShuffleMode_MAX == v1::SHUFFLE_MODE_BLOCK,
              "v1::ShuffleMode gained a value: StreamRequest::block_shuffle "
              "cannot say it");
#undef NEARPREP_SAME_VALUE
#undef NEARPREP_LAST_VALUE

namespace {

absl::Status Invalid(const std::string& field, const std::string& reason) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", reason));
}

// Formats a float with enough digits to round-trip.
std::string F(float v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(v));
  return buf;
}

absl::Status CheckFinite(const std::string& field, float v) {
  if (!std::isfinite(v)) return Invalid(field, "must be finite, got " + F(v));
  return absl::OkStatus();
}

// FIDELITY_TORCHVISION's ColorJitter, auto_augment and RandomErasing
// fields (their ranges are checked by the proto's options): copied into `s`,
// refused with the other fidelities.
absl::Status TorchvisionAugmentations(const v1::Transform& t,
                                      TransformSpec* s) {
  const bool any = t.jitter_brightness() != 0.0f ||
                   t.jitter_contrast() != 0.0f ||
                   t.jitter_saturation() != 0.0f || t.jitter_hue() != 0.0f ||
                   t.auto_augment() != v1::AUTO_AUGMENT_NONE ||
                   t.rand_augment_num_ops() != 0 ||
                   t.rand_augment_magnitude() != 0 ||
                   t.erase_probability() != 0.0f ||
                   t.erase_scale_min() != 0.0f || t.erase_scale_max() != 0.0f ||
                   t.erase_ratio_min() != 0.0f || t.erase_ratio_max() != 0.0f ||
                   t.erase_value_size() != 0;
  if (any && s->fidelity != Fidelity::kTorchvision) {
    return Invalid("transform.fidelity",
                   "ColorJitter (jitter_*), auto_augment and RandomErasing "
                   "(erase_*) are torchvision's ops: they need "
                   "FIDELITY_TORCHVISION");
  }
  s->jitter_brightness = t.jitter_brightness();
  s->jitter_contrast = t.jitter_contrast();
  s->jitter_saturation = t.jitter_saturation();
  s->jitter_hue = t.jitter_hue();
  s->auto_augment = static_cast<AugmentPolicy>(t.auto_augment());
  if (s->auto_augment != AugmentPolicy::kRandAugment &&
      (t.rand_augment_num_ops() != 0 || t.rand_augment_magnitude() != 0)) {
    return Invalid(t.rand_augment_num_ops() != 0
                       ? "transform.rand_augment_num_ops"
                       : "transform.rand_augment_magnitude",
                   "must be 0 unless auto_augment is AUTO_AUGMENT_RAND_AUGMENT");
  }
  s->rand_augment_num_ops =
      t.rand_augment_num_ops() == 0 ? 2 : static_cast<int>(t.rand_augment_num_ops());
  s->rand_augment_magnitude = t.rand_augment_magnitude() == 0
                                  ? 9
                                  : static_cast<int>(t.rand_augment_magnitude());
  s->erase_probability = t.erase_probability();
  if (t.erase_scale_min() == 0.0f && t.erase_scale_max() == 0.0f) {
    s->erase_scale_min = 0.02f;
    s->erase_scale_max = 0.33f;
  } else if (!(t.erase_scale_min() > 0.0f)) {
    return Invalid("transform.erase_scale_min",
                   "must be > 0 (both erase_scale fields 0 means "
                   "[0.02, 0.33]), got " + F(t.erase_scale_min()));
  } else if (!(t.erase_scale_max() >= t.erase_scale_min() &&
               t.erase_scale_max() <= 1.0f)) {
    return Invalid("transform.erase_scale_max",
                   "must be in [erase_scale_min, 1] = [" +
                       F(t.erase_scale_min()) + ", 1], got " +
                       F(t.erase_scale_max()));
  } else {
    s->erase_scale_min = t.erase_scale_min();
    s->erase_scale_max = t.erase_scale_max();
  }
  if (t.erase_ratio_min() == 0.0f && t.erase_ratio_max() == 0.0f) {
    s->erase_ratio_min = 0.3f;
    s->erase_ratio_max = 3.3f;
  } else if (!(t.erase_ratio_min() > 0.0f)) {
    return Invalid("transform.erase_ratio_min",
                   "must be > 0 (both erase_ratio fields 0 means [0.3, 3.3]), "
                   "got " + F(t.erase_ratio_min()));
  } else if (!(t.erase_ratio_max() >= t.erase_ratio_min())) {
    return Invalid("transform.erase_ratio_max",
                   "must be >= erase_ratio_min = " + F(t.erase_ratio_min()) +
                       ", got " + F(t.erase_ratio_max()));
  } else {
    s->erase_ratio_min = t.erase_ratio_min();
    s->erase_ratio_max = t.erase_ratio_max();
  }
  const int nv = t.erase_value_size();
  if (nv != 0 && nv != 1 && nv != 3) {
    return Invalid("transform.erase_value",
                   absl::StrCat("must have 0, 1 or 3 values, got ", nv));
  }
  for (int c = 0; c < 3; ++c) {
    const float v = nv == 0 ? 0.0f : t.erase_value(nv == 1 ? 0 : c);
    if (auto st = CheckFinite(absl::StrCat("transform.erase_value[",
                                           nv == 1 ? 0 : c, "]"),
                              v);
        !st.ok()) {
      return st;
    }
    s->erase_value[c] = v;
  }
  return absl::OkStatus();
}

// "0..3" for values 0, 1, 2, 3; else the numbers, comma-separated.
std::string ValidNumbers(const google::protobuf::EnumDescriptor* e) {
  std::vector<int> numbers;
  for (int i = 0; i < e->value_count(); ++i)
    numbers.push_back(e->value(i)->number());
  std::sort(numbers.begin(), numbers.end());
  bool dense = true;
  for (size_t i = 0; i < numbers.size(); ++i)
    dense = dense && numbers[i] == static_cast<int>(i);
  if (dense) return absl::StrCat("0..", numbers.back());
  return absl::StrJoin(numbers, ", ");
}

// The checks the proto itself states, for every singular field of `m` (its
// path in messages: `prefix` + name): an enum field must hold one of its
// enum's values, a field with a (nearprep.v1.range) option must lie in the
// range (NaN passes: CheckFinite words that). Sub-messages are walked with
// their own prefix, except `skip` (checked by its own function).
absl::Status CheckVocabulary(const google::protobuf::Message& m,
                             const std::string& prefix,
                             const std::string& skip = "") {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->is_repeated() || f->name() == skip) continue;
    const std::string field = prefix + f->name();
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (absl::Status st = CheckVocabulary(r->GetMessage(m, f), field + ".");
          !st.ok()) {
        return st;
      }
      continue;
    }
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_ENUM) {
      const int v = r->GetEnumValue(m, f);
      if (f->enum_type()->FindValueByNumber(v) == nullptr) {
        return Invalid(field,
                       absl::StrCat("unknown enum value ", v, " (valid: ",
                                    ValidNumbers(f->enum_type()), ")"));
      }
      continue;
    }
    // The (nearprep.v1.range) option (proto/options/field_range.h, shared
    // with the CLI). NaN is out of every range, but CheckFinite words it.
    const std::optional<FieldRangeCheck> range = CheckFieldRange(m, *f);
    if (!range.has_value() || range->in_range || std::isnan(range->value)) {
      continue;
    }
    return Invalid(field, absl::StrCat("must be ", range->rule, ", got ",
                                       range->value_text));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TransformSpec> ValidateTransform(const v1::Transform& t) {
  TransformSpec s;
  // Enum values and (nearprep.v1.range) options: the proto's table
  // (height and width: [1, kMaxOutputSide], tied by request_validation_test).
  if (auto st = CheckVocabulary(t, "transform."); !st.ok()) return st;
  s.height = static_cast<int>(t.height());
  s.width = static_cast<int>(t.width());
  s.crop = static_cast<CropMode>(t.crop());
  s.fidelity = static_cast<Fidelity>(t.fidelity());

  // resize_shorter_side: 0 means 256; checked whatever the crop mode (only
  // CROP_MODE_RESIZE_CENTER reads it, and needs the window to fit).
  const uint32_t shorter =
      t.resize_shorter_side() == 0 ? 256u : t.resize_shorter_side();
  if (shorter > kMaxOutputSide) {
    return Invalid("transform.resize_shorter_side",
                   absl::StrCat("must be at most ", kMaxOutputSide, ", got ",
                                t.resize_shorter_side()));
  }
  if (s.crop == CropMode::kResizeCenter &&
      shorter < std::max(t.height(), t.width())) {
    return Invalid(
        "transform.resize_shorter_side",
        absl::StrCat("must be >= max(transform.height, transform.width) = ",
                     std::max(t.height(), t.width()),
                     " for CROP_MODE_RESIZE_CENTER (the centre crop must fit "
                     "the resized image; 0 means 256), got ",
                     t.resize_shorter_side()));
  }
  s.resize_shorter = static_cast<int>(shorter);

  // Every float field is checked whatever the crop mode, so a request that
  // is wrong is refused even when the field would be ignored.
  for (const auto& [name, v] :
       {std::pair<const char*, float>{"transform.center_fraction",
                                      t.center_fraction()},
        {"transform.scale_min", t.scale_min()},
        {"transform.scale_max", t.scale_max()},
        {"transform.ratio_min", t.ratio_min()},
        {"transform.ratio_max", t.ratio_max()},
        {"transform.flip_probability", t.flip_probability()},
        {"transform.brightness_max_delta", t.brightness_max_delta()},
        {"transform.saturation_lower", t.saturation_lower()},
        {"transform.saturation_upper", t.saturation_upper()},
        {"transform.contrast_lower", t.contrast_lower()},
        {"transform.contrast_upper", t.contrast_upper()},
        {"transform.hue_max_delta", t.hue_max_delta()},
        {"transform.gamma", t.gamma()},
        {"transform.gain", t.gain()},
        {"transform.jitter_brightness", t.jitter_brightness()},
        {"transform.jitter_contrast", t.jitter_contrast()},
        {"transform.jitter_saturation", t.jitter_saturation()},
        {"transform.jitter_hue", t.jitter_hue()},
        {"transform.erase_probability", t.erase_probability()},
        {"transform.erase_scale_min", t.erase_scale_min()},
        {"transform.erase_scale_max", t.erase_scale_max()},
        {"transform.erase_ratio_min", t.erase_ratio_min()},
        {"transform.erase_ratio_max", t.erase_ratio_max()},
        {"transform.mixup_alpha", t.mixup_alpha()},
        {"transform.cutmix_alpha", t.cutmix_alpha()}}) {
    if (auto st = CheckFinite(name, v); !st.ok()) return st;
  }

  if (t.center_fraction() == 0.0f) {
    s.center_fraction = 0.875f;
  } else if (t.center_fraction() < 0.0f || t.center_fraction() > 1.0f) {
    return Invalid(
        "transform.center_fraction",
        "must be in (0, 1] (0 means 0.875), got " + F(t.center_fraction()));
  } else {
    s.center_fraction = t.center_fraction();
  }

  if (t.scale_min() == 0.0f && t.scale_max() == 0.0f) {
    s.scale_min = 0.08f;
    s.scale_max = 1.0f;
  } else {
    if (!(t.scale_min() > 0.0f && t.scale_min() <= 1.0f)) {
      return Invalid("transform.scale_min",
                     "must be in (0, 1] (both scale fields 0 means "
                     "[0.08, 1]), got " +
                         F(t.scale_min()));
    }
    if (!(t.scale_max() >= t.scale_min() && t.scale_max() <= 1.0f)) {
      return Invalid("transform.scale_max",
                     "must be in [scale_min, 1] = [" + F(t.scale_min()) +
                         ", 1], got " + F(t.scale_max()));
    }
    s.scale_min = t.scale_min();
    s.scale_max = t.scale_max();
  }

  if (t.ratio_min() == 0.0f && t.ratio_max() == 0.0f) {
    s.ratio_min = 3.0f / 4.0f;
    s.ratio_max = 4.0f / 3.0f;
  } else {
    if (!(t.ratio_min() > 0.0f)) {
      return Invalid("transform.ratio_min",
                     "must be > 0 (both ratio fields 0 means [3/4, 4/3]), "
                     "got " +
                         F(t.ratio_min()));
    }
    if (!(t.ratio_max() >= t.ratio_min())) {
      return Invalid("transform.ratio_max",
                     "must be >= ratio_min = " + F(t.ratio_min()) + ", got " +
                         F(t.ratio_max()));
    }
    s.ratio_min = t.ratio_min();
    s.ratio_max = t.ratio_max();
  }

  s.flip_probability = t.flip_probability();

  s.brightness_max_delta = t.brightness_max_delta();

  if (t.saturation_lower() == 0.0f && t.saturation_upper() == 0.0f) {
    s.saturation_enabled = false;
  } else {
    if (t.saturation_lower() < 0.0f) {
      return Invalid("transform.saturation_lower",
                     "must be >= 0, got " + F(t.saturation_lower()));
    }
    if (t.saturation_upper() < t.saturation_lower()) {
      return Invalid(
          "transform.saturation_upper",
          "must be >= saturation_lower = " + F(t.saturation_lower()) +
              ", got " + F(t.saturation_upper()));
    }
    s.saturation_enabled = true;
    s.saturation_lower = t.saturation_lower();
    s.saturation_upper = t.saturation_upper();
  }
  // random_contrast: TensorFlow requires 0 <= lower < upper.
  if (t.contrast_lower() == 0.0f && t.contrast_upper() == 0.0f) {
    s.contrast_enabled = false;
  } else {
    if (t.contrast_lower() < 0.0f) {
      return Invalid("transform.contrast_lower",
                     "must be >= 0 (both contrast fields 0 disables "
                     "random_contrast), got " + F(t.contrast_lower()));
    }
    if (!(t.contrast_upper() > t.contrast_lower())) {
      return Invalid("transform.contrast_upper",
                     "must be > contrast_lower = " + F(t.contrast_lower()) +
                         " (TensorFlow's random_contrast), got " +
                         F(t.contrast_upper()));
    }
    s.contrast_enabled = true;
    s.contrast_lower = t.contrast_lower();
    s.contrast_upper = t.contrast_upper();
  }
  // hue_max_delta and gamma: their (nearprep.v1.range) is checked above.
  s.hue_max_delta = t.hue_max_delta();
  s.gamma = t.gamma();
  if (t.gamma() == 0.0f && t.gain() != 0.0f) {
    return Invalid("transform.gain",
                   "must be 0 while transform.gamma is 0 (gamma 0 disables "
                   "adjust_gamma), got " + F(t.gain()));
  }
  s.gain = t.gain() == 0.0f ? 1.0f : t.gain();
  // color_ops: every enabled op once, no other.
  if (t.color_ops_size() > 0) {
    const bool enabled[6] = {false,
                             s.gamma != 0.0f,
                             s.brightness_max_delta != 0.0f,
                             s.contrast_enabled,
                             s.saturation_enabled,
                             s.hue_max_delta != 0.0f};
    static const char* const kNames[6] = {"unspecified", "gamma", "brightness",
                                          "contrast", "saturation", "hue"};
    bool seen[6] = {};
    for (int i = 0; i < t.color_ops_size(); ++i) {
      const int op = t.color_ops(i);
      const std::string field = absl::StrCat("transform.color_ops[", i, "]");
      if (op <= 0 || op > 5) {
        return Invalid(field, absl::StrCat("must name a colour op (gamma, "
                                           "brightness, contrast, saturation, "
                                           "hue), got ", op));
      }
      if (seen[op]) {
        return Invalid(field, absl::StrCat(kNames[op], " is listed twice"));
      }
      if (!enabled[op]) {
        return Invalid(field, absl::StrCat(kNames[op],
                                           " is listed but not enabled by "
                                           "its transform field(s)"));
      }
      seen[op] = true;
      s.color_ops.push_back(static_cast<ColorOp>(op));
    }
    for (int op = 1; op <= 5; ++op) {
      if (enabled[op] && !seen[op]) {
        return Invalid("transform.color_ops",
                       absl::StrCat(kNames[op], " is enabled but not listed "
                                    "(list every enabled op, or none for the "
                                    "default order)"));
      }
    }
  }
  if (s.fidelity == Fidelity::kTorchvision) {
    // TensorFlow's colour ops have no torchvision twin (torchvision's own
    // are ColorJitter's jitter_* fields); refusing them here keeps the
    // mode's promise (every byte torchvision's) checkable.
    if (s.brightness_max_delta != 0.0f) {
      return Invalid("transform.brightness_max_delta",
                     "must be 0 with FIDELITY_TORCHVISION (TensorFlow's "
                     "random_brightness; torchvision's is "
                     "jitter_brightness), got " +
                         F(s.brightness_max_delta));
    }
    if (s.saturation_enabled) {
      return Invalid("transform.saturation_lower",
                     "saturation must be disabled (both 0) with "
                     "FIDELITY_TORCHVISION, got [" +
                         F(s.saturation_lower) + ", " + F(s.saturation_upper) +
                         "]");
    }
    if (s.contrast_enabled) {
      return Invalid("transform.contrast_lower",
                     "contrast must be disabled (both 0) with "
                     "FIDELITY_TORCHVISION, got [" +
                         F(s.contrast_lower) + ", " + F(s.contrast_upper) +
                         "]");
    }
    if (s.hue_max_delta != 0.0f) {
      return Invalid("transform.hue_max_delta",
                     "must be 0 with FIDELITY_TORCHVISION, got " +
                         F(s.hue_max_delta));
    }
    if (s.gamma != 0.0f) {
      return Invalid("transform.gamma",
                     "must be 0 with FIDELITY_TORCHVISION, got " +
                         F(s.gamma));
    }
  }

  if (absl::Status st = TorchvisionAugmentations(t, &s); !st.ok()) return st;
  // MixUp / CutMix: their (nearprep.v1.range) is checked above.
  s.mixup_alpha = t.mixup_alpha();
  s.cutmix_alpha = t.cutmix_alpha();

  s.clip = !t.disable_clip();

  if (t.mean_size() != 0 && t.mean_size() != 3) {
    return Invalid("transform.mean", absl::StrCat("must have 0 or 3 values, "
                                                  "got ",
                                                  t.mean_size()));
  }
  if (t.std_size() != 0 && t.std_size() != 3) {
    return Invalid("transform.std", absl::StrCat("must have 0 or 3 values, "
                                                 "got ",
                                                 t.std_size()));
  }
  for (int c = 0; c < t.mean_size(); ++c) {
    const std::string field = absl::StrCat("transform.mean[", c, "]");
    if (auto st = CheckFinite(field, t.mean(c)); !st.ok()) return st;
    s.mean[c] = t.mean(c);
  }
  for (int c = 0; c < t.std_size(); ++c) {
    const std::string field = absl::StrCat("transform.std[", c, "]");
    if (!std::isfinite(t.std(c)) || !(t.std(c) > 0.0f)) {
      return Invalid(field, "must be finite and > 0, got " + F(t.std(c)));
    }
    s.std[c] = t.std(c);
  }
  s.normalize = t.mean_size() != 0 || t.std_size() != 0;
  return s;
}

namespace {

// output.compression and output.compression_level.
absl::Status CheckCompression(const v1::OutputFormat& o) {
  const int c = o.compression();
  if (!IsKnownCompression(c)) {
    return Invalid(
        "output.compression",
        absl::StrCat("unknown value ", c, " (see ServerInfo.compressions)"));
  }
  if (c == v1::COMPRESSION_NONE) {
    if (o.compression_level() != 0) {
      return Invalid("output.compression_level",
                     absl::StrCat("must be 0 without output.compression, got ",
                                  o.compression_level()));
    }
    return absl::OkStatus();
  }
  if (o.dtype() != v1::DTYPE_UINT8) {
    return Invalid("output.compression",
                   absl::StrCat(v1::Compression_Name(o.compression()),
                                " requires output.dtype DTYPE_UINT8 (the "
                                "filters predict bytes), got ",
                                v1::DType_Name(o.dtype())));
  }
  const int level = o.compression_level();
  if (level != 0 &&
      (level < kMinCompressionLevel || level > kMaxCompressionLevel)) {
    return Invalid("output.compression_level",
                   absl::StrCat("must be 0 (default ", kDefaultCompressionLevel,
                                ") or in [", kMinCompressionLevel, ", ",
                                kMaxCompressionLevel, "], got ", level));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ClosestName(const std::string& name,
                        const std::vector<std::string>& candidates) {
  // Optimal string alignment distance (Damerau-Levenshtein without
  // repeated edits of one substring), case-insensitive.
  auto distance = [](const std::string& a, const std::string& b) {
    const size_t n = a.size(), m = b.size();
    std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
    for (size_t i = 0; i <= n; ++i) d[i][0] = i;
    for (size_t j = 0; j <= m; ++j) d[0][j] = j;
    auto lower = [](char c) {
      return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    };
    for (size_t i = 1; i <= n; ++i) {
      for (size_t j = 1; j <= m; ++j) {
        const size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
        d[i][j] = std::min(
            {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
        if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) &&
            lower(a[i - 2]) == lower(b[j - 1])) {
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
      }
    }
    return d[n][m];
  };
  if (name.empty() || name.size() > 256) return "";
  std::string best;
  size_t best_d = 0;
  for (const std::string& c : candidates) {
    if (c.size() > 256) continue;
    const size_t dist = distance(name, c);
    const size_t allowed =
        std::max<size_t>(1, std::max(name.size(), c.size()) / 3);
    if (dist <= allowed && (best.empty() || dist < best_d)) {
      best = c;
      best_d = dist;
    }
  }
  return best;
}

namespace {

// A resume point (start_batch, start_position), bare or from a token, that
// no stream of this request hands out: past the end of the shard
// (Batch.next_position never is); before start_batch full batches (every
// batch before batch k consumed batch_size positions plus the samples
// skipped in it), unless it is the end of the shard right after a short
// last batch; or, under fail_stream (nothing skipped), anywhere but
// start_batch * batch_size or that end. The error names start_position, or
// resume_token when the point came from one (a forged token).
absl::Status CheckResumePoint(const v1::StreamBatchesRequest& request,
                              const StreamRequest& r, const Dataset& dataset) {
  const bool from_token = !request.resume_token().empty();
  const char* field = from_token ? "resume_token" : "start_position";
  const std::string hint =
      from_token ? std::string(" (send Batch.resume_token back unchanged)")
                 : std::string(
                       " (not a Batch.next_position of this stream: send "
                       "Batch.resume_token back instead)");
  const uint64_t shard = ShardSize(dataset.size(), r.shard_index, r.num_shards);
  if (r.start_position > shard) {
    return Invalid(
        field, absl::StrCat("position ", r.start_position,
                            " is past the end of shard ", r.shard_index, " of ",
                            r.num_shards, " of dataset '", request.dataset(),
                            "' (", shard, " positions)", hint));
  }
  uint64_t first = 0;
  const bool overflows = __builtin_mul_overflow(
      r.start_batch, static_cast<uint64_t>(r.batch_size), &first);
  if (r.start_position == shard) {
    // The end of the shard: what the last batch hands out, a short one
    // included. That batch, start_batch - 1, began at (start_batch - 1) *
    // batch_size or later and held at least one position.
    if (overflows || first - r.batch_size >= shard) {
      return Invalid(
          field, absl::StrCat("position ", r.start_position,
                              " (the end of the shard) cannot follow batch ",
                              r.start_batch - 1, " of ", r.batch_size,
                              " samples", hint));
    }
    return absl::OkStatus();
  }
  if (overflows || r.start_position < first) {
    return Invalid(field,
                   absl::StrCat("position ", r.start_position,
                                " must be >= start_batch * batch_size = ",
                                r.start_batch, " * ", r.batch_size, hint));
  }
  if (request.error_policy() == v1::ERROR_POLICY_FAIL_STREAM &&
      r.start_position != first) {
    return Invalid(field,
                   absl::StrCat("position ", r.start_position,
                                " must be start_batch * batch_size = ", first,
                                " under error_policy fail_stream (no sample is "
                                "skipped)",
                                hint));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StreamRequest> ValidateStreamRequest(
    const v1::StreamBatchesRequest& request, const DatasetLookup& lookup,
    const ServiceLimits& limits, const std::vector<std::string>& served) {
  StreamRequest r;
  if (request.dataset().empty()) {
    return Invalid("dataset", "required (see ListDatasets)");
  }
  if (request.batch_size() < 1) {
    return Invalid("batch_size",
                   absl::StrCat("must be in [1, ", limits.max_batch_size,
                                "], got ", request.batch_size()));
  }
  const uint32_t num_shards =
      request.num_shards() == 0 ? 1 : request.num_shards();
  if (request.shard_index() >= num_shards) {
    return Invalid("shard_index",
                   absl::StrCat("must be < num_shards = ", num_shards, ", got ",
                                request.shard_index()));
  }
  if (request.start_position() != 0 && request.start_batch() == 0) {
    return Invalid("start_position",
                   absl::StrCat("must be 0 when start_batch is 0, got ",
                                request.start_position()));
  }
  // Enum values and (nearprep.v1.range) options of every field but the
  // transform's (ValidateTransform): the proto's table.
  if (auto st = CheckVocabulary(request, "", "transform"); !st.ok()) return st;
  if (auto st = CheckCompression(request.output()); !st.ok()) return st;
  if (!request.has_transform()) {
    return Invalid("transform", "required (height and width at least)");
  }
  auto spec = ValidateTransform(request.transform());
  if (!spec.ok()) return spec.status();

  // Well-formed so far; now the daemon's own state and limits.
  const Dataset* dataset = lookup ? lookup(request.dataset()) : nullptr;
  if (dataset == nullptr) {
    const std::string close = ClosestName(request.dataset(), served);
    if (!close.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "dataset: no dataset '", request.dataset(), "'; did you mean '",
          close, "'? (this daemon serves: ", absl::StrJoin(served, ", "), ")"));
    }
    return absl::NotFoundError(
        absl::StrCat("dataset: '", request.dataset(),
                     "' is not served by this daemon (see ListDatasets)"));
  }
  if (request.batch_size() > limits.max_batch_size) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "batch_size: ", request.batch_size(),
        " exceeds the server limit max_batch_size = ", limits.max_batch_size));
  }
  const uint64_t pixels = static_cast<uint64_t>(spec->height) * spec->width;
  if (pixels > limits.max_output_pixels) {
    return absl::ResourceExhaustedError(
        absl::StrCat("transform.height * transform.width: ", spec->height,
                     " * ", spec->width, " = ", pixels,
                     " exceeds the server limit max_output_pixels = ",
                     limits.max_output_pixels));
  }
  r.context.output.dtype = static_cast<DType>(request.output().dtype());
  r.context.output.layout = static_cast<Layout>(request.output().layout());
  r.context.spec = *spec;
  r.batch_size = request.batch_size();
  r.compression =
      static_cast<TensorCompression>(request.output().compression());
  // The pipeline's own count (BatchMemoryOf), so the limit checked here is
  // the memory the stream's pools will hold.
  const BatchMemory memory = BatchMemoryOf(r);
  if (memory.tensor_bytes > limits.per_stream_memory_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("batch_size: one batch of ", request.batch_size(),
                     " samples is ", memory.tensor_bytes,
                     " bytes, over the server limit per_stream_memory_bytes = ",
                     limits.per_stream_memory_bytes));
  }
  if (r.compression != TensorCompression::kNone) {
    r.compression_level = request.output().compression_level() != 0
                              ? request.output().compression_level()
                              : kDefaultCompressionLevel;
    if (memory.total() > limits.per_stream_memory_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "output.compression: one batch of ", request.batch_size(),
          " samples and its compressed copy need ", memory.total(),
          " bytes, over the server limit per_stream_memory_bytes = ",
          limits.per_stream_memory_bytes));
    }
  }

  r.context.source = std::make_shared<const SampleSource>(*dataset);
  r.context.spec = *spec;
  r.context.limits.max_decoded_values = limits.max_decoded_pixels;
  r.context.seed = request.seed();
  r.context.epoch = request.epoch();
  r.batch_size = request.batch_size();
  r.shuffle = request.shuffle();
  if (r.shuffle && request.shuffle_mode() == v1::SHUFFLE_MODE_BLOCK) {
    const auto& b = request.block_shuffle();
    r.block_shuffle = true;
    r.block.block_samples =
        b.block_samples() != 0 ? b.block_samples() : dataset->block_samples();
    r.block.open_blocks =
        b.open_blocks() != 0 ? b.open_blocks() : kDefaultOpenBlocks;
    r.block.window = b.window() != 0 ? b.window() : kDefaultShuffleWindow;
  }
  r.shard_index = request.shard_index();
  r.num_shards = num_shards;
  r.start_batch = request.start_batch();
  r.start_position = request.start_position();
  // Explicit ids (fleet) do not resume: no token in their batches.
  const std::string binding = ResumeBinding(r);
  if (request.sample_ids_size() == 0) r.resume_binding = binding;
  if (!request.resume_token().empty()) {
    if (request.sample_ids_size() > 0) {
      return Invalid("resume_token",
                     "not with sample_ids (explicit ids do not resume)");
    }
    uint64_t batch = 0, position = 0;
    if (absl::Status st = CheckResumeToken(request.resume_token(), binding,
                                           &batch, &position);
        !st.ok()) {
      return st;
    }
    if (request.start_batch() != 0 && request.start_batch() != batch) {
      return Invalid("start_batch",
                     absl::StrCat(request.start_batch(),
                                  " differs from resume_token's batch ", batch,
                                  " (leave it 0 with a resume_token)"));
    }
    if (request.start_position() != 0 && request.start_position() != position) {
      return Invalid(
          "start_position",
          absl::StrCat(request.start_position(),
                       " differs from resume_token's position ", position,
                       " (leave it 0 with a resume_token)"));
    }
    r.start_batch = batch;
    r.start_position = position;
  }
  if (r.start_position != 0 && request.sample_ids_size() == 0) {
    if (absl::Status st = CheckResumePoint(request, r, *dataset); !st.ok())
      return st;
  }
  r.max_batches = request.max_batches();
  r.drop_remainder = request.drop_remainder();
  r.error_policy = static_cast<ErrorPolicy>(request.error_policy());
  r.include_params = request.include_params();
  r.memory_limit_bytes = limits.per_stream_memory_bytes;
  // gRPC holds a sent batch until its bytes are written out: it counts
  // against the stream's memory until then (pipeline.h).
  r.account_until_released = true;
  // Fleet datasets: explicit sample ids (fleet_request.h).
  if (absl::Status st = ApplyExplicitIds(request, *dataset, &r); !st.ok()) {
    return st;
  }
  return r;
}

}  // namespace nearprep
