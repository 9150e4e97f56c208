// Batch-level MixUp and CutMix as torchvision 0.14's classification
// reference defines them (references/classification/transforms.py:
// RandomMixup and RandomCutmix with p = 1.0, and train.py's RandomChoice
// between them), with the random numbers drawn from Philox so that a batch's
// parameters are a function of (seed, epoch, shard, batch index) only.
// docs/protocol.md ("MixUp and CutMix") is the normative description; the Python twin is
// client/python/nearprep/batch_mix.py.
//
// Pairing: sample i is mixed with sample (i + n - 1) % n, torchvision's
// `batch.roll(1, 0)`. timm's Mixup pairs sample i with n - 1 - i
// (`x.flip(0)`) and needs an even batch (the middle sample of an odd batch
// would be paired with itself); the roll pairs every sample with another one
// for any n >= 2, and it is the convention of the reference script whose
// arithmetic this file reproduces.
//
// Thread-safety: pure functions; ApplyBatchMix writes only `tensor` and
// `scratch`.
#ifndef NEARPREP_SERVER_PIPELINE_BATCH_MIX_H_
#define NEARPREP_SERVER_PIPELINE_BATCH_MIX_H_

#include <cstdint>
#include <vector>

#include "server/spec/types.h"

namespace nearprep {

// BatchMixSpec, BatchMixKind and BatchMixParams are in server/spec/types.h
// (the pipeline's BatchData carries the draw). With both alphas > 0 each
// batch picks one of them, p = 0.5 each (train.py's RandomChoice); alphas
// must be finite (the caller validates). BatchMixParams::lambda is the
// weight of each sample's own image and label: MixUp's Beta draw, CutMix's
// area-corrected 1 - box area / (H * W), 1 for kNone; the box's rows
// [y1, y2) and columns [x1, x2) come from the partner (possibly empty; all
// 0 for kNone and kMixUp).

// The draw of batch `batch_index` of shard `shard_index` (docs/protocol.md ("MixUp and CutMix"),
// "The draw"). `height` and `width` (>= 1) are the output image's: CutMix's
// box depends on them. Only the low 32 bits of `batch_index` enter the
// counter: batches b and b + 2^32 draw the same, so the caller refuses
// batch indices >= 2^32; likewise only bits 0..47 of `epoch` count.
BatchMixParams DrawBatchMix(const BatchMixSpec& spec, uint64_t seed,
                            uint64_t epoch, uint32_t shard_index,
                            uint64_t batch_index, int height, int width);

// The partner of sample i in a batch of n: (i + n - 1) % n.
inline int BatchMixPartner(int i, int n) { return (i + n - 1) % n; }

// One element of `dtype` at `p` (unaligned) as float32: float16 and
// bfloat16 exactly, uint8 as float(v) * float32(1/255) (the value the uint8
// output of server/image stands for).
float BatchMixLoad(const uint8_t* p, DType dtype);
// Stores `v` as one element of `dtype` at `out` with server/image's rounding
// (its StoreElement, restated: float16 and bfloat16 round to nearest even,
// NaN to a quiet NaN, float16 overflow to infinity; uint8 round(clip(v, 0,
// 1) * 255) with halves away from zero, NaN to 0).
void BatchMixStore(float v, DType dtype, uint8_t* out);

// Mixes the n images (3 channels, height x width, of `dtype` in `layout`)
// of the batch tensor at `tensor` in place, as torchvision's reference does
// on the float32 batch:
// - kMixUp: out[i] = x[i] * lambda + x[partner] * float32(1 - double(lambda)),
//   each product and the sum rounded to float32. Elements are converted to
//   float32 first (uint8: float(v) * float32(1/255)) and the result back
//   with the dtype's rounding (float16 / bfloat16 to nearest even, uint8
//   round(clip(x, 0, 1) * 255) with halves away from zero).
// - kCutMix: the box's pixels of every image are replaced by its partner's
//   original ones (a byte copy: no conversion, any dtype).
// - kNone: nothing.
// `scratch` (resized as needed, reusable across calls) holds the original of
// image n-1, the partner of image 0. The box must lie inside the image.
void ApplyBatchMix(const BatchMixParams& p, DType dtype, Layout layout, int n,
                   int height, int width, uint8_t* tensor,
                   std::vector<uint8_t>* scratch);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_PIPELINE_BATCH_MIX_H_
