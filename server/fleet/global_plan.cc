// See global_plan.h and docs/protocol.md (keep them and
// client/python/nearprep/fleet_global_plan.py in step).
#include "server/fleet/global_plan.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>

#include "absl/strings/str_cat.h"
#include "server/plan/philox.h"

namespace nearprep::fleet {
namespace {

uint64_t Draw(uint32_t w0, uint32_t w1, uint32_t w2, uint64_t seed,
              uint64_t epoch, uint32_t tag) {
  const uint32_t w3 = (static_cast<uint32_t>(epoch & 0xFFFFFFu) << 8) | tag;
  return Draw64(Philox4x32({w0, w1, w2, w3}, PlanKey(seed)));
}

// Position j of S (step 1b) as (slot in the block permutation, offset in
// that block): blocks of b, but the one at short_slot holds last_len.
struct SlotOffset {
  uint64_t slot, off;
};
SlotOffset SSlot(uint64_t j, uint64_t b, uint64_t short_slot, uint64_t last_len) {
  if (j < short_slot * b) return {j / b, j % b};
  if (j < short_slot * b + last_len) return {short_slot, j - short_slot * b};
  const uint64_t k = j - short_slot * b - last_len;  // into the later blocks
  return {short_slot + 1 + k / b, k % b};
}

// Local offset at position j of S (step 1b): blocks in permuted order.
uint64_t SAt(const std::vector<uint64_t>& perm, uint64_t n, uint64_t b,
             uint64_t j) {
  const uint64_t nb = perm.size();
  const uint64_t last_len = n - (nb - 1) * b;  // block nb-1 may be short
  // Slot of the short block in perm.
  uint64_t short_slot = nb;
  if (last_len != b) {
    short_slot = static_cast<uint64_t>(
        std::find(perm.begin(), perm.end(), nb - 1) - perm.begin());
  }
  const SlotOffset at = SSlot(j, b, short_slot, last_len);
  return perm[at.slot] * b + at.off;
}

std::vector<uint64_t> BlockPerm(uint64_t n, uint32_t partition,
                                const PlanParams& p) {
  const uint64_t b = std::max<uint64_t>(p.block_samples, 1);
  const uint64_t nb = (n + b - 1) / b;
  std::vector<uint64_t> perm(nb);
  for (uint64_t i = 0; i < nb; ++i) perm[i] = i;
  PlanShuffle(perm.data(), nb, [&](uint64_t i) {
    return PartitionBlockDraw(p.seed, p.epoch, partition,
                              static_cast<uint32_t>(i));
  });
  return perm;
}

// Window permutation of `len` entries: where position i of the window takes
// its element from (Fisher-Yates applied to the identity).
std::vector<uint64_t> WindowPerm(uint64_t len, uint32_t partition,
                                 uint32_t window, const PlanParams& p) {
  std::vector<uint64_t> idx(len);
  for (uint64_t i = 0; i < len; ++i) idx[i] = i;
  PlanShuffle(idx.data(), len, [&](uint64_t i) {
    return PartitionWindowDraw(p.seed, p.epoch, partition, window,
                               static_cast<uint32_t>(i));
  });
  return idx;
}

}  // namespace

uint64_t PartitionBlockDraw(uint64_t seed, uint64_t epoch, uint32_t partition,
                            uint32_t i) {
  return Draw(i, partition, 0, seed, epoch, kTagPartitionBlocks);
}
uint64_t PartitionWindowDraw(uint64_t seed, uint64_t epoch, uint32_t partition,
                             uint32_t window, uint32_t i) {
  return Draw(i, window, partition, seed, epoch, kTagPartitionWindow);
}
uint64_t RoundOrderDraw(uint64_t seed, uint64_t epoch, uint32_t round,
                        uint32_t i) {
  return Draw(i, round, 0, seed, epoch, kTagRoundOrder);
}

uint64_t PartitionStreamAt(uint64_t n, uint32_t partition, uint64_t j,
                           const PlanParams& params) {
  const uint64_t b = std::max<uint64_t>(params.block_samples, 1);
  const uint64_t w = std::max<uint32_t>(params.window, 1);
  const std::vector<uint64_t> perm = BlockPerm(n, partition, params);
  const uint64_t win = j / w;
  const uint64_t start = win * w;
  const uint64_t len = std::min(w, n - start);
  const std::vector<uint64_t> idx =
      WindowPerm(len, partition, static_cast<uint32_t>(win), params);
  return SAt(perm, n, b, start + idx[j - start]);
}

std::vector<uint64_t> PartitionStream(uint64_t n, uint32_t partition,
                                      const PlanParams& params) {
  const uint64_t b = std::max<uint64_t>(params.block_samples, 1);
  const uint64_t w = std::max<uint32_t>(params.window, 1);
  const std::vector<uint64_t> perm = BlockPerm(n, partition, params);
  std::vector<uint64_t> s;
  s.reserve(n);
  for (uint64_t blk : perm) {
    for (uint64_t o = blk * b; o < std::min(n, (blk + 1) * b); ++o) s.push_back(o);
  }
  for (uint64_t start = 0, win = 0; start < n; start += w, ++win) {
    const uint64_t len = std::min(w, n - start);
    PlanShuffle(s.data() + start, len, [&](uint64_t i) {
      return PartitionWindowDraw(params.seed, params.epoch, partition,
                                 static_cast<uint32_t>(win),
                                 static_cast<uint32_t>(i));
    });
  }
  return s;
}

uint64_t TailOrderDraw(uint64_t seed, uint64_t epoch, uint32_t i) {
  return Draw(i, 0, 0, seed, epoch, kTagTailOrder);
}

std::vector<uint32_t> TailOrder(uint32_t c, const PlanParams& params) {
  std::vector<uint32_t> order(c);
  for (uint32_t i = 0; i < c; ++i) order[i] = i;
  PlanShuffle(order.data(), c, [&](uint64_t i) {
    return TailOrderDraw(params.seed, params.epoch, static_cast<uint32_t>(i));
  });
  return order;
}

uint32_t RunSlotPermutation(uint64_t seed, uint64_t epoch, uint32_t round, uint32_t m,
                            uint32_t j) {
  if (m <= 1) return 0;
  uint32_t h = 1;
  while ((uint64_t{1} << (2 * h)) < m) ++h;  // 4^h >= m, h <= 16
  const uint64_t mask = (uint64_t{1} << h) - 1;
  const std::array<uint32_t, 2> key = PlanKey(seed);
  const uint32_t w3 = (static_cast<uint32_t>(epoch & 0xFFFFFFu) << 8) | kTagRunSlots;
  uint64_t x = j;
  do {  // E, cycle-walked until the value is < m (at most 4^h / m <= 4 E on average)
    uint64_t lh = x >> h, rh = x & mask;
    for (uint32_t i = 0; i < 4; ++i) {
      const uint64_t f = Philox4x32({static_cast<uint32_t>(rh), round, i, w3}, key)[0] & mask;
      const uint64_t t = lh ^ f;
      lh = rh;
      rh = t;
    }
    x = (lh << h) | rh;
  } while (x >= m);
  return static_cast<uint32_t>(x);
}

const char* PlanAlgorithm(const PlanParams& params) {
  return params.version == 3   ? kFleetPlanAlgorithmV3
         : params.version == 2 ? kFleetPlanAlgorithmV2
                               : kFleetPlanAlgorithm;
}

PlanParams ResolveSlice(PlanParams params, uint32_t trainers) {
  if ((params.version == 2 || params.version == 3) && params.slice_samples == 0 &&
      trainers > 0) {
    params.slice_samples = params.global_batch / trainers;
  }
  return params;
}

std::vector<uint32_t> RoundOrder(uint32_t c, uint32_t round,
                                 const PlanParams& params) {
  std::vector<uint32_t> order(c);
  for (uint32_t i = 0; i < c; ++i) order[i] = i;
  PlanShuffle(order.data(), c, [&](uint64_t i) {
    return RoundOrderDraw(params.seed, params.epoch, round,
                          static_cast<uint32_t>(i));
  });
  return order;
}

absl::Status CheckTrainers(uint64_t global_batch, uint32_t trainers) {
  if (trainers == 0 || global_batch % trainers != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trainers: T = ", trainers, " must be >= 1 and divide the global batch G = ",
        global_batch, " (each trainer takes G / T positions of every global batch)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GlobalPlan>> GlobalPlan::Create(
    std::vector<uint64_t> partition_start, const PlanParams& params) {
  return Create(std::move(partition_start), params, CacheLimits{});
}

absl::StatusOr<std::unique_ptr<GlobalPlan>> GlobalPlan::Create(
    std::vector<uint64_t> partition_start, const PlanParams& params,
    const CacheLimits& limits) {
  if (partition_start.size() < 2) {
    return absl::InvalidArgumentError("partitions: at least one is needed");
  }
  if (params.epoch >= (uint64_t{1} << 24)) {
    return absl::InvalidArgumentError(
        absl::StrCat("epoch: must be < 2^24 in a fleet plan, got ", params.epoch));
  }
  if (params.block_samples == 0 || params.window == 0 || params.global_batch == 0) {
    return absl::InvalidArgumentError(
        "block_samples, window, global_batch: must be >= 1");
  }
  if (params.window > (1u << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("window: must be <= 1048576, got ", params.window));
  }
  if (params.version < 1 || params.version > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan_version: must be 1, 2 or 3, got ", params.version));
  }
  uint64_t run = 1;
  if (params.version != 1) {
    const uint64_t g = params.global_batch, l = params.slice_samples,
                   k = params.slice_partitions;
    if (l == 0 || g % l != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "slice_samples: L = ", l, " must be >= 1 and divide the global batch G = ", g,
          " (plan v", params.version, ": at most K partitions per aligned slice of L)"));
    }
    if (k == 0 || l % k != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "slice_partitions: K = ", k, " must be >= 1 and divide the slice L = ", l,
          " (plan v", params.version, ": runs of L / K samples)"));
    }
    run = l / k;
  }
  std::unique_ptr<GlobalPlan> plan(new GlobalPlan());
  static std::atomic<uint64_t> next_id{1};
  plan->id_ = next_id.fetch_add(1, std::memory_order_relaxed);
  plan->params_ = params;
  plan->limits_ = limits;
  plan->run_ = run;
  plan->runs_.reserve(partition_start.size() - 1);
  for (size_t p = 1; p < partition_start.size(); ++p) {
    if (partition_start[p] < partition_start[p - 1]) {
      return absl::InvalidArgumentError("partitions: starts must ascend");
    }
    // (< 2^32 samples means < 2^32 blocks too, whatever B >= 1.)
    const uint64_t size = partition_start[p] - partition_start[p - 1];
    if (size >= (uint64_t{1} << 32)) {
      return absl::InvalidArgumentError("partitions: a partition must hold < 2^32 samples");
    }
    // q_p (a 32-bit division when c fits: this loop is O(C) per plan).
    plan->runs_.push_back(run == 1 ? size
                          : run < (uint64_t{1} << 32)
                              ? static_cast<uint32_t>(size) / static_cast<uint32_t>(run)
                              : 0);
  }
  plan->n_ = partition_start.back() - partition_start.front();
  plan->start_ = std::move(partition_start);
  // sizes_sorted_ (q ascending) and, for v3, D (q_p >= 1, q descending, p
  // ascending): a counting sort when the largest q is not far above C (the
  // common case, O(C) per plan: each trainer makes a plan per epoch), a
  // comparison sort otherwise.
  const std::vector<uint64_t>& q = plan->runs_;
  const uint64_t max_q = *std::max_element(q.begin(), q.end());
  if (max_q <= 4 * q.size() + 1024) {
    std::vector<uint32_t> first(max_q + 2, 0);  // first[v + 1]: count of q = v, then prefix
    for (uint64_t v : q) ++first[v + 1];
    for (uint64_t v = 0; v <= max_q; ++v) first[v + 1] += first[v];
    plan->sizes_sorted_.resize(q.size());
    for (uint64_t v = 0; v <= max_q; ++v) {
      std::fill(plan->sizes_sorted_.begin() + first[v], plan->sizes_sorted_.begin() + first[v + 1],
                v);
    }
    if (params.version == 3) {
      // Slot of the first partition with q = v in D: the count of q > v.
      const uint32_t c = static_cast<uint32_t>(q.size());
      std::vector<uint32_t> next(max_q + 1);
      for (uint64_t v = 0; v <= max_q; ++v) next[v] = c - first[v + 1];
      plan->by_runs_.resize(c - first[1]);  // q_p >= 1
      for (uint32_t p = 0; p < c; ++p) {
        if (q[p] > 0) plan->by_runs_[next[q[p]]++] = p;
      }
    }
  } else {
    plan->sizes_sorted_ = q;
    std::sort(plan->sizes_sorted_.begin(), plan->sizes_sorted_.end());
    if (params.version == 3) {
      for (uint32_t p = 0; p < q.size(); ++p) {
        if (q[p] > 0) plan->by_runs_.push_back(p);
      }
      std::stable_sort(plan->by_runs_.begin(), plan->by_runs_.end(),
                       [&q](uint32_t a, uint32_t b) { return q[a] > q[b]; });
    }
  }
  plan->sorted_prefix_.assign(plan->sizes_sorted_.size() + 1, 0);
  for (size_t i = 0; i < plan->sizes_sorted_.size(); ++i) {
    plan->sorted_prefix_[i + 1] = plan->sorted_prefix_[i] + plan->sizes_sorted_[i];
  }
  plan->n_main_ = run * plan->sorted_prefix_.back();
  return plan;
}

