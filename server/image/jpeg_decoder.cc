// JPEG decoding on libjpeg-turbo's libjpeg API with TensorFlow's
// decode_jpeg(channels=3) semantics (see jpeg_decoder.h).
//
// Error handling follows TensorFlow's decode_jpeg (core/lib/jpeg/jpeg_mem.cc
// and jpeg_handle.cc, try_recover_truncated = false, acceptable_fraction = 1):
//  - fatal libjpeg errors (error_exit) fail the decode; they longjmp back into
//    the session call that started the work, which resets the decompressor
//    with jpeg_abort_decompress() and returns a status;
//  - the source manager treats any need for a byte past the end of the data
//    as fatal (TF's MemFillInputBuffer raises JERR_FILE_READ), so a truncated
//    file, including one that lacks only its EOI marker, is an error;
//  - warnings (emit_message(-1): "Corrupt JPEG data: N extraneous bytes before
//    marker", "premature end of data segment", bad restart markers, ...) are
//    only counted: TF keeps libjpeg's default emit_message and returns the
//    image libjpeg produced, so TF_COMPAT does too;
//  - TF_COMPAT runs jpeg_finish_decompress, which reads to the EOI marker.
// The functions that call setjmp hold no objects with destructors.
#include "server/image/jpeg_decoder.h"

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/image/jpeg_session.h"

#include <jerror.h>

