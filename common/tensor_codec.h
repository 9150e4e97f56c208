// Lossless compression of uint8 image tensors (nearprep.v1.Compression):
// a prediction filter per image, then one zstd frame per image.
//
// Geometry. A tensor is `images` images of `planes` x `rows` x `cols` x
// `channels` bytes, row-major. NHWC uint8 is planes 1, channels 3; NCHW is
// planes 3, channels 1. A row is `cols * channels` bytes; "left" is the same
// channel of the previous pixel of the row, "up" the same byte of the
// previous row of the same plane. Missing neighbours (first column, first
// row) count as 0.
//
// Filters (all arithmetic mod 256):
//   kDeltaZstd     r = x - left                       (PNG "Sub")
//   kGradientZstd  r = x - (left + up - upleft)       (= Sub applied to the
//                                                      PNG "Up" residuals)
// Measured on 224x224 ImageNet batches (docs/benchmarks.md): the gradient
// saves about 7% more than the delta at the same cost; Paeth and MED/LOCO-I
// predictors save 1-3% more again but their decoders are branchy and serial
// per byte, so they are not offered.
//
// Payload. The concatenation of `images` zstd frames, frame i holding the
// filtered bytes of image i (content size and XXH64 checksum in the frame,
// so a damaged payload is detected rather than decoded into wrong pixels).
// Any zstd decoder that reads concatenated frames recovers the filtered
// bytes; docs/protocol.md specifies the inverse filters.
//
// Thread-safety: pure functions (each call uses its own thread's zstd
// context).
#ifndef NEARPREP_COMMON_TENSOR_CODEC_H_
#define NEARPREP_COMMON_TENSOR_CODEC_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace nearprep {

// Values equal nearprep.v1.Compression.
enum class TensorCompression : int {
  kNone = 0,
  kDeltaZstd = 1,
  kGradientZstd = 2,
};

// Whether `value` (a wire enum value) names a compression this build
// implements (kNone included).
bool IsKnownCompression(int value);

// zstd level used when a request leaves it 0, and the accepted range.
// Negative levels are zstd's fast modes, here always with Huffman-coded
// literals: on 224x224 ImageNet batches level -200 takes about 30% less
// compression CPU than level 1 for about 2% more bytes; levels above 1 cost
// much more CPU for under 2% fewer bytes (docs/benchmarks.md).
constexpr int kDefaultCompressionLevel = 1;
constexpr int kMinCompressionLevel = -1000;
constexpr int kMaxCompressionLevel = 19;

struct TensorGeometry {
  uint64_t images = 0;
  uint64_t planes = 1;
  uint64_t rows = 0;
  uint64_t cols = 0;
  uint64_t channels = 3;

  // [n, h, w, c] (channels last) or [n, c, h, w].
  static TensorGeometry Nhwc(uint64_t n, uint64_t h, uint64_t w, uint64_t c) {
    return {n, 1, h, w, c};
  }
  static TensorGeometry Nchw(uint64_t n, uint64_t c, uint64_t h, uint64_t w) {
    return {n, c, h, w, 1};
  }
  uint64_t image_bytes() const { return planes * rows * cols * channels; }
  uint64_t total_bytes() const { return images * image_bytes(); }
};

// Largest payload CompressTensor can produce for `g`.
size_t CompressedBound(const TensorGeometry& g);

// Compresses the g.total_bytes() bytes at `src` into `dst` (capacity
// `dst_capacity` >= CompressedBound(g)); returns the payload size.
// INVALID_ARGUMENT: compression kNone/unknown, level out of range, capacity
// too small; INTERNAL: zstd failed.
absl::StatusOr<size_t> CompressTensor(const TensorGeometry& g,
                                      TensorCompression compression, int level,
                                      const uint8_t* src, uint8_t* dst,
                                      size_t dst_capacity);

// Decodes a payload of `src_size` bytes into g.total_bytes() bytes at `dst`.
// DATA_LOSS, with a message starting "compressed tensor: ", when the payload
// is damaged (bad frame, checksum mismatch, wrong image count or size,
// trailing bytes); INVALID_ARGUMENT for an unknown compression.
absl::Status DecompressTensor(const TensorGeometry& g,
                              TensorCompression compression,
                              const uint8_t* src, size_t src_size,
                              uint8_t* dst);

// The filters alone, in place, on one image of `g` (exposed for tests and
// benchmarks).
void FilterImage(const TensorGeometry& g, TensorCompression compression,
                 const uint8_t* src, uint8_t* dst);
void UnfilterImage(const TensorGeometry& g, TensorCompression compression,
                   uint8_t* image);

}  // namespace nearprep

#endif  // NEARPREP_COMMON_TENSOR_CODEC_H_
