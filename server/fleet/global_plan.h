// The fleet's global epoch plan (issue 14): one deterministic sequence of
// all samples of a partitioned dataset (manifest.h), the same for every
// trainer whatever the trainer count T, and which storage nodes are alive.
// docs/protocol.md ("Fleet datasets: the global plan") is normative;
// client/python/nearprep/fleet_global_plan.py re-implements it.
//
// Inputs: the manifest's partition sizes n_0..n_{C-1} (and sample id starts),
// and params (seed, epoch, block B, window W, global batch G). Algorithm
// version kFleetPlanAlgorithm. Philox key: {seed lo32, seed hi32}; counter
// word 3 = (epoch & 0xFFFFFF) << 8 | tag (epoch < 2^24).
//   1. Partition stream of partition p (n = n_p samples, local offsets):
//      a. blocks of B consecutive offsets (last may be short), nb =
//         ceil(n / B); Fisher-Yates permutation P of [0, nb): for i = nb-1
//         down to 1 swap P[i] with P[draw % (i + 1)], draw = words 0 | 1<<32
//         of Philox({i, p, 0, w3(tag 5)}).
//      b. S = the blocks' offsets in order P (each block in record order).
//      c. aligned windows of W positions of S (the last may be shorter);
//         window w is permuted by the same Fisher-Yates with draw
//         Philox({i, w, p, w3(tag 6)}).
//      Position j of the stream needs only its window: any position is
//      computable without replaying earlier ones.
//   2. Interleave: round r = 0, 1, ... emits the r-th element of every
//      partition with n_p > r, in the order of a Fisher-Yates permutation of
//      [0, C) with draw Philox({i, r, 0, w3(tag 7)}) (inactive partitions
//      skipped). Global position -> round by binary search over
//      sum_p min(n_p, r), then the offset in the round's active order.
//   3. Global batch g = positions [gG, min((g+1)G, N)): the last batch is
//      short, never padded. Trainer k of T (T must divide G) takes positions
//      [gG + k*G/T, gG + (k+1)*G/T) of it (clipped to N; may be empty).
// Sample id at a position = partition_start[p] + stream_p[r].
//
// Version 2 (kFleetPlanAlgorithmV2, docs/protocol.md "Plan v2"): params add
// L = slice_samples (L | G) and K = slice_partitions (K | L); run c = L / K.
// Step 2 interleaves runs instead of positions: partition p has q_p =
// floor(n_p / c) runs (run i = stream positions [ic, (i+1)c)); round r
// emits run r of every partition with q_p > r in the round order of step 2
// (tag 7, so c = 1 is v1 exactly). Positions < N_main = c * sum q_p: run
// z = x / c, o = x % c, round by binary search over sum_p min(q_p, r),
// sample = start_p + stream_p[r*c + o]. Then the tails (stream positions
// [c q_p, n_p), t_p < c each), whole, in the order of a Fisher-Yates
// permutation of [0, C) with draw Philox({i, 0, 0, w3(tag 9)}) (partitions
// with t_p = 0 skipped). Every aligned slice of L positions below N_main
// holds K runs, so at most K partitions.
//
// Version 3 (kFleetPlanAlgorithmV3, docs/protocol.md "Plan v3"): v2 with
// another run interleave. D = the partitions with q_p >= 1 sorted by (q_p
// descending, p ascending); round r's active partitions are D[0, m_r), m_r
// = #{p : q_p > r}; slot j of round r is partition D[pi_r(j)], pi_r a
// keyed permutation of [0, m_r) computed at one point: a 4-round Feistel
// network on 2h bits (4^h >= m_r) with round function word 0 of
// Philox({right half, r, i, w3(tag 10)}), cycle-walked into [0, m_r)
// (RunSlotPermutation). O(1) expected draws per run slot, none per round:
// no O(C) work per global batch. Steps 1, 2, 4 and 5 are v2's.
//
// Thread-safety: GlobalPlan is immutable after Create except for its caches,
// which are guarded by a mutex; what a thread keeps past the lock is either
// a copy or a shared_ptr to an immutable window (an evicted window lives
// until its last holder lets go). Each thread also keeps, per plan (by a
// per-plan id), the last window it read (and, v3, the partition of the last
// run slot it resolved). Any number of threads may call At() on one plan
// (the C++ FleetClient's prefetch threads do).
//
// Cost of At() (docs/benchmarks.md): step 1 is computed per window, never
// per stream: the first read of a partition makes its block permutation
// (ceil(n_p / B) draws, cached), the first read of a window makes that
// window's positions of S (no draw, cached), and a read at window offset o
// makes the window's Fisher-Yates steps down to o that no read made before
// (W draws in all per window, W - o for a run read from offset o); the
// next position of the calling thread's last window takes no lock. The caches are bounded by CacheLimits (entries; each is
// emptied when full). v1 and v2 make round r's order of all C partitions
// (C draws) the first time a round is read, then find a slot's partition by
// one lookup in the round's cached active order; v3 makes no round order
// (O(1) expected draws per run slot). Create is O(C) (a counting sort); the
// v2/v3 tail order (C draws) is made by the first tail read.
#ifndef NEARPREP_SERVER_FLEET_GLOBAL_PLAN_H_
#define NEARPREP_SERVER_FLEET_GLOBAL_PLAN_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace nearprep::fleet {