namespace nearprep {
namespace internal {
namespace {

// Pillow's "CMYK;I" unpacking (invert) followed by its cmyk2rgb.
inline int MulDiv255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

void CmykRowToRgbPil(const uint8_t* cmyk, size_t width, uint8_t* rgb) {
  for (size_t x = 0; x < width; ++x, cmyk += 4, rgb += 3) {
    const int nk = cmyk[3];  // 255 - (255 - k)
    for (int c = 0; c < 3; ++c) {
      const int v = nk - MulDiv255(255 - cmyk[c], nk);
      rgb[c] = static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
    }
  }
}

}  // namespace

JpegSession::JpegSession() {
  std::memset(&cinfo_, 0, sizeof(cinfo_));
  std::memset(&err_, 0, sizeof(err_));
  cinfo_.err = jpeg_std_error(&err_.pub);
  err_.pub.error_exit = &JpegSession::OnErrorExit;
  err_.pub.emit_message = &JpegSession::OnEmitMessage;
  std::memset(&src_, 0, sizeof(src_));
  src_.init_source = &JpegSession::SourceInit;
  src_.fill_input_buffer = &JpegSession::SourceFill;
  src_.skip_input_data = &JpegSession::SourceSkip;
  src_.resync_to_restart = jpeg_resync_to_restart;
  src_.term_source = &JpegSession::SourceTerm;
  // jpeg_create_decompress reports failure (out of memory) via error_exit.
  if (setjmp(err_.jump)) {
    cinfo_.mem = nullptr;
    return;
  }
  jpeg_create_decompress(&cinfo_);
  cinfo_.client_data = this;
}

bool JpegSession::Renew() {
  // libjpeg keeps quantization and Huffman tables across images in one
  // decompressor (for abbreviated streams), so a stream that lacks a table,
  // or defines it only after the scan that needs it, would decode with the
  // previous image's tables. TensorFlow uses a fresh decompressor per image:
  // a missing DQT is an error and missing DHTs get libjpeg's standard
  // tables. Recreating costs a few small allocations, nothing per pixel.
  if (!used_) return cinfo_.mem != nullptr;
  used_ = false;
  if (cinfo_.mem != nullptr) jpeg_destroy_decompress(&cinfo_);
  cinfo_.mem = nullptr;
  if (setjmp(err_.jump)) {
    cinfo_.mem = nullptr;
    return false;
  }
  jpeg_create_decompress(&cinfo_);
  cinfo_.client_data = this;
  return true;
}

JpegSession::~JpegSession() {
  if (cinfo_.mem != nullptr) jpeg_destroy_decompress(&cinfo_);
}

JpegSession& JpegSession::ThreadLocal() {
  thread_local JpegSession session;
  return session;
}

void JpegSession::OnErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  err->msg_code = err->pub.msg_code;
  (*err->pub.format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void JpegSession::OnEmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // Trace messages.
  // A warning: libjpeg recovered from corrupt data and goes on, as it does
  // under TensorFlow. Count it and keep the first text for diagnostics.
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  if (err->pub.num_warnings == 0) {
    (*err->pub.format_message)(cinfo, err->warning);
  }
  err->pub.num_warnings++;
}

void JpegSession::SourceInit(j_decompress_ptr cinfo) {
  auto* self = static_cast<JpegSession*>(cinfo->client_data);
  self->src_.next_input_byte = self->data_;
  self->src_.bytes_in_buffer = self->size_;
}

boolean JpegSession::SourceFill(j_decompress_ptr cinfo) {
  // libjpeg asks for more only when every byte has been consumed.
  ERREXIT(cinfo, JERR_INPUT_EOF);
  return FALSE;
}

void JpegSession::SourceSkip(j_decompress_ptr cinfo, long num_bytes) {
  if (num_bytes <= 0) return;
  jpeg_source_mgr* src = cinfo->src;
  if (static_cast<unsigned long>(num_bytes) > src->bytes_in_buffer) {
    src->next_input_byte += src->bytes_in_buffer;
    src->bytes_in_buffer = 0;
    SourceFill(cinfo);  // Past the end: fatal.
    return;
  }
  src->next_input_byte += num_bytes;
  src->bytes_in_buffer -= static_cast<size_t>(num_bytes);
}

void JpegSession::SourceTerm(j_decompress_ptr) {}

absl::Status JpegSession::Failure(absl::StatusCode code, const char* stage) {
  if (cinfo_.mem != nullptr) jpeg_abort_decompress(&cinfo_);
  // Out of memory, and an image over libjpeg's own size limit
  // (JPEG_MAX_DIMENSION, 65500 pixels a side, checked before our pixel
  // limit can be), are limit errors like ours, not malformed input.
  if (err_.msg_code == JERR_OUT_OF_MEMORY ||
      err_.msg_code == JERR_IMAGE_TOO_BIG) {
    code = absl::StatusCode::kResourceExhausted;
  }
  return absl::Status(code, absl::StrCat("JPEG ", stage, ": ", err_.message));
}

absl::Status JpegSession::ReadHeader(const uint8_t* data, size_t size,
                                     const DecodeLimits& limits,
                                     JpegHeader* header, JpegStyle style) {
  if (!Renew()) {
    return absl::ResourceExhaustedError("JPEG: cannot create decompressor");
  }
  if (data == nullptr || size == 0) {
    return absl::InvalidArgumentError("not a JPEG: empty input");
  }
  if (size < 2 || data[0] != 0xFF || data[1] != 0xD8) {
    return absl::InvalidArgumentError("not a JPEG: no SOI marker");
  }
  cmyk_ = false;
  style_ = style;
  err_.message[0] = '\0';
  err_.warning[0] = '\0';
  err_.msg_code = 0;
  err_.pub.num_warnings = 0;
  used_ = true;
  if (setjmp(err_.jump)) {
    return Failure(absl::StatusCode::kInvalidArgument, "header");
  }
  data_ = data;
  size_ = size;
  cinfo_.src = &src_;
  src_.bytes_in_buffer = 0;
  src_.next_input_byte = nullptr;
  // EXIF and other APPn markers are not kept (jpeg_save_markers not called).
  if (jpeg_read_header(&cinfo_, TRUE) != JPEG_HEADER_OK) {
    jpeg_abort_decompress(&cinfo_);
    return absl::InvalidArgumentError("not a JPEG: no image in stream");
  }
  header->height = static_cast<int>(cinfo_.image_height);
  header->width = static_cast<int>(cinfo_.image_width);
  header->components = cinfo_.num_components;
  header->progressive = cinfo_.progressive_mode != 0;
  header->arithmetic = cinfo_.arith_code != 0;
  const uint64_t values = static_cast<uint64_t>(cinfo_.image_height) *
                          cinfo_.image_width * cinfo_.num_components;
  if (values >= limits.max_decoded_values) {
    jpeg_abort_decompress(&cinfo_);
    return absl::ResourceExhaustedError(absl::StrCat(
        "JPEG too large: ", cinfo_.image_height, "x", cinfo_.image_width, "x",
        cinfo_.num_components, " = ", values, " values, limit ",
        limits.max_decoded_values));
  }
  if (values == 0) {
    jpeg_abort_decompress(&cinfo_);
    return absl::InvalidArgumentError("JPEG has an empty image");
  }
  cmyk_ = cinfo_.jpeg_color_space == JCS_CMYK ||
          cinfo_.jpeg_color_space == JCS_YCCK;
  cinfo_.out_color_space = cmyk_ ? JCS_CMYK : JCS_RGB;
  cinfo_.dct_method =
      style_ == JpegStyle::kPil ? JDCT_ISLOW : JDCT_IFAST;
  cinfo_.do_fancy_upsampling = TRUE;
  cinfo_.scale_num = 1;
  cinfo_.scale_denom = 1;
  return absl::OkStatus();
}

void JpegSession::ReadRows(int rows, uint8_t* rgb) {
  const size_t width = cinfo_.output_width;
  const size_t stride = width * 3;
  if (!cmyk_) {
    if (row_ptrs_.size() < static_cast<size_t>(rows)) row_ptrs_.resize(rows);
    for (int i = 0; i < rows; ++i) row_ptrs_[i] = rgb + i * stride;
    int done = 0;
    while (done < rows) {
      const JDIMENSION got = jpeg_read_scanlines(
          &cinfo_, row_ptrs_.data() + done, static_cast<JDIMENSION>(rows - done));
      if (got == 0) ERREXIT(&cinfo_, JERR_INPUT_EOF);
      done += static_cast<int>(got);
    }
    return;
  }
  if (cmyk_rows_.size() < width * 4) cmyk_rows_.resize(width * 4);
  JSAMPROW tmp = cmyk_rows_.data();
  const bool adobe = cinfo_.saw_Adobe_marker != 0;
  for (int y = 0; y < rows; ++y) {
    if (jpeg_read_scanlines(&cinfo_, &tmp, 1) != 1) {
      ERREXIT(&cinfo_, JERR_INPUT_EOF);
    }
    uint8_t* out = rgb + y * stride;
    if (style_ == JpegStyle::kPil) {
      CmykRowToRgbPil(tmp, width, out);
      continue;
    }
    for (size_t x = 0; x < width; ++x) {
      const int c = tmp[4 * x], m = tmp[4 * x + 1], yy = tmp[4 * x + 2],
                k = tmp[4 * x + 3];
      // TensorFlow's rule (jpeg_mem.cc): Adobe files store inverted CMYK.
      if (adobe) {
        out[3 * x] = static_cast<uint8_t>((k * c) / 255);
        out[3 * x + 1] = static_cast<uint8_t>((k * m) / 255);
        out[3 * x + 2] = static_cast<uint8_t>((k * yy) / 255);
      } else {
        out[3 * x] = static_cast<uint8_t>((255 - k) * (255 - c) / 255);
        out[3 * x + 1] = static_cast<uint8_t>((255 - k) * (255 - m) / 255);
        out[3 * x + 2] = static_cast<uint8_t>((255 - k) * (255 - yy) / 255);
      }
    }
  }
}

absl::Status JpegSession::DecodeFull(std::vector<uint8_t>* rgb) {
  const size_t need =
      static_cast<size_t>(cinfo_.image_height) * cinfo_.image_width * 3;
  if (rgb->size() < need) rgb->resize(need);
  return DecodeFull(rgb->data());
}

absl::Status JpegSession::DecodeFull(uint8_t* out) {
  if (setjmp(err_.jump)) {
    return Failure(absl::StatusCode::kDataLoss, "decode");
  }
  jpeg_start_decompress(&cinfo_);
  ReadRows(static_cast<int>(cinfo_.output_height), out);
  jpeg_finish_decompress(&cinfo_);
  return absl::OkStatus();
}

absl::Status JpegSession::DecodeCrop(const CropBox& crop,
                                     std::vector<uint8_t>* rgb, int* height,
                                     int* width, CropBox* in_buf) {
  cinfo_.scale_num = 1;
  cinfo_.scale_denom = 1;
  if (setjmp(err_.jump)) {
    return Failure(absl::StatusCode::kDataLoss, "decode");
  }
  jpeg_start_decompress(&cinfo_);
  const int full_w = static_cast<int>(cinfo_.output_width);
  const int full_h = static_cast<int>(cinfo_.output_height);
  int x0 = std::max(crop.x - 1, 0);
  int x1 = std::min(crop.x + crop.width + 1, full_w);
  // jpeg_crop_scanline sets each component's width to the window's
  // (ceil(width * h_samp / max_h_samp) samples) and, when that falls under
  // 2 for a component that had more, re-initialises the upsampler, which
  // then picks plain replication instead of the fancy (triangle) filter the
  // full decode uses (libjpeg-turbo jdapistd.c, jdsample.c): a 1-pixel
  // crop at the left edge of a 4:2:0 image (window width 2) came out
  // different (issue 12, a libFuzzer finding). A window of at least
  // max_h_samp_factor + 1 pixels keeps every component at >= 2 samples.
  const int min_w = std::min(cinfo_.max_h_samp_factor + 1, full_w);
  if (x1 - x0 < min_w) {
    x1 = std::min(x0 + min_w, full_w);
    x0 = x1 - min_w;
  }
  const int y0 = std::max(crop.y - 1, 0);
  const int y1 = std::min(crop.y + crop.height + 1, full_h);
  JDIMENSION xoff = static_cast<JDIMENSION>(x0);
  JDIMENSION cw = static_cast<JDIMENSION>(x1 - x0);
  if (static_cast<int>(cw) < full_w) jpeg_crop_scanline(&cinfo_, &xoff, &cw);
  const size_t need = static_cast<size_t>(cinfo_.output_width) * 3 * (y1 - y0);
  if (rgb->size() < need) rgb->resize(need);
  if (y0 > 0 && jpeg_skip_scanlines(&cinfo_, static_cast<JDIMENSION>(y0)) !=
                    static_cast<JDIMENSION>(y0)) {
    ERREXIT(&cinfo_, JERR_INPUT_EOF);
  }
  ReadRows(y1 - y0, rgb->data());
  // The rest is still entropy-decoded, and EOI read, as a full decode does:
  // damage or truncation there is an error in TensorFlow too. (Skipping to
  // the very end would not do it: libjpeg then just marks EOI reached; so
  // skip all but the last row and read that one.)
  if (y1 < full_h) {
    const JDIMENSION rest = static_cast<JDIMENSION>(full_h - 1 - y1);
    if (rest > 0 && jpeg_skip_scanlines(&cinfo_, rest) != rest) {
      ERREXIT(&cinfo_, JERR_INPUT_EOF);
    }
    if (tail_row_.size() < static_cast<size_t>(cinfo_.output_width) * 4) {
      tail_row_.resize(static_cast<size_t>(cinfo_.output_width) * 4);
    }
    JSAMPROW row = tail_row_.data();
    if (jpeg_read_scanlines(&cinfo_, &row, 1) != 1) {
      ERREXIT(&cinfo_, JERR_INPUT_EOF);
    }
  }
  jpeg_finish_decompress(&cinfo_);
  *height = y1 - y0;
  *width = static_cast<int>(cinfo_.output_width);
  in_buf->y = crop.y - y0;
  in_buf->x = crop.x - static_cast<int>(xoff);
  in_buf->height = crop.height;
  in_buf->width = crop.width;
  return absl::OkStatus();
}

int JpegSession::ScaleDenominator(const CropBox& crop, int target_height,
                                  int target_width) {
  int denom = 1;
  while (denom < 8 &&
         static_cast<int64_t>(crop.height) >= int64_t{2} * denom * target_height &&
         static_cast<int64_t>(crop.width) >= int64_t{2} * denom * target_width) {
    denom *= 2;
  }
  return denom;
}

absl::Status JpegSession::DecodeRegion(const CropBox& crop, int target_height,
                                       int target_width,
                                       std::vector<uint8_t>* rgb, int* height,
                                       int* width, CropBox* scaled_crop) {
  const int denom = ScaleDenominator(crop, target_height, target_width);
  cinfo_.scale_num = 1;
  cinfo_.scale_denom = static_cast<unsigned int>(denom);
  jpeg_calc_output_dimensions(&cinfo_);
  const int out_w = static_cast<int>(cinfo_.output_width);
  const int out_h = static_cast<int>(cinfo_.output_height);
  // The crop in scaled pixels, rounded to whole pixels, never empty.
  auto scaled = [denom](int v) {
    return static_cast<int>((static_cast<int64_t>(v) * 2 + denom) / (2 * denom));
  };
  int x0 = std::min(scaled(crop.x), out_w - 1);
  int y0 = std::min(scaled(crop.y), out_h - 1);
  int x1 = std::max(std::min(scaled(crop.x + crop.width), out_w), x0 + 1);
  int y1 = std::max(std::min(scaled(crop.y + crop.height), out_h), y0 + 1);
  // Worst-case buffer: the whole scaled width (crop_scanline may widen the
  // region to iMCU boundaries) times the crop's rows.
  const size_t need = static_cast<size_t>(out_w) * 3 * (y1 - y0);
  if (rgb->size() < need) rgb->resize(need);
  uint8_t* out = rgb->data();
  JDIMENSION xoff = static_cast<JDIMENSION>(x0);
  JDIMENSION cw = static_cast<JDIMENSION>(x1 - x0);
  if (setjmp(err_.jump)) {
    return Failure(absl::StatusCode::kDataLoss, "decode");
  }
  jpeg_start_decompress(&cinfo_);
  if (cw < cinfo_.output_width) jpeg_crop_scanline(&cinfo_, &xoff, &cw);
  if (y0 > 0) {
    if (jpeg_skip_scanlines(&cinfo_, static_cast<JDIMENSION>(y0)) !=
        static_cast<JDIMENSION>(y0)) {
      ERREXIT(&cinfo_, JERR_INPUT_EOF);
    }
  }
  ReadRows(y1 - y0, out);
  // Rows below the crop are never decoded.
  jpeg_abort_decompress(&cinfo_);
  *height = y1 - y0;
  *width = static_cast<int>(cw);
  scaled_crop->y = 0;
  scaled_crop->height = y1 - y0;
  scaled_crop->x = x0 - static_cast<int>(xoff);
  scaled_crop->width = x1 - x0;
  return absl::OkStatus();
}

}  // namespace internal

absl::StatusOr<JpegHeader> ReadJpegHeader(const uint8_t* data, size_t size,
                                          const DecodeLimits& limits) {
  internal::JpegSession& s = internal::JpegSession::ThreadLocal();
  JpegHeader header;
  absl::Status st = s.ReadHeader(data, size, limits, &header);
  if (!st.ok()) return st;
  return header;
}

namespace {

absl::StatusOr<RgbImage> DecodeWhole(const uint8_t* data, size_t size,
                                     const DecodeLimits& limits,
                                     JpegStyle style) {
  internal::JpegSession& s = internal::JpegSession::ThreadLocal();
  JpegHeader header;
  absl::Status st = s.ReadHeader(data, size, limits, &header, style);
  if (!st.ok()) return st;
  RgbImage img;
  st = s.DecodeFull(&img.pixels);
  if (!st.ok()) return st;
  img.height = header.height;
  img.width = header.width;
  return img;
}

}  // namespace

absl::StatusOr<RgbImage> DecodeJpegTfCompat(const uint8_t* data, size_t size,
                                            const DecodeLimits& limits) {
  return DecodeWhole(data, size, limits, JpegStyle::kTensorFlow);
}

absl::StatusOr<RgbImage> DecodeJpegPil(const uint8_t* data, size_t size,
                                       const DecodeLimits& limits) {
  return DecodeWhole(data, size, limits, JpegStyle::kPil);
}

absl::StatusOr<RgbImage> DecodeJpegFast(const uint8_t* data, size_t size,
                                        const DecodeLimits& limits,
                                        const CropBox& crop, int target_height,
                                        int target_width, CropBox* scaled_crop) {
  internal::JpegSession& s = internal::JpegSession::ThreadLocal();
  JpegHeader header;
  absl::Status st = s.ReadHeader(data, size, limits, &header);
  if (!st.ok()) return st;
  if (crop.x < 0 || crop.y < 0 || crop.width <= 0 || crop.height <= 0 ||
      crop.x + crop.width > header.width ||
      crop.y + crop.height > header.height || target_height <= 0 ||
      target_width <= 0) {
    return absl::InvalidArgumentError("DecodeJpegFast: crop outside the image");
  }
  RgbImage img;
  st = s.DecodeRegion(crop, target_height, target_width, &img.pixels,
                      &img.height, &img.width, scaled_crop);
  if (!st.ok()) {
    // The cropped path (jpeg_crop_scanline / jpeg_skip_scanlines) can refuse
    // damaged streams that a full decode accepts; FAST must not fail where
    // TF_COMPAT succeeds, so retry once with the full decode (error path
    // only). Its result or error is the full decode's.
    st = s.ReadHeader(data, size, limits, &header);
    if (!st.ok()) return st;
    st = s.DecodeFull(&img.pixels);
    if (!st.ok()) return st;
    img.height = header.height;
    img.width = header.width;
    *scaled_crop = crop;
  }
  img.pixels.resize(static_cast<size_t>(img.height) * img.width * 3);
  return img;
}

}  // namespace nearprep
