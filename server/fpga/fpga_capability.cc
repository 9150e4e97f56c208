#include "server/fpga/fpga_capability.h"

#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dataflow.h"

namespace nearprep {
namespace {

namespace nf = nearprep_fpga;

// The number of members of aggregate T, arrays counted by element: the
// largest N for which T{x1, ..., xN} compiles (brace elision spreads an
// array's initialisers over its elements).
struct AnyValue {
  template <class T>
  constexpr operator T() const {  // NOLINT(google-explicit-constructor)
    return T{};
  }
};
template <class T, class Seq, class = void>
struct InitializableFrom : std::false_type {};
template <class T, size_t... I>
struct InitializableFrom<T, std::index_sequence<I...>,
                         std::void_t<decltype(T{(void(I), AnyValue{})...})>>
    : std::true_type {};
template <class T, size_t N = 0>
constexpr int MemberCount() {
  if constexpr (InitializableFrom<T, std::make_index_sequence<N + 1>>::value) {
    return MemberCount<T, N + 1>();
  } else {
    return static_cast<int>(N);
  }
}
template <class T>
constexpr int Elements() {
  return std::is_array_v<T> ? static_cast<int>(std::extent_v<T>) : 1;
}

std::string OutputSide(int v) {
  if (v >= 1 && v <= nf::kMaxOutHeight && v <= nf::kMaxOutWidth) return "";
  return absl::StrCat(v, " is outside the kernel's 1..", nf::kMaxOutWidth,
                      " (its crop/resize tap tables)");
}

#define NEARPREP_ROW(part_name, member, request_name, part, path, refuses)             \
  FpgaSpecField {                                                                      \
    request_name, part, path,                                                          \
        Elements<decltype(std::declval<WorkContext&>().part_name.member)>(), refuses, \
        [](const WorkContext& c) -> const void* { return &c.part_name.member; }        \
  }
#define NEARPREP_T(member, path, refuses)                                              \
  NEARPREP_ROW(spec, member, "transform." #member, FpgaSpecPart::kTransform, path, refuses)
#define NEARPREP_O(member, path, refuses)                                              \
  NEARPREP_ROW(output, member, "output." #member, FpgaSpecPart::kOutput, path, refuses)
#define NEARPREP_L(member, path, refuses)                                              \
  NEARPREP_ROW(limits, member, "limits." #member, FpgaSpecPart::kLimits, path, refuses)

constexpr FpgaFieldPath kKernel = FpgaFieldPath::kKernel;
constexpr FpgaFieldPath kHost = FpgaFieldPath::kHost;

// Every value computed: no refusal function.
constexpr std::string (*kAll)(const WorkContext&) = nullptr;

constexpr FpgaSpecField kRows[] = {
    // cfg kCfgOutHeight / kCfgOutWidth.
    NEARPREP_T(height, kKernel, [](const WorkContext& c) { return OutputSide(c.spec.height); }),
    NEARPREP_T(width, kKernel, [](const WorkContext& c) { return OutputSide(c.spec.width); }),
    // DrawSampleParams resolves every crop mode to a box of the decoded
    // image (desc kDescCrop*, kFlagWholeImage), and so its parameters.
    NEARPREP_T(crop, kHost, kAll),
    NEARPREP_T(center_fraction, kHost, kAll),
    NEARPREP_T(resize_shorter, kHost, kAll),
    NEARPREP_T(scale_min, kHost, kAll),
    NEARPREP_T(scale_max, kHost, kAll),
    NEARPREP_T(ratio_min, kHost, kAll),
    NEARPREP_T(ratio_max, kHost, kAll),
    // Drawn on the host: desc kFlagFlip, kDescBrightness, kDescSaturation.
    NEARPREP_T(flip_probability, kHost, kAll),
    NEARPREP_T(brightness_max_delta, kHost, kAll),
    NEARPREP_T(saturation_enabled, kKernel, kAll),  // desc kFlagSaturation
    NEARPREP_T(saturation_lower, kHost, kAll),
    NEARPREP_T(saturation_upper, kHost, kAll),
    // The kernel has no contrast, hue or gamma stage: such samples take the
    // CPU fallback (FpgaBackend), and ServerInfo says so.
    NEARPREP_T(contrast_enabled, kKernel,
               [](const WorkContext& c) -> std::string {
                 return c.spec.contrast_enabled ? "the kernel has no contrast stage" : "";
               }),
    NEARPREP_T(contrast_lower, kHost, kAll),
    NEARPREP_T(contrast_upper, kHost, kAll),
    NEARPREP_T(hue_max_delta, kKernel,
               [](const WorkContext& c) -> std::string {
                 return c.spec.hue_max_delta != 0.0f ? "the kernel has no hue stage" : "";
               }),
    NEARPREP_T(gamma, kKernel,
               [](const WorkContext& c) -> std::string {
                 return c.spec.gamma != 0.0f ? "the kernel has no gamma stage" : "";
               }),
    NEARPREP_T(gain, kHost, kAll),
    NEARPREP_T(color_ops, kKernel,
               [](const WorkContext& c) -> std::string {
                 return c.spec.color_ops.empty() ? "" : "the kernel's op order is fixed";
               }),
    // torchvision's ColorJitter, auto-augment and RandomErasing exist only
    // with FIDELITY_TORCHVISION, which the fidelity row refuses.
    NEARPREP_T(jitter_brightness, kHost, kAll),
    NEARPREP_T(jitter_contrast, kHost, kAll),
    NEARPREP_T(jitter_saturation, kHost, kAll),
    NEARPREP_T(jitter_hue, kHost, kAll),
    NEARPREP_T(auto_augment, kHost, kAll),
    NEARPREP_T(rand_augment_num_ops, kHost, kAll),
    NEARPREP_T(rand_augment_magnitude, kHost, kAll),
    NEARPREP_T(erase_probability, kHost, kAll),
    NEARPREP_T(erase_scale_min, kHost, kAll),
    NEARPREP_T(erase_scale_max, kHost, kAll),
    NEARPREP_T(erase_ratio_min, kHost, kAll),
    NEARPREP_T(erase_ratio_max, kHost, kAll),
    NEARPREP_T(erase_value, kHost, kAll),
    // MixUp / CutMix mix whole batches after the backend (StreamHandle).
    NEARPREP_T(mixup_alpha, kHost, kAll),
    NEARPREP_T(cutmix_alpha, kHost, kAll),
    // cfg kCfgFlags, kCfgMean*, kCfgStd*.
    NEARPREP_T(clip, kKernel, kAll),
    NEARPREP_T(normalize, kKernel, kAll),
    NEARPREP_T(mean, kKernel, kAll),
    NEARPREP_T(std, kKernel, kAll),
    NEARPREP_T(fidelity, kKernel,
               [](const WorkContext& c) -> std::string {
                 if (c.spec.fidelity == Fidelity::kTfCompat) return "";
                 return "the kernel computes TF_COMPAT only (FAST and TORCHVISION run on the CPU)";
               }),
    // cfg kCfgDType (f32, f16, bf16, u8) and kCfgLayout (NHWC, NCHW).
    NEARPREP_O(dtype, kKernel,
               [](const WorkContext& c) -> std::string {
                 const int d = static_cast<int>(c.output.dtype);
                 return d >= 0 && d <= 3 ? "" : absl::StrCat(d, " is not a kernel dtype");
               }),
    NEARPREP_O(layout, kKernel,
               [](const WorkContext& c) -> std::string {
                 return c.output.layout == Layout::kNHWC || c.output.layout == Layout::kNCHW
                            ? ""
                            : "not a kernel layout";
               }),
    // cfg kCfgMaxValues*.
    NEARPREP_L(max_decoded_values, kKernel, kAll),
};

#undef NEARPREP_L
#undef NEARPREP_O
#undef NEARPREP_T
#undef NEARPREP_ROW

constexpr int RowMembers(FpgaSpecPart part) {
  int n = 0;
  for (const FpgaSpecField& r : kRows) n += r.part == part ? r.members : 0;
  return n;
}
static_assert(RowMembers(FpgaSpecPart::kTransform) == MemberCount<TransformSpec>(),
              "TransformSpec has a field without a row in kRows (fpga_capability.cc): "
              "say what the FPGA path does with it, or refuse its non-default values");
static_assert(RowMembers(FpgaSpecPart::kOutput) == MemberCount<OutputSpec>(),
              "OutputSpec has a field without a row in kRows (fpga_capability.cc)");
static_assert(RowMembers(FpgaSpecPart::kLimits) == MemberCount<DecodeLimits>(),
              "DecodeLimits has a field without a row in kRows (fpga_capability.cc)");

}  // namespace

const FpgaSpecField* FpgaSpecFields() { return kRows; }
size_t NumFpgaSpecFields() { return sizeof(kRows) / sizeof(kRows[0]); }

Capability FpgaSupports(const WorkContext& ctx) {
  for (const FpgaSpecField& r : kRows) {
    if (r.refuses == nullptr) continue;
    std::string why = r.refuses(ctx);
    if (!why.empty()) return Capability{false, absl::StrCat(r.name, ": ", why)};
  }
  return Capability{};
}

}  // namespace nearprep
