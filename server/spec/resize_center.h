// Geometry of CROP_MODE_RESIZE_CENTER (resize the shorter side to R, then
// take a centred crop of the output size), shared by the epoch plan (which
// reports the crop box) and the image code (which computes the pixels).
// docs/protocol.md restates it.
//
// Thread-safety: pure functions.
#ifndef NEARPREP_SERVER_SPEC_RESIZE_CENTER_H_
#define NEARPREP_SERVER_SPEC_RESIZE_CENTER_H_

#include <algorithm>
#include <cstdint>

#include "server/spec/types.h"

namespace nearprep {

// torchvision 0.14's Resize(shorter) output size and CenterCrop(out_h,
// out_w)'s window in it, for an h x w image.
struct ResizeCenterGeometry {
  int resized_height = 0, resized_width = 0;
  CropBox window;  // In resized pixels.
};

// int(round(d / 2.0)) for an integer d >= 0 (Python rounds halves to even).
inline int HalfRoundedEven(int d) {
  const int k = d / 2;
  if (d % 2 == 0) return k;
  return (k % 2 == 0) ? k : k + 1;
}

inline ResizeCenterGeometry TorchvisionResizeCenter(int height, int width,
                                                    int shorter, int out_h,
                                                    int out_w) {
  ResizeCenterGeometry g;
  const bool portrait = width <= height;
  const int64_t short_side = portrait ? width : height;
  const int64_t long_side = portrait ? height : width;
  // int(size * long / short): an exact integer product, one correctly
  // rounded double division, truncation.
  const auto new_long = static_cast<int>(
      static_cast<double>(int64_t{shorter} * long_side) /
      static_cast<double>(short_side));
  g.resized_width = portrait ? shorter : new_long;
  g.resized_height = portrait ? new_long : shorter;
  g.window.height = out_h;
  g.window.width = out_w;
  g.window.y = HalfRoundedEven(g.resized_height - out_h);
  g.window.x = HalfRoundedEven(g.resized_width - out_w);
  return g;
}

// The box of the decoded image that TF_COMPAT and FAST resample to the
// output for this mode: centred, each side the output side scaled back by
// decoded / resized, rounded half up, within [1, side]; offset
// floor((side - box) / 2).
inline CropBox ResizeCenterSourceBox(int height, int width, int shorter,
                                     int out_h, int out_w) {
  const ResizeCenterGeometry g =
      TorchvisionResizeCenter(height, width, shorter, out_h, out_w);
  auto side = [](int64_t n, int64_t out, int64_t resized) {
    const int64_t v = (2 * out * n + resized) / (2 * resized);
    return static_cast<int>(std::min<int64_t>(std::max<int64_t>(v, 1), n));
  };
  CropBox box;
  box.height = side(height, out_h, g.resized_height);
  box.width = side(width, out_w, g.resized_width);
  box.y = (height - box.height) / 2;
  box.x = (width - box.width) / 2;
  return box;
}

}  // namespace nearprep

#endif  // NEARPREP_SERVER_SPEC_RESIZE_CENTER_H_
