// The epoch plan: which samples a stream serves, in which order, with which
// random parameters. Everything is a pure function of the request, so any
// batch can be recomputed anywhere (resume, other shards, other workers).
//
// Glossary
//   order      permutation of the sample ids [0, n) for (seed, epoch)
//   shard      positions shard_index, shard_index + num_shards, ... of order
//   position   index into the shard's sequence of samples
//   batch k    the k-th group of batch_size consecutive *successful* samples
//              of the shard (skipped samples shift later batches)
//
// Random numbers: the plan core's Philox4x32-10 and counter tags
// (server/plan/philox.h); docs/protocol.md restates them with a worked
// example.
//
// Thread-safety: pure functions.
#ifndef NEARPREP_SERVER_DATA_EPOCH_PLAN_H_
#define NEARPREP_SERVER_DATA_EPOCH_PLAN_H_

#include <array>
#include <cstdint>
#include <vector>

#include "server/spec/types.h"
#include "server/plan/philox.h"

namespace nearprep {

// The epoch order: identity when !shuffle, otherwise Fisher-Yates driven by
// Philox (see docs/protocol.md for the exact draw per step).
std::vector<uint64_t> EpochOrder(uint64_t num_samples, uint64_t seed,
                                 uint64_t epoch, bool shuffle);

// The sample ids of shard `shard_index` of `num_shards`, in order.
std::vector<uint64_t> ShardSamples(const std::vector<uint64_t>& order,
                                   uint32_t shard_index, uint32_t num_shards);

// A sample's random parameters for an image of size (height, width).
SampleParams DrawSampleParams(const TransformSpec& spec, uint64_t seed,
                              uint64_t epoch, uint64_t sample_id, int height,
                              int width);

// --- The building blocks of the above (docs/protocol.md), exposed for tests,
// --- tools and backends that resolve a crop before decoding.

// Attempts of the random resized crop before its central fallback.
inline constexpr int kRandomResizedCropAttempts = 10;
// The parameter block after the crop attempts: word 0 is random_hue's draw.
inline constexpr uint32_t kColorBlock = 11;
// FIDELITY_TORCHVISION's blocks (docs/protocol.md): ColorJitter's factors
// (words 0-3: brightness, contrast, saturation, hue) and its order (words
// 0-2: the Fisher-Yates steps 3, 2, 1 of randperm(4)); the auto-augment
// blocks, one per op (RandAugment's op k: block kAugmentBlock + k); the
// RandomErasing block (word 0: whether to erase) and its attempts.
inline constexpr uint32_t kJitterBlock = 12;
inline constexpr uint32_t kJitterOrderBlock = 13;
inline constexpr uint32_t kAugmentBlock = 14;  // .. 29
inline constexpr uint32_t kEraseBlock = 30;
inline constexpr uint32_t kEraseAttemptBlock = 31;  // .. 40
inline constexpr int kEraseAttempts = 10;

// The 64-bit draw of Fisher-Yates step i: words 0 | 1 << 32 of Philox of
// counter {i lo32, i hi32, epoch lo32, (epoch bits 32..55) << 8 | 1}.
uint64_t PermutationDraw(uint64_t seed, uint64_t epoch, uint64_t i);
// Block `block` of a sample's parameter words: Philox of counter
// {id lo32, id hi32, epoch lo32, (epoch bits 32..47) << 16 | block << 8 | 2}.
// Block 0: flip, brightness, saturation, contrast; blocks 1..10: the crop
// attempts; block kColorBlock (11): hue, (unused x3).
std::array<uint32_t, 4> SampleParamWords(uint64_t seed, uint64_t epoch,
                                         uint64_t sample_id, uint32_t block);
// The torchvision augmentations' draws (ColorJitter, auto_augment,
// RandomErasing) into `p`; DrawSampleParams calls it.
void DrawTorchvisionAugmentations(const TransformSpec& spec, uint64_t seed,
                                  uint64_t epoch, uint64_t sample_id,
                                  SampleParams* p);
// Crop boxes of the three modes for an image of height x width (> 0).
CropBox CenterCropBox(int height, int width, float fraction);
CropBox RandomResizedCropBox(const TransformSpec& spec, uint64_t seed,
                             uint64_t epoch, uint64_t sample_id, int height,
                             int width);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_DATA_EPOCH_PLAN_H_
