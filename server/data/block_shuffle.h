// Block shuffle: an epoch order that storage likes. The global shuffle
// (EpochOrder) makes every sample a random small read; the block shuffle
// keeps the determinism rules (the order is a pure function of the request:
// resume, shards and workers are unchanged) but reads consecutive records in
// large blocks. docs/protocol.md is the normative description, and
// client/python/nearprep/plan.py re-implements it.
//
// Algorithm, for n samples and parameters (B, K, W):
//   1. Blocks: block b holds the sample ids [b*B, min((b+1)*B, n)); nb =
//      ceil(n / B). Consecutive ids are consecutive records of a shard, so a
//      block is one large read.
//   2. Block order: a Philox Fisher-Yates permutation P of [0, nb), the same
//      loop as the global shuffle with the draw BlockPermutationDraw.
//   3. Interleave K open blocks: lanes 0..K-1 start with blocks P[0..K-1];
//      in rounds, each lane in turn emits the next sample of its block; a
//      lane whose block is exhausted opens the next unopened block of P, or
//      closes when none is left. This gives a sequence S of all n ids.
//   4. Window shuffle: S is cut into aligned windows of W positions (the
//      last one may be shorter); window w is permuted by Fisher-Yates with
//      the draw WindowDraw(w, i). Aligned windows make any position
//      computable without replaying earlier reads.
// The result is the epoch order; shards, batches and per-sample draws are
// taken from it exactly as from the global shuffle's order.
//
// Randomness trade-off: consecutive positions come from K different blocks,
// and W mixes them further; with K = 1 and W = 1 the order is the block
// permutation alone (each block read in record order). A stream holds about
// K + ceil(W / B) + 1 blocks at once.
//
// Thread-safety: pure functions.
#ifndef NEARPREP_SERVER_DATA_BLOCK_SHUFFLE_H_
#define NEARPREP_SERVER_DATA_BLOCK_SHUFFLE_H_

#include <cstdint>
#include <vector>

namespace nearprep {

// Counter tags: kTagBlockPermutation and kTagWindowShuffle of the plan
// core's registry (server/plan/philox.h).

struct BlockShuffleParams {
  uint64_t block_samples = 1;  // B >= 1
  uint32_t open_blocks = 8;    // K >= 1
  uint32_t window = 256;       // W >= 1
};

// Defaults when a request leaves them 0: K and W; B is the dataset's
// (DatasetInfo.block_samples: about kDefaultBlockBytes of its samples).
inline constexpr uint32_t kDefaultOpenBlocks = 8;
inline constexpr uint32_t kDefaultShuffleWindow = 256;
inline constexpr uint64_t kDefaultBlockBytes = uint64_t{4} << 20;

// The 64-bit draw of step i of the block permutation: words 0 | 1 << 32 of
// Philox of counter {i lo32, i hi32, epoch lo32, (epoch bits 32..55) << 8 |
// kTagBlockPermutation}.
uint64_t BlockPermutationDraw(uint64_t seed, uint64_t epoch, uint64_t i);
// The 64-bit draw of step i (i < W) of window w: Philox of counter
// {i, w lo32, epoch lo32, (w bits 32..55) << 8 | kTagWindowShuffle}.
uint64_t WindowDraw(uint64_t seed, uint64_t epoch, uint64_t window,
                    uint32_t i);

// The block-shuffled order of [0, n) (steps 1-4 above). Parameters of 0
// are treated as 1.
std::vector<uint64_t> BlockShuffledOrder(uint64_t n, uint64_t seed,
                                         uint64_t epoch,
                                         const BlockShuffleParams& params);

// B for a dataset of `total_bytes` in `n` samples: about block_bytes of
// samples per block, at least 1.
uint64_t BlockSamplesFor(uint64_t n, uint64_t total_bytes,
                         uint64_t block_bytes = kDefaultBlockBytes);

}  // namespace nearprep

#endif  // NEARPREP_SERVER_DATA_BLOCK_SHUFFLE_H_
