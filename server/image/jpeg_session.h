// A reusable libjpeg decompressor, one per thread, shared by the public
// decode functions (jpeg_decoder.cc) and the fused preprocessing path
// (preprocess.cc). Reusing it avoids re-creating libjpeg's master structures
// for every image, as TurboJPEG's handle does. Not a public interface.
//
// Each ReadHeader() starts from a fresh libjpeg decompressor (recreating it
// costs ~0.2 us): libjpeg would otherwise carry Huffman/quantization tables
// over from the previous image, unlike TensorFlow's one-decompressor-per-image.
//
// Thread-safety: one JpegSession per thread (ThreadLocal()); not shareable.
// Protocol: ReadHeader(), then at most one of DecodeFull()/DecodeCrop()/
// DecodeRegion(). Any call after an error starts over cleanly.
#ifndef NEARPREP_SERVER_IMAGE_JPEG_SESSION_H_
#define NEARPREP_SERVER_IMAGE_JPEG_SESSION_H_

#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "absl/status/status.h"
#include "server/spec/types.h"
#include "server/image/jpeg_decoder.h"

namespace nearprep {
namespace internal {

class JpegSession {
 public:
  JpegSession();
  ~JpegSession();
  JpegSession(const JpegSession&) = delete;
  JpegSession& operator=(const JpegSession&) = delete;

  // The calling thread's session.
  static JpegSession& ThreadLocal();

  // Parses the header of `data` (which must outlive the decode) and checks
  // the limit. INVALID_ARGUMENT / RESOURCE_EXHAUSTED as in jpeg_decoder.h.
  // `style` picks the IDCT and the CMYK rule of the decodes that follow.
  absl::Status ReadHeader(const uint8_t* data, size_t size,
                          const DecodeLimits& limits, JpegHeader* header,
                          JpegStyle style = JpegStyle::kTensorFlow);

  // Full decode to interleaved RGB (height*width*3 bytes, resized
  // as needed), then reads on to the EOI marker as TensorFlow does.
  // DATA_LOSS on a libjpeg error or on reading past the end of the data;
  // libjpeg warnings (corrupt but decodable data) are counted, not errors.
  absl::Status DecodeFull(std::vector<uint8_t>* rgb);
  // The same into `rgb`, which must hold height*width*3 bytes (every one is
  // written: callers need not initialise it).
  absl::Status DecodeFull(uint8_t* rgb);

  // Decode of the region `crop` of a baseline (sequential) image:
  // the same pixels as DecodeFull's image has there, with less work. Not for
  // progressive images (libjpeg's block smoothing of incomplete coefficients
  // looks at neighbouring blocks, which cropping changes), and callers fall
  // back to DecodeFull on an error or a libjpeg warning during the scan (see
  // preprocess.cc), so results and errors are always the full decode's. Rows above and
  // below the crop are entropy-decoded only (jpeg_skip_scanlines), columns
  // outside it (beyond iMCU alignment) are not IDCT'd (jpeg_crop_scanline),
  // and the stream is read to EOI. A 1-pixel margin around the crop keeps
  // libjpeg's region-edge effects of fancy upsampling outside it, and the
  // window is at least max_h_samp_factor + 1 pixels wide (narrower, libjpeg
  // switches a subsampled component to box upsampling). The result
  // is `*height` x `*width` RGB; `*in_buf` locates the crop in it.
  absl::Status DecodeCrop(const CropBox& crop, std::vector<uint8_t>* rgb,
                          int* height, int* width, CropBox* in_buf);

  // FAST decode of `crop` (full-resolution pixels): DCT scaling by 1/2, 1/4
  // or 1/8 while the crop stays >= 2x the target in both axes, scanline
  // cropping and skipping, and no decoding past the crop's last row. The
  // result is `*height` x `*width` RGB; `*scaled_crop` locates the crop in
  // it.
  absl::Status DecodeRegion(const CropBox& crop, int target_height,
                            int target_width, std::vector<uint8_t>* rgb,
                            int* height, int* width, CropBox* scaled_crop);

  // The DCT scale denominator DecodeRegion uses for this crop and target.
  static int ScaleDenominator(const CropBox& crop, int target_height,
                              int target_width);

  // libjpeg warnings during the last ReadHeader/Decode* (corrupt data that
  // libjpeg decoded anyway), and the text of the first one.
  int warnings() const { return static_cast<int>(err_.pub.num_warnings); }
  const char* first_warning() const { return err_.warning; }

 private:
  struct ErrorManager {
    jpeg_error_mgr pub;
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
    char warning[JMSG_LENGTH_MAX];
    int msg_code;
  };
  static void OnErrorExit(j_common_ptr cinfo);
  static void OnEmitMessage(j_common_ptr cinfo, int msg_level);
  // Memory source with TensorFlow's end-of-data rule (jpeg_handle.cc,
  // try_recover_truncated = false): needing a byte past the end is a fatal
  // error, not libjpeg's inserted EOI plus a warning.
  static void SourceInit(j_decompress_ptr cinfo);
  static boolean SourceFill(j_decompress_ptr cinfo);
  static void SourceSkip(j_decompress_ptr cinfo, long num_bytes);
  static void SourceTerm(j_decompress_ptr cinfo);

  // A fresh decompressor for the next image once this one has read a
  // stream (no tables carried over, as in TensorFlow). False if it cannot
  // be created (out of memory).
  bool Renew();
  absl::Status Failure(absl::StatusCode code, const char* stage);
  // Reads rows [0, rows) of the started decompression into `rgb` (stride
  // output_width*3), converting CMYK with the style's integer rule.
  void ReadRows(int rows, uint8_t* rgb);

  jpeg_decompress_struct cinfo_;
  ErrorManager err_;
  jpeg_source_mgr src_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool cmyk_ = false;
  JpegStyle style_ = JpegStyle::kTensorFlow;
  bool used_ = false;  // cinfo_ has read (part of) a stream since creation.
  std::vector<JSAMPROW> row_ptrs_;
  std::vector<uint8_t> cmyk_rows_;
  std::vector<uint8_t> tail_row_;
};

}  // namespace internal
}  // namespace nearprep

#endif  // NEARPREP_SERVER_IMAGE_JPEG_SESSION_H_