inline constexpr char kFleetPlanAlgorithm[] = "nearprep-fleet-plan/1";
inline constexpr char kFleetPlanAlgorithmV2[] = "nearprep-fleet-plan/2";
inline constexpr char kFleetPlanAlgorithmV3[] = "nearprep-fleet-plan/3";
// Its counter tags (kTagPartitionBlocks, kTagPartitionWindow,
// kTagRoundOrder, kTagTailOrder, kTagRunSlots) are in the plan core's
// registry (server/plan/philox.h).

struct PlanParams {
  uint64_t seed = 0;
  uint64_t epoch = 0;          // < 2^24
  uint64_t block_samples = 64; // B >= 1
  uint32_t window = 256;       // W >= 1
  uint64_t global_batch = 256; // G >= 1
  uint32_t version = 1;        // 1, 2 or 3 (the algorithm)
  // v2 and v3: at most K = slice_partitions partitions per aligned slice of
  // L = slice_samples positions (K | L, L | G). L = 0 is refused by Create;
  // the clients and the CLI put G / T there (ResolveSlice).
  uint64_t slice_partitions = 4;
  uint64_t slice_samples = 0;
};

// The algorithm name of params.version ("nearprep-fleet-plan/1", "/2", "/3").
const char* PlanAlgorithm(const PlanParams& params);
// v2 or v3 with slice_samples = 0: G / trainers (what the clients and the CLI use
// when no slice is given); otherwise params unchanged.
PlanParams ResolveSlice(PlanParams params, uint32_t trainers);

// The draws (words 0 | 1 << 32 of the Philox block).
uint64_t PartitionBlockDraw(uint64_t seed, uint64_t epoch, uint32_t partition,
                            uint32_t i);
uint64_t PartitionWindowDraw(uint64_t seed, uint64_t epoch, uint32_t partition,
                             uint32_t window, uint32_t i);
uint64_t RoundOrderDraw(uint64_t seed, uint64_t epoch, uint32_t round,
                        uint32_t i);
uint64_t TailOrderDraw(uint64_t seed, uint64_t epoch, uint32_t i);

// Local offset at stream position j of partition p of n samples (step 1).
uint64_t PartitionStreamAt(uint64_t n, uint32_t partition, uint64_t j,
                           const PlanParams& params);
// The whole stream (n entries).
std::vector<uint64_t> PartitionStream(uint64_t n, uint32_t partition,
                                      const PlanParams& params);
// Round r's partition order (a permutation of [0, c)).
std::vector<uint32_t> RoundOrder(uint32_t c, uint32_t round,
                                 const PlanParams& params);

// v2's tail order (a permutation of [0, c)).
std::vector<uint32_t> TailOrder(uint32_t c, const PlanParams& params);

// v3: pi_round(j), the slot permutation of [0, m) (m >= 1, j < m): the
// 4-round Feistel network on 2h bits (4^h >= m; round i's F is word 0 of
// Philox({right half, round, i, w3(tag 10)}) masked to h bits), cycle-walked.
uint32_t RunSlotPermutation(uint64_t seed, uint64_t epoch, uint32_t round, uint32_t m,
                            uint32_t j);

// INVALID_ARGUMENT unless T >= 1 divides G (the message says so).
absl::Status CheckTrainers(uint64_t global_batch, uint32_t trainers);

class GlobalPlan {
 public:
  struct Entry {
    uint64_t sample_id = 0;
    uint32_t partition = 0;
  };
  // The most round orders (v1, v2) kept; the cache is emptied when full.
  static constexpr uint64_t kMaxCachedRounds = 1024;
  // Bounds of the step-1 caches, in entries (4 bytes each) plus
  // kCacheEntryOverhead per cached item; a cache is emptied when an item
  // would take it over its bound (an item is still kept, alone, when it is
  // larger than the bound). The defaults (32 MiB of windows, 16 MiB of block
  // permutations) hold one window of each of 30,000 partitions at
  // W = 256. Tests set small ones to make the caches evict.
  static constexpr uint64_t kCacheEntryOverhead = 16;
  struct CacheLimits {
    uint64_t window_entries = uint64_t{1} << 23;
    uint64_t block_entries = uint64_t{1} << 22;
  };
  // What the step-1 caches did so far (for tests and benchmarks).
  struct CacheCounters {
    // Windows made (two threads missing the same window at once both count).
    uint64_t windows_made = 0;
    uint64_t blocks_made = 0;   // block permutations computed
    uint64_t clears = 0;        // times a step-1 cache was emptied
  };
  // partition_start: C + 1 ascending sample ids (Manifest::partition_start).
  // INVALID_ARGUMENT for bad params (naming them).
  static absl::StatusOr<std::unique_ptr<GlobalPlan>> Create(
      std::vector<uint64_t> partition_start, const PlanParams& params);
  static absl::StatusOr<std::unique_ptr<GlobalPlan>> Create(
      std::vector<uint64_t> partition_start, const PlanParams& params,
      const CacheLimits& limits);

