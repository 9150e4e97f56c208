// See torchvision_preprocess.h. Decode: only the input pixels the resize
// window reads are decoded (JpegSession::DecodeCrop on baseline images:
// the same pixels as the full decode there), the whole image for
// progressive ones, and the full decode again whenever the region decode
// meets damaged data, so results and errors are always the full decode's.
#include "server/image/torchvision_preprocess.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/spec/resize_center.h"
#include "server/image/jpeg_session.h"
#include "server/image/pil_resample.h"
#include "server/image/preprocess_kernels.h"
#include "server/image/tf_ops_internal.h"
#include "server/image/pil_ops.h"
#include "server/image/torchvision_augment.h"

namespace nearprep {
namespace {

using internal::Clock;

// Output bytes of every (channel, resized value): the float32 steps of
// ConvertImageDtype and Normalize, then the dtype conversion.
struct ValueTables {
  size_t esize = 4;
  uint8_t bytes[3][256][4];
};

void BuildValueTables(const TransformSpec& spec, DType dtype,
                      ValueTables* t) {
  t->esize = DTypeSize(dtype);
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      float f = static_cast<float>(v) / 255.0f;
      if (spec.clip) f = std::max(std::min(f, 1.0f), 0.0f);  // No-op here.
      if (spec.normalize) f = (f - spec.mean[c]) / spec.std[c];
      internal::StoreElement(f, dtype, t->bytes[c][v]);
    }
  }
}

// Writes output row `y` (w pixels of interleaved RGB) into the tensor; ES
// is the element size, a constant so that each element's copy is one move
// (a run-time size made it a memcpy call per element: uint8 output cost
// more than float32).
template <size_t ES>
void StoreRowT(const uint8_t* rgb, int y, int h, int w, bool flip,
               Layout layout, const ValueTables& t, uint8_t* out) {
  if (layout == Layout::kNHWC) {
    uint8_t* row = out + static_cast<size_t>(y) * w * 3 * ES;
    for (int x = 0; x < w; ++x) {
      const int xo = flip ? w - 1 - x : x;
      uint8_t* o = row + static_cast<size_t>(xo) * 3 * ES;
      for (int c = 0; c < 3; ++c) {
        std::memcpy(o + c * ES, t.bytes[c][rgb[3 * x + c]], ES);
      }
    }
    return;
  }
  const size_t plane = static_cast<size_t>(h) * w * ES;
  for (int c = 0; c < 3; ++c) {
    uint8_t* row = out + c * plane + static_cast<size_t>(y) * w * ES;
    const auto& table = t.bytes[c];
    for (int x = 0; x < w; ++x) {
      const int xo = flip ? w - 1 - x : x;
      std::memcpy(row + static_cast<size_t>(xo) * ES, table[rgb[3 * x + c]],
                  ES);
    }
  }
}

void StoreRow(const uint8_t* rgb, int y, int h, int w, bool flip,
              Layout layout, const ValueTables& t, uint8_t* out) {
  switch (t.esize) {
    case 1:
      return StoreRowT<1>(rgb, y, h, w, flip, layout, t, out);
    case 2:
      return StoreRowT<2>(rgb, y, h, w, flip, layout, t, out);
    default:
      return StoreRowT<4>(rgb, y, h, w, flip, layout, t, out);
  }
}

// ColorJitter then the auto-augment ops on the resized, flipped image, as
// torchvision applies them to the PIL image.
// A disabled ColorJitter factor is skipped (torchvision's None): even a
// neutral factor is not an identity for every op (hue goes through HSV).
void AugmentImage(const TransformSpec& spec, const SampleParams& p,
                  pil::RgbImage* img) {
  const float enabled[4] = {spec.jitter_brightness, spec.jitter_contrast,
                            spec.jitter_saturation, spec.jitter_hue};
  for (int k = 0; k < p.jitter_ops; ++k) {
    const int fn = p.jitter_order[k];
    if (enabled[fn] == 0.0f) continue;
    const float f = p.jitter_factor[fn];
    switch (fn) {
      case 0:
        pil::AdjustBrightness(img, f);
        break;
      case 1:
        pil::AdjustContrast(img, f);
        break;
      case 2:
        pil::AdjustSaturation(img, f);
        break;
      default:
        pil::AdjustHue(img, f);
        break;
    }
  }
  static const uint8_t kFill[3] = {0, 0, 0};
  for (int k = 0; k < p.augment_steps; ++k) {
    ApplyAugmentOp(img, p.augment[k].op, p.augment[k].magnitude, kFill);
  }
}

struct Scratch {
  std::vector<uint8_t> rgb;
  PilResizer resizer;
  pil::RgbImage staged;
};

