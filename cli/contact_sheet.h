// Contact sheets: a grid of a batch's images, each with a label band under
// it (a colour swatch keyed to the label, then the caption in the built-in
// bitmap font), written as PNG with libpng.
//
// Thread-safety: free functions and plain values.
#ifndef NEARPREP_CLIENT_CPP_SRC_CONTACT_SHEET_H_
#define NEARPREP_CLIENT_CPP_SRC_CONTACT_SHEET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/tensor_image.h"

namespace nearprep {

// Where everything goes on the sheet.
struct SheetLayout {
  int count = 0;
  int columns = 0, rows = 0;
  int image_height = 0, image_width = 0;
  int margin = 0;
  int label_height = 0;  // Band under each image.
  int font_scale = 1;
  int width = 0, height = 0;  // Whole sheet.

  // Top-left corner of image i (row-major order).
  int ImageX(int i) const { return margin + (i % columns) * (image_width + margin); }
  int ImageY(int i) const {
    return margin + (i / columns) * (image_height + label_height + margin);
  }
  // Top of the label band of image i.
  int LabelY(int i) const { return ImageY(i) + image_height; }
};

// columns <= 0: ceil(sqrt(count)). INVALID_ARGUMENT for empty or absurd
// sizes (a sheet over 2^28 pixels).
absl::StatusOr<SheetLayout> ComputeSheetLayout(int count, int image_height,
                                               int image_width,
                                               int columns = 0);

// Distinct, stable colour for a label (golden-ratio hue walk).
void LabelColor(int64_t label, uint8_t rgb[3]);

// Renders images (all the same size) with labels[i] and captions[i] (either
// may be shorter than images; missing captions show the label number).
absl::StatusOr<RgbImage> RenderContactSheet(
    const std::vector<RgbImage>& images, const std::vector<int64_t>& labels,
    const std::vector<std::string>& captions, int columns = 0);

// 8-bit RGB PNG. INTERNAL on I/O or libpng failure.
absl::Status WritePng(const std::string& path, const RgbImage& image);
// Reads an 8-bit RGB PNG back (tests, tools). INVALID_ARGUMENT otherwise.
absl::StatusOr<RgbImage> ReadPng(const std::string& path);

}  // namespace nearprep

#endif  // NEARPREP_CLIENT_CPP_SRC_CONTACT_SHEET_H_