std::shared_ptr<GlobalPlan::Window> GlobalPlan::GetWindow(uint32_t p, uint64_t win) const {
  const uint64_t key = (uint64_t{p} << 32) | win;
  std::shared_ptr<const Blocks> blocks;
  {
    MutexLock lock(&mu_);
    auto it = windows_.find(key);
    if (it != windows_.end()) return it->second;
    auto bt = blocks_.find(p);
    if (bt != blocks_.end()) blocks = bt->second;
  }
  // A miss: make what is missing without the lock (pure functions of the
  // params), then publish it (another thread may have made the same).
  const uint64_t n = start_[p + 1] - start_[p];
  const uint64_t b = params_.block_samples;
  const bool made_blocks = blocks == nullptr;
  if (made_blocks) {
    auto made = std::make_shared<Blocks>();
    const uint64_t nb = (n + b - 1) / b;
    made->perm.resize(nb);
    for (uint64_t i = 0; i < nb; ++i) made->perm[i] = static_cast<uint32_t>(i);
    PlanShuffle(made->perm.data(), nb, [&](uint64_t i) {
      return PartitionBlockDraw(params_.seed, params_.epoch, p, static_cast<uint32_t>(i));
    });
    made->short_slot = nb;
    if (nb > 0 && n % b != 0) {
      made->short_slot = static_cast<uint64_t>(
          std::find(made->perm.begin(), made->perm.end(), static_cast<uint32_t>(nb - 1)) -
          made->perm.begin());
    }
    blocks = std::move(made);
  }
  // The window's positions of S (step 1b), then its permutation (step 1c).
  const uint64_t w = params_.window;
  const uint64_t first = win * w;
  const uint64_t len = std::min(w, n - first);
  auto window = std::make_shared<Window>(len);
  {
    const std::vector<uint32_t>& perm = blocks->perm;
    const uint64_t nb = perm.size(), ss = blocks->short_slot;
    const uint64_t last_len = n - (nb - 1) * b;
    // Slot and offset in it of S position `first` (as SAt).
    const SlotOffset at = SSlot(first, b, ss, last_len);
    uint64_t slot = at.slot, off = at.off;
    uint32_t* out = window->a.data();
    for (uint64_t i = 0; i < len;) {
      const uint64_t blk = perm[slot];
      const uint64_t blk_len = blk == nb - 1 ? last_len : b;
      const uint64_t take = std::min(blk_len - off, len - i);
      const uint32_t base = static_cast<uint32_t>(blk * b + off);
      for (uint64_t t = 0; t < take; ++t) out[i + t] = base + static_cast<uint32_t>(t);
      i += take;
      ++slot;
      off = 0;
    }
  }  // (the permutation's steps are made by WindowEntry, as far as read)
  MutexLock lock(&mu_);
  ++counters_.windows_made;
  if (made_blocks) {
    ++counters_.blocks_made;
    const uint64_t cost = blocks->perm.size() + kCacheEntryOverhead;
    if (blocks_.find(p) == blocks_.end()) {
      if (block_cost_ + cost > limits_.block_entries && !blocks_.empty()) {
        blocks_.clear();
        block_cost_ = 0;
        ++counters_.clears;
      }
      blocks_.emplace(p, std::move(blocks));
      block_cost_ += cost;
    }
  }
  auto [it, inserted] = windows_.try_emplace(key);
  if (!inserted) return it->second;  // made by another thread meanwhile (the same)
  const uint64_t cost = len + kCacheEntryOverhead;
  if (window_cost_ + cost > limits_.window_entries && windows_.size() > 1) {
    windows_.clear();
    window_cost_ = 0;
    ++counters_.clears;
    it = windows_.try_emplace(key).first;
  }
  it->second = window;
  window_cost_ += cost;
  return window;
}

