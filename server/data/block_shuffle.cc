// See block_shuffle.h and docs/protocol.md (keep the three descriptions and
// client/python/nearprep/plan.py in step).
#include "server/data/block_shuffle.h"

#include <algorithm>
#include <utility>

#include "server/plan/philox.h"

namespace nearprep {
uint64_t BlockPermutationDraw(uint64_t seed, uint64_t epoch, uint64_t i) {
  const uint32_t w3 = ((Hi32(epoch) & 0xFFFFFFu) << 8) | kTagBlockPermutation;
  return Draw64(Philox4x32({Lo32(i), Hi32(i), Lo32(epoch), w3}, PlanKey(seed)));
}

uint64_t WindowDraw(uint64_t seed, uint64_t epoch, uint64_t window,
                    uint32_t i) {
  const uint32_t w3 = ((Hi32(window) & 0xFFFFFFu) << 8) | kTagWindowShuffle;
  return Draw64(
      Philox4x32({i, Lo32(window), Lo32(epoch), w3}, PlanKey(seed)));
}

std::vector<uint64_t> BlockShuffledOrder(uint64_t n, uint64_t seed,
                                         uint64_t epoch,
                                         const BlockShuffleParams& params) {
  const uint64_t b = std::max<uint64_t>(params.block_samples, 1);
  const uint64_t k = std::max<uint32_t>(params.open_blocks, 1);
  const uint64_t w = std::max<uint32_t>(params.window, 1);
  const uint64_t nb = (n + b - 1) / b;

  // 2. Block permutation.
  std::vector<uint64_t> perm(nb);
  for (uint64_t i = 0; i < nb; ++i) perm[i] = i;
  PlanShuffle(perm.data(), nb,
              [&](uint64_t i) { return BlockPermutationDraw(seed, epoch, i); });

  // 3. Interleave K open blocks.
  struct Lane {
    uint64_t next;  // next sample id
    uint64_t end;   // one past the block's last id
  };
  std::vector<Lane> lanes;
  uint64_t opened = 0;
  auto open = [&](uint64_t block) {
    return Lane{block * b, std::min(n, (block + 1) * b)};
  };
  while (lanes.size() < k && opened < nb) lanes.push_back(open(perm[opened++]));
  std::vector<uint64_t> order;
  order.reserve(n);
  while (!lanes.empty()) {
    for (size_t l = 0; l < lanes.size();) {
      order.push_back(lanes[l].next++);
      if (lanes[l].next == lanes[l].end) {
        if (opened < nb) {
          lanes[l] = open(perm[opened++]);
        } else {
          lanes.erase(lanes.begin() + static_cast<std::ptrdiff_t>(l));
          continue;  // The lanes after it move up; the round goes on.
        }
      }
      ++l;
    }
  }

  // 4. Window shuffle.
  for (uint64_t start = 0, win = 0; start < n; start += w, ++win) {
    const uint64_t len = std::min(w, n - start);
    PlanShuffle(order.data() + start, len, [&](uint64_t i) {
      return WindowDraw(seed, epoch, win, static_cast<uint32_t>(i));
    });
  }
  return order;
}

uint64_t BlockSamplesFor(uint64_t n, uint64_t total_bytes,
                         uint64_t block_bytes) {
  if (n == 0 || total_bytes == 0) return 1;
  const uint64_t mean = std::max<uint64_t>(total_bytes / n, 1);
  return std::max<uint64_t>(block_bytes / mean, 1);
}

}  // namespace nearprep