Scratch& ThreadScratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

namespace internal {

void EraseBox(const CropBox& box, const float value[3], int h, int w,
              DType dtype, Layout layout, uint8_t* out) {
  const size_t es = DTypeSize(dtype);
  uint8_t bytes[3][4];
  for (int c = 0; c < 3; ++c) internal::StoreElement(value[c], dtype, bytes[c]);
  for (int y = box.y; y < box.y + box.height; ++y) {
    for (int x = box.x; x < box.x + box.width; ++x) {
      for (int c = 0; c < 3; ++c) {
        const size_t index =
            layout == Layout::kNHWC
                ? (static_cast<size_t>(y) * w + x) * 3 + c
                : (static_cast<size_t>(c) * h + y) * w + x;
        std::memcpy(out + index * es, bytes[c], es);
      }
    }
  }
}

}  // namespace internal

namespace {

// The geometry of one sample: its parameters (drawn for the decoded size),
// the resize input box, its target size, the output window, and the input
// pixels the window reads (decoded-image coordinates).
struct TorchvisionPlan {
  SampleParams p;
  CropBox input;
  int target_h = 0, target_w = 0;
  CropBox window;
  CropBox need;
};

absl::Status CheckTorchvisionSpec(const TransformSpec& spec) {
  if (spec.brightness_max_delta != 0.0f || spec.saturation_enabled ||
      spec.contrast_enabled || spec.hue_max_delta != 0.0f ||
      spec.gamma != 0.0f) {
    return absl::InvalidArgumentError(
        "FIDELITY_TORCHVISION has no brightness, saturation, contrast, hue "
        "or gamma op");
  }
  return absl::OkStatus();
}

absl::Status PlanTorchvision(int height, int width, const TransformSpec& spec,
                             const ParamsFn& draw_params,
                             TorchvisionPlan* plan) {
  SampleParams& p = plan->p;
  p = draw_params ? draw_params(height, width) : SampleParams();
  p.source_height = height;
  p.source_width = width;
  const CropBox whole{0, 0, height, width};
  // The resize input (a box of the decoded image), its target size and the
  // window of the target that is the output.
  CropBox input = whole;
  int target_h = spec.height, target_w = spec.width;
  CropBox window{0, 0, spec.height, spec.width};
  if (spec.crop == CropMode::kNone || spec.crop == CropMode::kResizeCenter) {
    p.crop = whole;
  } else if (!CropBoxInside(p.crop, height, width)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "crop box (", p.crop.y, ",", p.crop.x, ",", p.crop.height, "x",
        p.crop.width, ") outside the ", height, "x", width, " image"));
  } else {
    input = p.crop;
  }
  if (spec.crop == CropMode::kResizeCenter) {
    const ResizeCenterGeometry g = TorchvisionResizeCenter(
        height, width, spec.resize_shorter, spec.height, spec.width);
    if (!CropBoxInside(g.window, g.resized_height, g.resized_width)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "transform: the ", spec.height, "x", spec.width,
          " centre crop does not fit the resized ", g.resized_height, "x",
          g.resized_width, " image"));
    }
    target_h = g.resized_height;
    target_w = g.resized_width;
    window = g.window;
  }
  CropBox need = PilResizeSourceRegion(input.height, input.width, target_h,
                                       target_w, window);
  need.y += input.y;
  need.x += input.x;
  plan->input = input;
  plan->target_h = target_h;
  plan->target_w = target_w;
  plan->window = window;
  plan->need = need;
  return absl::OkStatus();
}

// Everything after the decode: `src` holds (at least) plan.need, its y0/x0
// in decoded-image coordinates.
void ResizeAndStore(RgbRegion src, const TorchvisionPlan& plan,
                    const TransformSpec& spec, const OutputSpec& output,
                    uint8_t* out) {
  Scratch& sc = ThreadScratch();
  const SampleParams& p = plan.p;
  src.height = plan.need.height;
  src.width = plan.need.width;
  // The resize works in the input box's coordinates.
  src.y0 -= plan.input.y;
  src.x0 -= plan.input.x;
  ValueTables tables;
  BuildValueTables(spec, output.dtype, &tables);
  if (p.jitter_ops == 0 && p.augment_steps == 0) {
    sc.resizer.Resize(src, plan.input.height, plan.input.width, plan.target_h,
                      plan.target_w, plan.window,
                      [&](int y, const uint8_t* rgb) {
                        StoreRow(rgb, y, spec.height, spec.width, p.flip,
                                 output.layout, tables, out);
                      });
  } else {
    // Staged: the whole resized image, flipped, then the PIL ops.
    pil::RgbImage& img = sc.staged;
    img.height = spec.height;
    img.width = spec.width;
    const size_t row = static_cast<size_t>(spec.width) * 3;
    img.data.resize(row * static_cast<size_t>(spec.height));
    sc.resizer.Resize(src, plan.input.height, plan.input.width, plan.target_h,
                      plan.target_w, plan.window,
                      [&](int y, const uint8_t* rgb) {
                        std::memcpy(img.data.data() + row * y, rgb, row);
                      });
    if (p.flip) pil::FlipLeftRight(&img);
    AugmentImage(spec, p, &img);
    for (int y = 0; y < spec.height; ++y) {
      StoreRow(img.data.data() + row * y, y, spec.height, spec.width, false,
               output.layout, tables, out);
    }
    if (img.data.capacity() > (size_t{16} << 20)) {
      std::vector<uint8_t>().swap(img.data);
    }
  }
  if (p.erased) {
    internal::EraseBox(p.erase_box, spec.erase_value, spec.height,
                       spec.width, output.dtype, output.layout, out);
  }
}

}  // namespace