uint32_t GlobalPlan::WindowEntry(Window& w, uint32_t p, uint64_t win, uint64_t k) const {
  if (k >= w.done.load(std::memory_order_acquire)) return w.a[k];
  MutexLock lock(&w.mu);
  const uint64_t done = w.done.load(std::memory_order_relaxed);
  if (k < done) {
    // PlanShuffle's steps done-1 down to max(k, 1) (step 1 also fixes a[0]).
    uint32_t* a = w.a.data();
    const uint64_t stop = std::max<uint64_t>(k, 1);
    for (uint64_t i = done; i-- > stop;) {
      const uint64_t d = PartitionWindowDraw(params_.seed, params_.epoch, p,
                                             static_cast<uint32_t>(win), static_cast<uint32_t>(i));
      std::swap(a[i], a[d % (i + 1)]);
    }
    w.done.store(k, std::memory_order_release);
  }
  return w.a[k];
}

uint64_t GlobalPlan::LocalAt(uint32_t p, uint64_t x) const {
  // Each thread keeps the last window it read (shared with the cache, or
  // outliving it when evicted): the positions of a run are read in order.
  struct LastWindow {
    uint64_t plan = 0, window = 0;
    uint32_t partition = 0;
    std::shared_ptr<Window> data;
  };
  thread_local LastWindow last;
  const uint64_t win = x / params_.window;
  if (last.plan != id_ || last.partition != p || last.window != win) {
    last.data = GetWindow(p, win);
    last.plan = id_;
    last.partition = p;
    last.window = win;
  }
  return WindowEntry(*last.data, p, win, x - win * params_.window);
}

