// FIDELITY_TORCHVISION: one sample as torchvision 0.14's transforms compute
// it on the PIL image that its default loader returns (Pillow 9.4):
//
//   img = Image.open(f).convert("RGB")            JpegStyle::kPil decode
//   crop modes NONE, CENTER, RANDOM_RESIZED:
//     F.resized_crop(img, y, x, h, w, [H, W], BILINEAR)   = crop the box,
//       then Image.resize((W, H), BILINEAR)       pil_resample.h
//   crop mode RESIZE_CENTER:
//     Resize(R)(img): shorter side R, longer int(R * long / short)
//     CenterCrop([H, W]): offsets int(round((side - H) / 2.0)) (half to even)
//     (server/spec/resize_center.h); only the window is computed
//   RandomHorizontalFlip: reverse the columns when params.flip
//   PILToTensor; ConvertImageDtype(float): x / 255 in float32;
//   Normalize(mean, std): (x - mean[c]) / std[c] in float32.
//
// The output dtype and layout are applied to that float tensor as for the
// other fidelities (uint8 without mean/std gives PILToTensor's bytes).
// Brightness and saturation (TensorFlow's augmentations) are refused.
//
// Each output value is a function of one 8-bit resized value and the
// channel, so the float steps are a 256-entry table per channel, built with
// exactly the float32 operations above.
//
// Thread-safety: reentrant (per-thread scratch).
#ifndef NEARPREP_SERVER_IMAGE_TORCHVISION_PREPROCESS_H_
#define NEARPREP_SERVER_IMAGE_TORCHVISION_PREPROCESS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "server/spec/types.h"
#include "server/image/preprocess.h"

namespace nearprep {

// PreprocessJpeg for spec.fidelity == kTorchvision (same contract).
absl::Status PreprocessJpegTorchvision(const uint8_t* data, size_t size,
                                       const TransformSpec& spec,
                                       const OutputSpec& output,
                                       const DecodeLimits& limits,
                                       const ParamsFn& draw_params,
                                       SampleParams* params, uint8_t* out,
                                       StageTimes* times);

// The same on the full image that DecodeJpegPil returns for those bytes
// (PreprocessDecoded in preprocess.h): the same output bytes and params.
absl::Status PreprocessDecodedTorchvision(const uint8_t* rgb, int height,
                                          int width, const TransformSpec& spec,
                                          const OutputSpec& output,
                                          const ParamsFn& draw_params,
                                          SampleParams* params, uint8_t* out,
                                          StageTimes* times);

namespace internal {

// RandomErasing on a stored h x w output tensor: the box's elements become
// value[c], converted to `dtype` as every element is. (Exposed for the
// benchmark driver.)
void EraseBox(const CropBox& box, const float value[3], int h, int w,
              DType dtype, Layout layout, uint8_t* out);

}  // namespace internal
}  // namespace nearprep

#endif  // NEARPREP_SERVER_IMAGE_TORCHVISION_PREPROCESS_H_