absl::Status PreprocessJpegTorchvision(const uint8_t* data, size_t size,
                                       const TransformSpec& spec,
                                       const OutputSpec& output,
                                       const DecodeLimits& limits,
                                       const ParamsFn& draw_params,
                                       SampleParams* params, uint8_t* out,
                                       StageTimes* times) {
  absl::Status st = CheckTorchvisionSpec(spec);
  if (!st.ok()) return st;
  const Clock::time_point t0 = Clock::now();
  internal::JpegSession& session = internal::JpegSession::ThreadLocal();
  JpegHeader header;
  st = session.ReadHeader(data, size, limits, &header, JpegStyle::kPil);
  if (!st.ok()) return st;
  TorchvisionPlan plan;
  st = PlanTorchvision(header.height, header.width, spec, draw_params, &plan);
  if (!st.ok()) return st;
  const CropBox& need = plan.need;

  Scratch& sc = ThreadScratch();
  const internal::ScratchTrim<std::vector<uint8_t>> trim(&sc.rgb);
  RgbRegion src;
  bool decoded = false;
  const bool all = need.y == 0 && need.x == 0 &&
                   need.height == header.height && need.width == header.width;
  if (!all && !header.progressive) {
    // Baseline region decode; damaged data (a warning) or an error sends
    // it to the full decode below.
    const int header_warnings = session.warnings();
    int h = 0, w = 0;
    CropBox in_buf;
    st = session.DecodeCrop(need, &sc.rgb, &h, &w, &in_buf);
    if (st.ok() && session.warnings() == header_warnings) {
      src.stride = static_cast<size_t>(w) * 3;
      src.data = sc.rgb.data() + static_cast<size_t>(in_buf.y) * src.stride +
                 static_cast<size_t>(in_buf.x) * 3;
      src.y0 = need.y;
      src.x0 = need.x;
      decoded = true;
    } else {
      st = session.ReadHeader(data, size, limits, &header, JpegStyle::kPil);
      if (!st.ok()) return st;
    }
  }
  if (!decoded) {
    st = session.DecodeFull(&sc.rgb);
    if (!st.ok()) return st;
    src.stride = static_cast<size_t>(header.width) * 3;
    src.data = sc.rgb.data();
    src.y0 = 0;
    src.x0 = 0;
  }
  const Clock::time_point t1 = Clock::now();
  ResizeAndStore(src, plan, spec, output, out);
  internal::ReportSample(plan.p, t0, t1, params, times);
  return absl::OkStatus();
}

absl::Status PreprocessDecodedTorchvision(const uint8_t* rgb, int height,
                                          int width, const TransformSpec& spec,
                                          const OutputSpec& output,
                                          const ParamsFn& draw_params,
                                          SampleParams* params, uint8_t* out,
                                          StageTimes* times) {
  absl::Status st = CheckTorchvisionSpec(spec);
  if (!st.ok()) return st;
  const Clock::time_point t0 = Clock::now();
  TorchvisionPlan plan;
  st = PlanTorchvision(height, width, spec, draw_params, &plan);
  if (!st.ok()) return st;
  RgbRegion src;
  src.stride = static_cast<size_t>(width) * 3;
  src.data = rgb;
  // The full image: the resize reads plan.need from it, at its own place.
  src.data += static_cast<size_t>(plan.need.y) * src.stride +
              static_cast<size_t>(plan.need.x) * 3;
  src.y0 = plan.need.y;
  src.x0 = plan.need.x;
  ResizeAndStore(src, plan, spec, output, out);
  // No decode: all of the time is transform time.
  internal::ReportSample(plan.p, t0, t0, params, times);
  return absl::OkStatus();
}

}  // namespace nearprep