GlobalPlan::CacheCounters GlobalPlan::cache_counters() const {
  MutexLock lock(&mu_);
  return counters_;
}
const std::vector<uint32_t>& GlobalPlan::ActiveLocked(uint32_t r) const {
  auto it = rounds_.find(r);
  if (it != rounds_.end()) return it->second;
  if (rounds_.size() >= kMaxCachedRounds) rounds_.clear();
  std::vector<uint32_t> order = RoundOrder(static_cast<uint32_t>(runs_.size()), r, params_);
  if (sizes_sorted_.front() <= r) {  // some partition is done: keep the active ones
    const uint64_t* runs = runs_.data();
    order.erase(std::remove_if(order.begin(), order.end(),
                               [runs, r](uint32_t p) { return runs[p] <= r; }),
                order.end());
  }
  return rounds_.emplace(r, std::move(order)).first->second;
}

GlobalPlan::Entry GlobalPlan::TailAt(uint64_t position) const {
  if (position >= n_) return Entry{};
  const uint64_t y = position - n_main_;
  uint32_t p;
  uint64_t x;  // stream position in partition p
  {
    MutexLock lock(&mu_);
    if (tail_first_.empty()) {  // v2, v3 tails: O(C) draws, once per plan, when first read
      const uint32_t c = static_cast<uint32_t>(runs_.size());
      tail_first_.push_back(0);
      for (uint32_t q : TailOrder(c, params_)) {
        const uint64_t t = start_[q + 1] - start_[q] - run_ * runs_[q];
        if (t == 0) continue;
        tail_parts_.push_back(q);
        tail_first_.push_back(tail_first_.back() + t);
      }
    }
    const size_t i = static_cast<size_t>(
        std::upper_bound(tail_first_.begin(), tail_first_.end(), y) - tail_first_.begin() - 1);
    if (i >= tail_parts_.size()) return Entry{};  // position >= size()
    p = tail_parts_[i];
    x = run_ * runs_[p] + (y - tail_first_[i]);
  }
  return Entry{start_[p] + LocalAt(p, x), p};
}

