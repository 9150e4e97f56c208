// FpgaSupports (server/fpga/fpga_capability.h): the FPGA device path's answer
// to "do you compute this request?", derived from the table of spec fields.
// No XRT needed.
#include "server/fpga/fpga_capability.h"

#include <set>
#include <string>

#include "gtest/gtest.h"
#include "server/spec/types.h"

namespace nearprep {
namespace {

TEST(FpgaCapabilityTest, ATfCompatRequestIsSupported) {
  WorkContext ctx;
  ctx.spec.crop = CropMode::kResizeCenter;
  ctx.spec.flip_probability = 0.5f;
  ctx.spec.normalize = true;
  ctx.output.dtype = DType::kBFloat16;
  ctx.output.layout = Layout::kNCHW;
  const Capability c = FpgaSupports(ctx);
  EXPECT_TRUE(c.supported) << c.reason;
  EXPECT_EQ(c.reason, "");
}

TEST(FpgaCapabilityTest, WhatTheKernelDoesNotComputeIsRefusedNamingTheField) {
  struct Case {
    const char* field;
    void (*set)(WorkContext*);
  };
  const Case cases[] = {
      {"transform.fidelity", [](WorkContext* c) { c->spec.fidelity = Fidelity::kFast; }},
      {"transform.fidelity", [](WorkContext* c) { c->spec.fidelity = Fidelity::kTorchvision; }},
      {"transform.height", [](WorkContext* c) { c->spec.height = 4097; }},
      {"transform.height", [](WorkContext* c) { c->spec.height = 0; }},
      {"transform.width", [](WorkContext* c) { c->spec.width = 5000; }},
      {"output.dtype", [](WorkContext* c) { c->output.dtype = static_cast<DType>(9); }},
      {"output.layout", [](WorkContext* c) { c->output.layout = static_cast<Layout>(2); }},
      // No contrast, hue or gamma stage in the kernel (issue 36): CPU fallback.
      {"transform.contrast_enabled", [](WorkContext* c) { c->spec.contrast_enabled = true; }},
      {"transform.hue_max_delta", [](WorkContext* c) { c->spec.hue_max_delta = 0.1f; }},
      {"transform.gamma", [](WorkContext* c) { c->spec.gamma = 0.8f; }},
      {"transform.color_ops",
       [](WorkContext* c) { c->spec.color_ops = {ColorOp::kBrightness}; }},
  };
  for (const Case& k : cases) {
    WorkContext ctx;
    k.set(&ctx);
    const Capability c = FpgaSupports(ctx);
    EXPECT_FALSE(c.supported) << k.field;
    EXPECT_EQ(c.reason.rfind(std::string(k.field) + ": ", 0), 0u) << c.reason;
  }
  // The largest output the kernel's tap tables hold is still on the device.
  WorkContext big;
  big.spec.height = big.spec.width = 4096;
  EXPECT_TRUE(FpgaSupports(big).supported);
}

// Every field of the three specs, enumerated by binding the structs to
// exactly as many names as they have members (a new field stops this from
// compiling), has exactly one row; the rows' names are the request's.
TEST(FpgaCapabilityTest, TheTableHasOneRowPerSpecField) {
  WorkContext ctx;
  std::set<const void*> rows;
  std::set<std::string> names;
  for (size_t i = 0; i < NumFpgaSpecFields(); ++i) {
    const FpgaSpecField& r = FpgaSpecFields()[i];
    EXPECT_TRUE(rows.insert(r.where(ctx)).second) << r.name << " has two rows";
    EXPECT_TRUE(names.insert(r.name).second) << r.name;
  }
  auto& [height, width, crop, center_fraction, resize_shorter, scale_min, scale_max, ratio_min,
         ratio_max, flip_probability, brightness_max_delta, saturation_enabled,
         saturation_lower, saturation_upper, contrast_enabled, contrast_lower, contrast_upper,
         hue_max_delta, gamma, gain, color_ops, jitter_brightness, jitter_contrast,
         jitter_saturation, jitter_hue, auto_augment, rand_augment_num_ops,
         rand_augment_magnitude, erase_probability, erase_scale_min, erase_scale_max,
         erase_ratio_min, erase_ratio_max, erase_value, mixup_alpha, cutmix_alpha, clip,
         normalize, mean, std_dev, fidelity] = ctx.spec;
  auto& [dtype, layout] = ctx.output;
  auto& [max_decoded_values] = ctx.limits;
  const void* fields[] = {&height, &width, &crop, &center_fraction, &resize_shorter,
                          &scale_min, &scale_max, &ratio_min, &ratio_max, &flip_probability,
                          &brightness_max_delta, &saturation_enabled, &saturation_lower,
                          &saturation_upper, &contrast_enabled, &contrast_lower,
                          &contrast_upper, &hue_max_delta, &gamma, &gain, &color_ops,
                          &jitter_brightness, &jitter_contrast, &jitter_saturation,
                          &jitter_hue, &auto_augment, &rand_augment_num_ops,
                          &rand_augment_magnitude, &erase_probability, &erase_scale_min,
                          &erase_scale_max, &erase_ratio_min, &erase_ratio_max, &erase_value,
                          &mixup_alpha, &cutmix_alpha, &clip, &normalize, &mean, &std_dev,
                          &fidelity,
                          &dtype, &layout, &max_decoded_values};
  EXPECT_EQ(NumFpgaSpecFields(), sizeof(fields) / sizeof(fields[0]));
  for (const void* f : fields) EXPECT_EQ(rows.count(f), 1u);
  for (const char* n : {"transform.height", "transform.fidelity", "transform.mean",
                        "output.dtype", "limits.max_decoded_values"}) {
    EXPECT_EQ(names.count(n), 1u) << n;
  }
}

}  // namespace
}  // namespace nearprep
