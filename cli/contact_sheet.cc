#include "cli/contact_sheet.h"

#include <png.h>

#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "cli/bitmap_font.h"

namespace nearprep {
namespace {

constexpr int64_t kMaxSheetPixels = int64_t{1} << 28;

using FilePtr = std::unique_ptr<FILE, int (*)(FILE*)>;

}  // namespace

absl::StatusOr<SheetLayout> ComputeSheetLayout(int count, int image_height,
                                               int image_width, int columns) {
  if (count <= 0 || image_height <= 0 || image_width <= 0) {
    return absl::InvalidArgumentError("contact sheet: nothing to draw");
  }
  SheetLayout l;
  l.count = count;
  l.columns = columns > 0 ? std::min(columns, count)
                          : static_cast<int>(std::ceil(std::sqrt(count)));
  l.rows = (count + l.columns - 1) / l.columns;
  l.image_height = image_height;
  l.image_width = image_width;
  l.margin = 4;
  l.font_scale = std::max(1, image_width / 112);
  l.label_height = kGlyphHeight * l.font_scale + 4;
  const int64_t w = int64_t{l.columns} * (image_width + l.margin) + l.margin;
  const int64_t h =
      int64_t{l.rows} * (image_height + l.label_height + l.margin) + l.margin;
  if (w * h > kMaxSheetPixels) {
    return absl::InvalidArgumentError(
        absl::StrCat("contact sheet: ", w, "x", h, " pixels is too large"));
  }
  l.width = static_cast<int>(w);
  l.height = static_cast<int>(h);
  return l;
}

void LabelColor(int64_t label, uint8_t rgb[3]) {
  // Hue walk by the golden ratio; fixed saturation and value.
  double h = std::fmod(static_cast<double>(label) * 0.6180339887498949, 1.0);
  if (h < 0) h += 1.0;
  const double s = 0.65, v = 0.95;
  const double c = v * s, hp = h * 6.0;
  const double x = c * (1.0 - std::fabs(std::fmod(hp, 2.0) - 1.0));
  double r = 0, g = 0, b = 0;
  switch (static_cast<int>(hp) % 6) {
    case 0: r = c; g = x; break;
    case 1: r = x; g = c; break;
    case 2: g = c; b = x; break;
    case 3: g = x; b = c; break;
    case 4: r = x; b = c; break;
    default: r = c; b = x; break;
  }
  const double m = v - c;
  rgb[0] = static_cast<uint8_t>(std::lround((r + m) * 255));
  rgb[1] = static_cast<uint8_t>(std::lround((g + m) * 255));
  rgb[2] = static_cast<uint8_t>(std::lround((b + m) * 255));
}

absl::StatusOr<RgbImage> RenderContactSheet(
    const std::vector<RgbImage>& images, const std::vector<int64_t>& labels,
    const std::vector<std::string>& captions, int columns) {
  if (images.empty()) {
    return absl::InvalidArgumentError("contact sheet: no images");
  }
  const int ih = images[0].height, iw = images[0].width;
  for (const RgbImage& im : images) {
    if (im.height != ih || im.width != iw ||
        im.pixels.size() != static_cast<size_t>(ih) * iw * 3) {
      return absl::InvalidArgumentError(
          "contact sheet: images differ in size");
    }
  }
  absl::StatusOr<SheetLayout> layout = ComputeSheetLayout(
      static_cast<int>(images.size()), ih, iw, columns);
  if (!layout.ok()) return layout.status();
  const SheetLayout& l = *layout;
  RgbImage sheet(l.height, l.width, 24);  // Dark grey background.
  const uint8_t white[3] = {255, 255, 255};
  for (int i = 0; i < l.count; ++i) {
    const int x0 = l.ImageX(i), y0 = l.ImageY(i);
    for (int y = 0; y < ih; ++y) {
      std::copy_n(images[i].at(y, 0), static_cast<size_t>(iw) * 3,
                  sheet.at(y0 + y, x0));
    }
    // Label band: a swatch of the label's colour, then the caption.
    const int by = l.LabelY(i);
    const bool has_label = static_cast<size_t>(i) < labels.size();
    uint8_t color[3] = {90, 90, 90};
    if (has_label) LabelColor(labels[i], color);
    const int swatch = l.label_height - 2;
    for (int y = by + 1; y < by + 1 + swatch; ++y) {
      for (int x = x0; x < x0 + std::min(swatch, iw); ++x) {
        uint8_t* p = sheet.at(y, x);
        p[0] = color[0];
        p[1] = color[1];
        p[2] = color[2];
      }
    }
    std::string text;
    if (static_cast<size_t>(i) < captions.size()) {
      text = captions[i];
    } else if (has_label) {
      text = absl::StrCat(labels[i]);
    }
    const int tx = x0 + swatch + 2 * l.font_scale;
    const int max_chars =
        std::max(0, (x0 + iw - tx + l.font_scale) /
                        (kGlyphAdvance * l.font_scale));
    if (static_cast<int>(text.size()) > max_chars) text.resize(max_chars);
    // Clip the text to this cell by drawing onto a band-sized canvas.
    RgbImage band(l.label_height, x0 + iw - tx > 0 ? x0 + iw - tx : 0, 24);
    if (band.width > 0) {
      DrawText(&band, 0, 2, text, l.font_scale, white);
      for (int y = 0; y < band.height; ++y) {
        std::copy_n(band.at(y, 0), static_cast<size_t>(band.width) * 3,
                    sheet.at(by + y, tx));
      }
    }
  }
  return sheet;
}

absl::Status WritePng(const std::string& path, const RgbImage& image) {
  if (image.width <= 0 || image.height <= 0 ||
      image.pixels.size() != static_cast<size_t>(image.width) * image.height * 3) {
    return absl::InvalidArgumentError("png: empty or inconsistent image");
  }
  FilePtr f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return absl::InternalError(absl::StrCat("cannot create ", path));
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  if (!png) return absl::InternalError("png_create_write_struct failed");
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_write_struct(&png, nullptr);
    return absl::InternalError("png_create_info_struct failed");
  }
  std::vector<png_bytep> rows(image.height);
  for (int y = 0; y < image.height; ++y) {
    rows[y] = const_cast<png_bytep>(image.at(y, 0));
  }
  // libpng reports errors by longjmp; nothing with a destructor is created
  // between here and the calls below.
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return absl::InternalError(absl::StrCat("libpng failed writing ", path));
  }
  png_init_io(png, f.get());
  png_set_IHDR(png, info, image.width, image.height, 8, PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_set_compression_level(png, 6);
  png_write_info(png, info);
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  if (std::fclose(f.release()) != 0) {
    return absl::InternalError(absl::StrCat("close failed: ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<RgbImage> ReadPng(const std::string& path) {
  FilePtr f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  if (!png) return absl::InternalError("png_create_read_struct failed");
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return absl::InternalError("png_create_info_struct failed");
  }
  RgbImage* volatile result = nullptr;
  std::unique_ptr<RgbImage> holder(new RgbImage());
  result = holder.get();
  std::vector<png_bytep> rows;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return absl::InvalidArgumentError(absl::StrCat("not a valid PNG: ", path));
  }
  png_init_io(png, f.get());
  png_read_info(png, info);
  if (png_get_bit_depth(png, info) != 8 ||
      png_get_color_type(png, info) != PNG_COLOR_TYPE_RGB) {
    png_destroy_read_struct(&png, &info, nullptr);
    return absl::InvalidArgumentError("png: only 8-bit RGB is read");
  }
  const int w = static_cast<int>(png_get_image_width(png, info));
  const int h = static_cast<int>(png_get_image_height(png, info));
  if (int64_t{w} * h > kMaxSheetPixels) {
    png_destroy_read_struct(&png, &info, nullptr);
    return absl::InvalidArgumentError("png: too large");
  }
  *result = RgbImage(h, w);
  rows.resize(h);
  for (int y = 0; y < h; ++y) rows[y] = result->at(y, 0);
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return std::move(*holder);
}

}  // namespace nearprep