GlobalPlan::Entry GlobalPlan::At(uint64_t position) const {
  if (position >= n_main_) return TailAt(position);
  const uint64_t j = position % run_;  // offset in the run
  position /= run_;                    // the run (v1: the position)
  // Runs before round r: sum_p min(q_p, r).
  const auto before = [&](uint64_t r) {
    const size_t k = static_cast<size_t>(
        std::lower_bound(sizes_sorted_.begin(), sizes_sorted_.end(), r) -
        sizes_sorted_.begin());  // partitions with n_p < r
    return sorted_prefix_[k] + r * (sizes_sorted_.size() - k);
  };
  uint64_t lo = 0, hi = sizes_sorted_.back();  // round in [lo, hi)
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (before(mid) <= position) lo = mid; else hi = mid;
  }
  const uint64_t r = lo;
  const uint64_t offset = position - before(r);
  if (params_.version == 3) {
    // m_r = #{p : q_p > r}; the slot's partition is D[pi_r(offset)], no
    // round order (drawn outside the lock: a pure function).
    const uint64_t m = static_cast<uint64_t>(
        sizes_sorted_.end() - std::upper_bound(sizes_sorted_.begin(), sizes_sorted_.end(), r));
    if (offset >= m) return Entry{};  // unreachable for position < size()
    // The c positions of a run slot are usually asked for one after the
    // other: each thread keeps its last slot's partition (per plan, by id).
    struct LastSlot {
      uint64_t plan = 0, round = 0, slot = 0;
      uint32_t partition = 0;
    };
    thread_local LastSlot last;
    uint32_t p;
    if (last.plan == id_ && last.round == r && last.slot == offset) {
      p = last.partition;
    } else {
      p = by_runs_[RunSlotPermutation(params_.seed, params_.epoch, static_cast<uint32_t>(r),
                                      static_cast<uint32_t>(m), static_cast<uint32_t>(offset))];
      last = LastSlot{id_, r, offset, p};
    }
    return Entry{start_[p] + LocalAt(p, r * run_ + j), p};
  }
  // v1, v2: the offset-th active partition of round r, one lookup in the
  // cached active order (nothing read from the caches outlives the lock).
  uint32_t p;
  {
    MutexLock lock(&mu_);
    const std::vector<uint32_t>& active = ActiveLocked(static_cast<uint32_t>(r));
    if (offset >= active.size()) return Entry{};  // unreachable for position < size()
    p = active[offset];
  }
  return Entry{start_[p] + LocalAt(p, r * run_ + j), p};
}

std::pair<uint64_t, uint64_t> GlobalPlan::Slice(uint64_t batch, uint32_t k,
                                                uint32_t trainers) const {
  const uint64_t per = params_.global_batch / trainers;
  const uint64_t a = std::min(n_, batch * params_.global_batch + k * per);
  return {a, std::min(n_, a + per)};
}

}  // namespace nearprep::fleet
