// JPEG decoding with TensorFlow's decode_jpeg(channels=3) semantics.
//
// Built on libjpeg-turbo's libjpeg API (not TurboJPEG) because TF_COMPAT needs
// control TurboJPEG does not expose: JDCT_IFAST, fancy upsampling, the Adobe
// marker for CMYK/YCCK, TensorFlow's end-of-data rule, and, for FAST
// fidelity, scanline cropping/skipping and DCT scaling.
//
// Errors and warnings, as TensorFlow's decode_jpeg (jpeg_mem.cc/jpeg_handle.cc
// with try_recover_truncated = false, acceptable_fraction = 1):
//  - a truncated stream is an error: needing any byte past the end of the
//    data is fatal, also when only the EOI marker is missing (TF_COMPAT reads
//    on to EOI with jpeg_finish_decompress, as TF does);
//  - other fatal libjpeg errors (bad markers, tables, sampling) are errors;
//  - libjpeg warnings are NOT errors: "Corrupt JPEG data: N extraneous bytes
//    before marker", "premature end of data segment" (a marker inside
//    entropy-coded data; the rest of the scan decodes as zeros), bad restart
//    markers, etc. TF returns the image libjpeg produced, and so do we
//    (identical to djpeg's output for the same file);
//  - bytes after the EOI marker are never read.
// FAST decodes stop after the crop's last row, so damage below it (including
// truncation there) goes unnoticed in FAST.
//
// Thread-safety: the functions are reentrant; each call uses its own
// decompressor. Never throws; never calls exit() (libjpeg's error_exit is
// replaced by a longjmp back into the call).
#ifndef NEARPREP_SERVER_IMAGE_JPEG_DECODER_H_
#define NEARPREP_SERVER_IMAGE_JPEG_DECODER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "server/spec/types.h"

namespace nearprep {

struct JpegHeader {
  int height = 0;
  int width = 0;
  int components = 0;      // 1 (gray), 3 (YCbCr/RGB), 4 (CMYK/YCCK).
  bool progressive = false;
  bool arithmetic = false;
};

// Interleaved 8-bit RGB, row-major, height * width * 3 bytes.
struct RgbImage {
  int height = 0;
  int width = 0;
  std::vector<uint8_t> pixels;
};

// Which library's decode to reproduce. Both use libjpeg-turbo with fancy
// upsampling and block smoothing, and replicate grayscale to RGB.
//  kTensorFlow: TF's decode_jpeg: JDCT_IFAST; CMYK/YCCK (libjpeg's CMYK
//    output) to RGB with TF's rule (Adobe files: k*c/255, others:
//    (255-k)*(255-c)/255, truncating).
//  kPil: Pillow's Image.open(...).convert("RGB"): libjpeg's defaults
//    (JDCT_ISLOW); every 4-component image is read as inverted CMYK
//    ("CMYK;I", Pillow assumes Adobe's convention whatever the markers say)
//    and converted with Pillow's cmyk2rgb: with c' = 255 - c etc.,
//    r = nk - (c' * nk) / 255 where nk = k (rounded division as Pillow's
//    MULDIV255: t = a*b + 128, ((t >> 8) + t) >> 8).
enum class JpegStyle { kTensorFlow, kPil };

// Reads only the header. Errors: INVALID_ARGUMENT "not a JPEG" / corrupt
// header; RESOURCE_EXHAUSTED when height*width*components >= limit or a side
// exceeds libjpeg's maximum of 65500 pixels.
absl::StatusOr<JpegHeader> ReadJpegHeader(const uint8_t* data, size_t size,
                                          const DecodeLimits& limits);

// TF_COMPAT decode: IFAST IDCT, fancy upsampling, grayscale replicated to
// RGB, CMYK/YCCK converted with TF's integer rule. A truncated stream or a
// fatal libjpeg error after the header is DATA_LOSS (warnings are not: see
// above); over the limit is RESOURCE_EXHAUSTED; not a JPEG or a bad or
// truncated header is INVALID_ARGUMENT.
absl::StatusOr<RgbImage> DecodeJpegTfCompat(const uint8_t* data, size_t size,
                                            const DecodeLimits& limits);

// Pillow's decode (JpegStyle::kPil) of the whole image, with the same error
// rules as DecodeJpegTfCompat.
absl::StatusOr<RgbImage> DecodeJpegPil(const uint8_t* data, size_t size,
                                       const DecodeLimits& limits);

// FAST decode of the region `crop` (in full-resolution pixels) of the image,
// allowed to skip work: rows and MCU columns outside the crop are not
// IDCT'd, and when the crop is >= 2x the target in both axes the image is
// decoded at 1/2, 1/4 or 1/8 scale. `*scaled_crop` receives the crop in the
// returned image's pixel coordinates (the returned image may be larger than
// the crop by whole MCUs on the left and right). If the cropped decode fails
// (damaged streams that only its skipping path refuses), the full image is
// decoded instead and returned whole, with `*scaled_crop` = `crop`; so FAST
// fails only where DecodeJpegTfCompat fails too, and then with its error.
absl::StatusOr<RgbImage> DecodeJpegFast(const uint8_t* data, size_t size,
                                        const DecodeLimits& limits,
                                        const CropBox& crop, int target_height,
                                        int target_width, CropBox* scaled_crop);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_IMAGE_JPEG_DECODER_H_