  uint64_t size() const { return n_; }
  uint64_t num_batches() const {
    return (n_ + params_.global_batch - 1) / params_.global_batch;
  }
  const PlanParams& params() const { return params_; }
  // v2, v3: positions [0, main_size()) are runs of c = run() positions; the
  // rest are the tails. v1: run() = 1, main_size() = size().
  uint64_t run() const { return run_; }
  uint64_t main_size() const { return n_main_; }
  // position < size().
  Entry At(uint64_t position) const;
  // Positions [first, second) of trainer k of T in global batch g.
  std::pair<uint64_t, uint64_t> Slice(uint64_t batch, uint32_t k,
                                      uint32_t trainers) const;
  CacheCounters cache_counters() const;

 private:
  // A partition's block permutation P (step 1a) and the slot of its short
  // block in P (nb when no block is short).
  struct Blocks {
    std::vector<uint32_t> perm;
    uint64_t short_slot = 0;
  };
  // A window's local offsets (step 1c), its Fisher-Yates made lazily from
  // the top: steps len-1 down to `done` are made, so a[k] for k >= done is
  // final and never written again (a later step i < done swaps a[i] with
  // a[j <= i]). Reading a[k] for k >= done (acquire) needs no lock; making
  // more steps holds mu. A run read at window offset o pays W - o draws,
  // not W.
  struct Window {
    explicit Window(uint64_t len) : a(len), done(len) {}
    std::vector<uint32_t> a;
    std::atomic<uint64_t> done;
    Mutex mu;
  };

  GlobalPlan() = default;
  // Local offset at stream position x of partition p (step 1): one lookup in
  // the window (the calling thread's last one, or the cache, or made).
  uint64_t LocalAt(uint32_t p, uint64_t x) const;
  // Window `win` of partition p, made outside the lock on a miss. The
  // shared_ptr stays valid whatever the caches do after.
  std::shared_ptr<Window> GetWindow(uint32_t p, uint64_t win) const;
  // a[k] of window `win` of partition p, making the steps it needs.
  uint32_t WindowEntry(Window& w, uint32_t p, uint64_t win, uint64_t k) const;
  // Callers hold mu_. The reference returned is into the cache, and another
  // thread may empty it (when full) as soon as mu_ is released: it must not
  // be used after (issue 23).
  // v1, v2: round r's active partitions (q_p > r) in round order (the
  // round order itself when every partition is active), so that the
  // offset-th is one lookup.
  const std::vector<uint32_t>& ActiveLocked(uint32_t r) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Entry TailAt(uint64_t position) const;

  PlanParams params_;
  std::vector<uint64_t> start_;
  uint64_t run_ = 1;                     // c
  std::vector<uint64_t> runs_;           // q_p
  uint64_t n_main_ = 0;                  // c * sum q_p
  std::vector<uint64_t> sizes_sorted_;   // q_p sorted
  std::vector<uint64_t> sorted_prefix_;  // prefix sums of sizes_sorted_
  std::vector<uint32_t> by_runs_;        // v3: D (q_p >= 1, q_p desc, p asc)
  uint64_t n_ = 0;
  uint64_t id_ = 0;  // distinct per plan made in this process (v3's last-slot memo)
  CacheLimits limits_;
  mutable Mutex mu_;
  mutable std::unordered_map<uint32_t, std::shared_ptr<const Blocks>> blocks_
      ABSL_GUARDED_BY(mu_);
  mutable std::unordered_map<uint64_t, std::shared_ptr<Window>> windows_
      ABSL_GUARDED_BY(mu_);  // key p << 32 | window
  mutable uint64_t block_cost_ ABSL_GUARDED_BY(mu_) = 0;
  mutable uint64_t window_cost_ ABSL_GUARDED_BY(mu_) = 0;
  mutable CacheCounters counters_ ABSL_GUARDED_BY(mu_);
  // Filled by the first TailAt(): partitions with t_p > 0 in tail order,
  // and their first positions - n_main_ (+ the end).
  mutable std::vector<uint32_t> tail_parts_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<uint64_t> tail_first_ ABSL_GUARDED_BY(mu_);
  mutable std::map<uint32_t, std::vector<uint32_t>> rounds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace nearprep::fleet

#endif  // NEARPREP_SERVER_FLEET_GLOBAL_PLAN_H_
