// The plan core: the counter-based generator every plan of the project draws
// from (the epoch plan of server/data, the block shuffle, the fleet's global
// plan of server/fleet), the one Fisher-Yates they all use, and the registry
// of counter tags that keeps their streams apart. Below both data/ and
// fleet/; it knows nothing of datasets or manifests. docs/protocol.md is the
// normative description (client/python/nearprep/philox.py is the Python
// twin).
//
// Philox4x32-10 (Salmon et al., SC'11): key = the seed split in two 32-bit
// words (lo, hi), 128-bit counter. A uniform float u in [0,1) from a 32-bit
// word x: bit-cast (0x3F800000 | (x & 0x7FFFFF)) minus 1.0f (23 random
// mantissa bits; the rule TensorFlow's random ops use).
//
// Thread-safety: pure functions.
#ifndef NEARPREP_SERVER_PLAN_PHILOX_H_
#define NEARPREP_SERVER_PLAN_PHILOX_H_

#include <array>
#include <cstdint>
#include <utility>

namespace nearprep {

// Philox4x32-10 block function.
std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter,
                                   std::array<uint32_t, 2> key);
// The uniform float rule above.
float UniformFloat(uint32_t x);
// The Philox key of a request: {seed lo32, seed hi32}.
std::array<uint32_t, 2> PlanKey(uint64_t seed);

inline uint32_t Lo32(uint64_t v) { return static_cast<uint32_t>(v); }
inline uint32_t Hi32(uint64_t v) { return static_cast<uint32_t>(v >> 32); }
// The 64-bit draw of a block: words 0 | 1 << 32.
inline uint64_t Draw64(const std::array<uint32_t, 4>& w) {
  return uint64_t{w[0]} | (uint64_t{w[1]} << 32);
}

// Counter tags: the low 8 bits of counter word 3, one per kind of draw, so
// no two plans ever read the same counter. Every tag of the project is here.
inline constexpr uint32_t kTagPermutation = 1;       // epoch order (data/)
inline constexpr uint32_t kTagSampleParams = 2;      // per-sample params
inline constexpr uint32_t kTagBlockPermutation = 3;  // block shuffle: blocks
inline constexpr uint32_t kTagWindowShuffle = 4;     // block shuffle: windows
inline constexpr uint32_t kTagPartitionBlocks = 5;   // fleet: partition blocks
inline constexpr uint32_t kTagPartitionWindow = 6;   // fleet: windows
inline constexpr uint32_t kTagRoundOrder = 7;        // fleet: round order
inline constexpr uint32_t kTagBatchMix = 8;          // MixUp / CutMix
inline constexpr uint32_t kTagTailOrder = 9;         // fleet plan v2: tails
inline constexpr uint32_t kTagRunSlots = 10;         // fleet plan v3: Feistel
inline constexpr uint32_t kPlanTags[] = {
    kTagPermutation,     kTagSampleParams,    kTagBlockPermutation,
    kTagWindowShuffle,   kTagPartitionBlocks, kTagPartitionWindow,
    kTagRoundOrder,      kTagBatchMix,        kTagTailOrder,
    kTagRunSlots};
constexpr bool PlanTagsDistinct() {
  for (uint32_t a : kPlanTags) {
    if (a == 0 || a > 0xFF) return false;
    int same = 0;
    for (uint32_t b : kPlanTags) same += a == b;
    if (same != 1) return false;
  }
  return true;
}
static_assert(PlanTagsDistinct(), "counter tags must be distinct bytes");

// Fisher-Yates as every plan of the protocol applies it: for i = n-1 down to
// 1, swap a[i] with a[draw(i) % (i + 1)]; draw(i) is the 64-bit draw of
// step i.
template <class T, class DrawFn>
void PlanShuffle(T* a, uint64_t n, DrawFn&& draw) {
  for (uint64_t i = n; i-- > 1;) {
    using std::swap;
    swap(a[i], a[static_cast<uint64_t>(draw(i)) % (i + 1)]);
  }
}

}  // namespace nearprep

#endif  // NEARPREP_SERVER_PLAN_PHILOX_H_
